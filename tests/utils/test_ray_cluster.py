"""A two-node Ray cluster on this machine (rlmod/utils/ray_utils.py, EnvRunnerGroup): a
head and a worker node of 1 CPU each; 2 remote EnvRunners of 1 CPU land one per node,
and PPO trained through them improves."""

from __future__ import annotations

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED
from rlmod.utils import ray_utils

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_env_runners_are_placed_on_both_nodes_and_training_improves():
    if ray.is_initialized():  # left by an earlier test module that let rlmod start Ray
        ray.shutdown()
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        algo = (
            PPOConfig()
            .environment("CartPole-v1")
            .update_from_dict(TUNED["CartPole-v1"])
            .env_runners(num_env_runners=2, num_cpus_per_env_runner=1, num_envs_per_env_runner=8)
            .debugging(seed=0)
        ).build_algo()
        nodes = {ray_utils.node_id_of(a) for a in algo.env_runner_group._actors.values()}
        assert len(nodes) == 2 and len(ray.nodes()) == 2
        first = algo.train()["env_runners"]["episode_return_mean"]
        for _ in range(11):  # 12 x 1,024 env steps (TUNED's batch)
            last = algo.train()["env_runners"]["episode_return_mean"]
        assert last > 1.5 * first
        algo.stop()
    finally:
        ray.shutdown()
        cluster.shutdown()
