"""Multi-agent offline training: BC and MARWIL on MultiAgentEnvRunner recordings, one module
per policy, each trained on the rows stored under its module ID."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import MultiRLModuleSpec, RLModuleSpec
from rlmod.env import MultiAgentEnvRunner
from rlmod.errors import OfflineDataError
from rlmod.offline.parquet_chunks import read_columns
from rlmod.offline.reader import resolve_files
from rlmod.offline.writer import MODULE_ID
from rlmod.testing import CartPoleExpertModule, MultiAgentCartPole

POLICIES = ("p0", "p1")


def _mapping(agent_id: int, episode: object, **kwargs: object) -> str:
    return f"p{agent_id}"


def _record(out: Path, *, num_episodes: int, sharpness: dict[str, float]) -> None:
    """Two agents of MultiAgentCartPole, agent i acting with module p<i>: a scripted
    CartPole expert whose logits are scaled by `sharpness[p<i>]` (small: noisy)."""
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies=set(POLICIES), policy_mapping_fn=_mapping)
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    mid: RLModuleSpec(
                        module_class=CartPoleExpertModule,
                        model_config={"sharpness": sharpness[mid]},
                    )
                    for mid in POLICIES
                }
            )
        )
        .offline_data(output=str(out))
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)
    runner.sample(num_episodes=num_episodes)
    runner.stop()


def _offline(config_cls: type, data: Path, *, policies: tuple[str, ...] = POLICIES) -> object:
    return (
        config_cls()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies=set(policies), policy_mapping_fn=_mapping)
        .offline_data(input_=str(data))
        .training(lr=3e-3, train_batch_size=1000, minibatch_size=250, num_epochs=2)
        .debugging(seed=0)
    )


@pytest.fixture(scope="module")
def ma_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ma_expert")
    _record(out, num_episodes=4, sharpness={"p0": 1000.0, "p1": 1000.0})
    return out


@pytest.mark.parametrize("config_cls", [BCConfig, MARWILConfig])
def test_each_module_trains_on_its_own_rows(ma_data: Path, config_cls: type) -> None:
    stored = read_columns(
        resolve_files(ma_data),
        columns=[MODULE_ID, "obs", "rewards", "terminateds", "truncateds"],
        obs_shape=(4,),
    )
    rows_of = {
        mid: {row.tobytes() for row in stored["obs"][stored[MODULE_ID] == mid]} for mid in POLICIES
    }
    assert all(len(rows) > 100 for rows in rows_of.values())
    algo = _offline(config_cls, ma_data).build_algo()  # type: ignore[attr-defined]
    assert algo.env_runner_group is None
    assert set(algo.offline_data.readers) == set(POLICIES)
    modules = algo.learner_group.learner.module
    before = {mid: modules[mid].pi[-1].weight.detach().clone() for mid in POLICIES}
    result = algo.train()
    for mid in POLICIES:
        assert np.isfinite(result["learners"][mid]["policy_loss"])
        assert not modules[mid].pi[-1].weight.detach().equal(before[mid])
    # Rows are routed by module ID: each module's batches hold its own agent's rows only.
    for mid, other in zip(POLICIES, POLICIES[::-1], strict=True):
        batch = algo.offline_data.readers[mid].next_batch()
        seen = {row.tobytes() for row in batch["obs"]}
        assert seen <= rows_of[mid] and not seen & rows_of[other]
    algo.stop()


def test_recurrent_modules_train_on_whole_episodes_of_their_own_agent(ma_data: Path) -> None:
    config = _offline(BCConfig, ma_data).rl_module(
        model_config={"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 10}
    )
    algo = config.build_algo()
    result = algo.train()
    for mid in POLICIES:
        assert np.isfinite(result["learners"][mid]["policy_loss"])
        batch = algo.offline_data.readers[mid].next_batch()
        ends = batch["terminateds"] | batch["truncateds"]
        assert ends[-1] and len(ends) >= 1000
        # consecutive rows of one episode follow CartPole's dynamics: x' = x + 0.02 x_dot
        obs, inner = batch["obs"], ~ends[:-1]
        np.testing.assert_allclose(
            obs[1:, 0][inner], (obs[:-1, 0] + 0.02 * obs[:-1, 1])[inner], atol=1e-5
        )
    algo.stop()


def test_policies_to_train_limits_the_readers(ma_data: Path) -> None:
    config = _offline(BCConfig, ma_data).multi_agent(policies_to_train=["p1"])
    algo = config.build_algo()
    assert set(algo.offline_data.readers) == {"p1"}
    assert set(algo.train()["learners"]) >= {"p1"}
    algo.stop()


def test_a_policy_with_no_recorded_rows_is_named(ma_data: Path) -> None:
    config = _offline(BCConfig, ma_data, policies=("p0", "p1", "p2"))
    with pytest.raises(OfflineDataError, match=r"Module 'p2' trains.*\['p0', 'p1'\]"):
        config.build_algo()


@pytest.mark.slow
def test_bc_on_a_two_policy_recording_improves_each_module(tmp_path: Path) -> None:
    """Both agents recorded with the scripted expert: after BC, each module's evaluation
    return is far above its untrained one."""
    _record(tmp_path, num_episodes=60, sharpness={"p0": 1000.0, "p1": 1000.0})
    algo = (
        _offline(BCConfig, tmp_path)
        .evaluation(evaluation_interval=10, evaluation_duration=10)
        .build_algo()
    )
    untrained = algo.evaluate()["env_runners"]["module_episode_returns_mean"]
    for _ in range(10):
        result = algo.train()
    trained = result["evaluation"]["env_runners"]["module_episode_returns_mean"]
    algo.stop()
    for mid in POLICIES:
        assert untrained[mid] < 100 and trained[mid] >= 400, (untrained, trained)
