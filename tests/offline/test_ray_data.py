"""Ray Data reading (`offline_data(input_read_method="read_parquet")`) on a local Ray
cluster of 2 CPUs: the same files, read by Ray Data tasks with the in-process reader's
code, shared out to data-parallel Learners that each read their own shard; multi-agent
recordings give one stream per module.

One Ray session per module.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.offline import record_episodes
from rlmod.offline.ray_data import FileReader
from rlmod.offline.reader import REQUIRED_COLUMNS, episode_chunks, resolve_files
from rlmod.offline.transforms import module_view
from rlmod.testing import cartpole_expert
from rlmod.utils import ray_utils

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_local")]

CARTPOLE = gym.make("CartPole-v1")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve expert episodes (6,000 rows) in four files."""
    out = tmp_path_factory.mktemp("ray_data")
    record_episodes(
        CARTPOLE, cartpole_expert, num_episodes=12, output_dir=out, seed=0, max_rows_per_file=1500
    )
    return out


def _identity_view() -> Any:
    return module_view(
        ConnectorPipeline(
            [],
            input_observation_space=CARTPOLE.observation_space,
            input_action_space=CARTPOLE.action_space,
        ),
        CARTPOLE.action_space,
    )


@ray.remote(num_cpus=0)
def _drain(shard: Any) -> dict[str, np.ndarray]:
    parts = list(shard.iter_batches(batch_size=None, batch_format="numpy"))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_shards_split_the_files_rows_with_the_in_process_returns(data: Path) -> None:
    files = resolve_files(data)
    assert len(files) == 4
    read = FileReader(
        columns=REQUIRED_COLUMNS,
        module_id=None,
        obs_shape=(4,),
        gamma=0.99,
        transform=_identity_view(),
    )
    shards = ray_utils.data_shards([str(f) for f in files], read, num_shards=2)
    got = ray.get([_drain.remote(s) for s in shards])
    # What the in-process reader makes of the same files, row by row.
    expected: dict[bytes, float] = {}
    for f in files:
        for cols in episode_chunks(
            f,
            columns=REQUIRED_COLUMNS,
            module_id=None,
            obs_shape=(4,),
            rows=4096,
            gamma=0.99,
            transform=_identity_view(),
        ):
            expected.update(
                zip((r.tobytes() for r in cols["obs"]), cols["value_targets"].tolist(), strict=True)
            )
    assert len(expected) == 6000
    keys = [{r.tobytes() for r in g["obs"]} for g in got]
    assert len(got[0]["obs"]) == len(got[1]["obs"]) == 3000  # equal shards
    assert not keys[0] & keys[1] and len(keys[0] | keys[1]) == 6000  # disjoint, complete
    for g in got:
        assert g["obs"].dtype == np.float32 and g["obs"].shape[1:] == (4,)
        np.testing.assert_array_equal(g["value_targets"], [expected[r.tobytes()] for r in g["obs"]])


def test_two_learners_each_read_their_own_shard(data: Path) -> None:
    config = (
        BCConfig()
        .environment("CartPole-v1")
        .offline_data(input_=str(data), input_read_method="read_parquet")
        .training(lr=3e-3, train_batch_size=1000, minibatch_size=250, num_epochs=1)
        .learners(num_learners=2)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    assert algo.learner_group.is_remote and not algo.offline_data.readers
    losses = []
    for _ in range(8):  # 8,000 rows: more than one pass over each 3,000-row shard
        result = algo.train()
        losses.append(result["learners"]["default_policy"]["policy_loss"])
    read = algo.learner_group.foreach_learner(
        lambda learner: learner.offline_streams["default_policy"].num_rows_read
    )
    trained = result["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"]
    algo.stop()
    assert read == [4000, 4000] and trained == 8000
    assert losses[-1] < losses[0]


def test_multi_agent_rows_reach_their_modules_through_ray_data(tmp_path: Path) -> None:
    from rlmod.algorithms.ppo import PPOConfig
    from rlmod.core import MultiRLModuleSpec, RLModuleSpec
    from rlmod.env import MultiAgentEnvRunner
    from rlmod.testing import CartPoleExpertModule, MultiAgentCartPole

    def mapping(agent_id: int, episode: object, **kwargs: object) -> str:
        return f"p{agent_id}"

    recording = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=mapping)
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    mid: RLModuleSpec(module_class=CartPoleExpertModule) for mid in ("p0", "p1")
                }
            )
        )
        .offline_data(output=str(tmp_path))
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=recording)
    runner.sample(num_episodes=3)
    runner.stop()
    algo = (
        BCConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=mapping)
        .offline_data(input_=str(tmp_path), input_read_method="read_parquet")
        .training(train_batch_size=500, minibatch_size=250, num_epochs=1)
        .debugging(seed=0)
        .build_algo()
    )
    result = algo.train()
    read = algo.learner_group.foreach_learner(
        lambda learner: {m: s.num_rows_read for m, s in learner.offline_streams.items()}
    )
    algo.stop()
    assert read == [{"p0": 500, "p1": 500}]
    assert {"p0", "p1"} <= set(result["learners"])


def test_recurrent_modules_refuse_several_learners_reading_in_process(data: Path) -> None:
    """A batch of whole episodes read in this process would be cut between the Learners
    mid-episode, each piece's rest starting from a zero state: refused, naming it."""
    config = (
        BCConfig()
        .environment("CartPole-v1")
        .offline_data(input_=str(data))
        .rl_module(model_config={"use_lstm": True, "lstm_cell_size": 8})
        .learners(num_learners=2, num_cpus_per_learner=0.5)
    )
    with pytest.raises(ValueError, match=r"use_lstm=True\) and num_learners=2"):
        config.build_algo()
    # its Learner actors were stopped: their CPUs come back (ray.kill is asynchronous)
    deadline = time.monotonic() + 20
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.1)
