"""Learning tests of multi-agent PPO (rlmod/algorithms/ppo through MultiAgentEnvRunner).

Independent policies and one shared policy on MultiAgentCartPole, and two team policies
on a PettingZoo parallel env through ParallelPettingZooEnv. All `slow`.
"""

from __future__ import annotations

import time

import pytest

from rlmod import register_env
from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import FAST_PPO

pytestmark = pytest.mark.slow


def cartpole_config(policies: set[str], mapping) -> PPOConfig:
    """Four CartPoles per env; rlmod.tuned's CartPole-v1 settings, per env step."""
    return (
        PPOConfig()
        .update_from_dict(FAST_PPO)
        .environment(MultiAgentCartPole, env_config={"num_agents": 4})
        .env_runners(num_envs_per_env_runner=4)
        .multi_agent(policies=policies, policy_mapping_fn=mapping)
        .training(
            train_batch_size=512,
            minibatch_size=256,
            num_epochs=10,
            lr=1e-3,
            gamma=0.98,
            lambda_=0.8,
        )
        .debugging(seed=0)
    )


def train_until_agents_reach(config: PPOConfig, target: float, max_iters: int) -> dict:
    algo = config.build_algo()
    result: dict = {}
    for _ in range(max_iters):
        result = algo.train()
        agent_means = result["env_runners"]["agent_episode_returns_mean"]
        if len(agent_means) == 4 and min(agent_means.values()) >= target:
            break
    algo.stop()
    return result


def test_independent_policies_solve_multi_agent_cartpole():
    start = time.perf_counter()
    result = train_until_agents_reach(
        cartpole_config({"p0", "p1"}, lambda aid, episode: f"p{aid % 2}"), 450, 250
    )
    env_runners = result["env_runners"]
    # A module's episode return sums its agents' returns (two agents each here).
    for mid in ("p0", "p1"):
        assert env_runners["module_episode_returns_mean"][mid] >= 2 * 450, env_runners
    assert min(env_runners["agent_episode_returns_mean"].values()) >= 450
    assert time.perf_counter() - start < 100


def test_one_shared_policy_solves_multi_agent_cartpole():
    result = train_until_agents_reach(
        cartpole_config({"shared"}, lambda aid, episode: "shared"), 450, 250
    )
    env_runners = result["env_runners"]
    assert env_runners["module_episode_returns_mean"]["shared"] >= 4 * 450
    assert min(env_runners["agent_episode_returns_mean"].values()) >= 450


def test_pettingzoo_two_teams_train_through_the_adapter():
    pytest.importorskip("pettingzoo")
    from rlmod.env.pettingzoo_env import ParallelPettingZooEnv
    from rlmod.testing.pettingzoo_envs import TwoTeamGuessingEnv

    register_env("two_teams", lambda cfg: ParallelPettingZooEnv(TwoTeamGuessingEnv(**cfg)))
    config = (
        PPOConfig()
        .environment("two_teams")
        .env_runners(num_envs_per_env_runner=4)
        .multi_agent(
            policies={"red", "blue"}, policy_mapping_fn=lambda aid, episode: aid.split("_")[0]
        )
        .training(train_batch_size=500, minibatch_size=250, num_epochs=10, lr=1e-3)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    first = algo.train()["env_runners"]["module_episode_returns_mean"]
    for _ in range(24):
        result = algo.train()
    algo.stop()
    means = result["env_runners"]["module_episode_returns_mean"]
    # 25-step episodes, two agents per team: random play earns about 19.4 (red) and 11
    # (blue) per episode and team, perfect play 75.
    assert first["red"] < 30 and first["blue"] < 20
    assert means["red"] >= 65 and means["blue"] >= 60, means
