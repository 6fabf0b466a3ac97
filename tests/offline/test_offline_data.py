"""OfflineData (rlmod.offline.offline_data) on small recordings: which spaces each module is
built from (recorded ones where the config sets none; the configured observation Box
where it may differ; a Discrete observation one-hot through the connectors), a configured
space that misfits refused at construction, the footer checks run before any read, the
multi-agent rules (no env-to-module connector, spaces stored per trained module, at least
one module training), and what `sample` hands out.

MARWIL and BC training on such data are tested in tests/offline/test_learning.py and
tests/offline/test_multi_agent.py; the checks' details in tests/offline/test_checks.py.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.env import MultiAgentEnvRunner
from rlmod.errors import OfflineDataError
from rlmod.offline import record_episodes
from rlmod.offline.offline_data import OfflineData
from rlmod.offline.writer import ENV_KEY
from rlmod.testing import MultiAgentCartPole, cartpole_expert


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cartpole")
    record_episodes(
        gym.make("CartPole-v1"), cartpole_expert, num_episodes=2, output_dir=out, seed=0
    )
    return out


@pytest.fixture(scope="module")
def frozen_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("frozen_lake")
    env = gym.make("FrozenLake-v1", is_slippery=False)
    record_episodes(env, lambda obs: 2, num_episodes=2, output_dir=out, seed=0)  # go right
    return out


def test_recorded_spaces_build_the_module_where_the_config_sets_none(cartpole: Path):
    data = OfflineData(BCConfig().offline_data(input_=str(cartpole)))
    env = gym.make("CartPole-v1")
    assert data.env_spaces == (env.observation_space, env.action_space)
    assert data.spaces[ENV_KEY] == data.env_spaces
    [view] = data.views
    assert view.module_id == DEFAULT_MODULE_ID and view.stored_id is None
    assert view.obs_shape == (4,)
    assert view.check.origin.endswith("spaces.json")


def test_a_configured_observation_box_may_differ_in_bounds(cartpole: Path):
    wide = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    config = BCConfig().environment(observation_space=wide).offline_data(input_=str(cartpole))
    data = OfflineData(config)
    assert data.env_spaces[0] == wide
    assert data.env_spaces[1] == gym.spaces.Discrete(2)  # the recorded action space
    assert "config.environment(...) and" in data.views[0].check.origin


def test_a_configured_space_that_misfits_is_refused_before_reading(cartpole: Path):
    config = (
        BCConfig()
        .environment(action_space=gym.spaces.Discrete(3))
        .offline_data(input_=str(cartpole))
    )
    with pytest.raises(OfflineDataError, match=r"action_space=Discrete\(3\)\) does not fit"):
        OfflineData(config)
    narrow = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    config = BCConfig().environment(observation_space=narrow).offline_data(input_=str(cartpole))
    with pytest.raises(OfflineDataError, match=r"its shape is \(2,\), the recorded one's \(4,\)"):
        OfflineData(config)


def test_a_discrete_observation_reaches_the_module_one_hot(frozen_lake: Path):
    data = OfflineData(BCConfig().offline_data(input_=str(frozen_lake)))
    obs_space, act_space = data.spaces[DEFAULT_MODULE_ID]
    assert obs_space == gym.spaces.Box(0.0, 1.0, (16,), np.float32)
    assert act_space == gym.spaces.Discrete(4)
    assert data.views[0].obs_shape == ()
    data.build_readers()
    try:
        batch = data.sample()[DEFAULT_MODULE_ID]
        assert batch[Columns.OBS].shape[1:] == (16,)
        assert set(np.unique(batch[Columns.OBS])) <= {0.0, 1.0}
        assert (batch[Columns.OBS].sum(1) == 1).all()
        assert OfflineData.num_rows({"m": batch}) == len(batch[Columns.REWARDS])
    finally:
        data.stop(None)


def test_sample_gives_each_trained_module_a_batch_of_its_size(cartpole: Path):
    config = (
        MARWILConfig()
        .offline_data(input_=str(cartpole))
        .training(train_batch_size=32)
        .debugging(seed=0)
    )
    data = OfflineData(config)
    data.build_readers()
    try:
        batches = data.sample()
        assert list(batches) == [DEFAULT_MODULE_ID]
        assert len(batches[DEFAULT_MODULE_ID][Columns.REWARDS]) == 32
        assert Columns.VALUE_TARGETS in batches[DEFAULT_MODULE_ID]  # MARWIL: returns
        assert not data.on_learners
    finally:
        data.stop(None)


def _mapping(agent_id: int, episode: object, **kwargs: object) -> str:
    return f"p{agent_id}"


@pytest.fixture(scope="module")
def two_agents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two_agents")
    config = (
        BCConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2, "max_episode_steps": 20})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=_mapping)
        .offline_data(output=str(out))
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)
    runner.sample(num_episodes=1)
    runner.stop()
    return out


def _ma(data: Path, **multi_agent: object) -> BCConfig:
    settings = {"policies": {"p0", "p1"}, "policy_mapping_fn": _mapping, **multi_agent}
    return BCConfig().multi_agent(**settings).offline_data(input_=str(data))


def test_multi_agent_views_train_each_module_on_its_stored_rows(two_agents: Path):
    data = OfflineData(_ma(two_agents, policies_to_train=["p1"]))
    assert [(v.module_id, v.stored_id) for v in data.views] == [("p1", "p1")]
    assert "(module 'p1')" in data.views[0].check.origin
    assert set(data.spaces) >= {"p0", "p1"}


def test_multi_agent_rules_are_named(two_agents: Path):
    with pytest.raises(
        OfflineDataError, match=r"stores no spaces for it \(the data hold modules \['p0', 'p1'\]\)"
    ):
        OfflineData(_ma(two_agents, policies={"p0", "p1", "p2"}))
    with pytest.raises(OfflineDataError, match="No module trains"):
        OfflineData(_ma(two_agents, policies_to_train=[]))
    transformed = _ma(two_agents).env_runners(env_to_module_connector=lambda *spaces: [])
    with pytest.raises(OfflineDataError, match="would transform them a second time"):
        OfflineData(transformed)
