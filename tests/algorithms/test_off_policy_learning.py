"""DQN and SAC really learn: CartPole solved greedily, Pendulum swung up, both multi-agent
DQN modules and discrete SAC improve (slow-marked; tuned settings from rlmod.tuned)."""

from __future__ import annotations

from typing import Any

import pytest

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.off_policy import OffPolicyConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import TUNED_DQN, TUNED_SAC


def _tuned(config: OffPolicyConfig, settings: dict[str, Any], seed: int = 0) -> Any:
    for name, value in settings.items():
        setattr(config, name, value)
    return config.debugging(seed=seed)


@pytest.mark.slow
def test_dqn_solves_cartpole_greedily() -> None:
    """rl-baselines3-zoo's criterion: greedy evaluation mean >= 475 over 10 episodes."""
    config = _tuned(DQNConfig().environment("CartPole-v1"), TUNED_DQN["CartPole-v1"])
    algo = config.evaluation(
        evaluation_duration=10, evaluation_config=DQNConfig.overrides(explore=False)
    ).build_algo()
    best, steps = 0.0, 0
    try:
        while steps < 60_000 and best < 475:  # one train(): 4 fragments of 256 (>= 1000)
            steps = algo.train()["num_env_steps_sampled_lifetime"]
            if algo.iteration % 2 == 0:
                best = algo.evaluate()["env_runners"]["episode_return_mean"]
    finally:
        algo.stop()
    assert best >= 475, f"greedy mean {best} after {steps} env steps"


@pytest.mark.slow
def test_sac_reaches_minus_200_on_pendulum() -> None:
    config = _tuned(SACConfig().environment("Pendulum-v1"), TUNED_SAC["Pendulum-v1"])
    algo = config.reporting(metrics_num_episodes_for_smoothing=10).build_algo()
    try:
        result = algo.train()
        while result["num_env_steps_sampled_lifetime"] < 15_000:
            result = algo.train()
            if (
                result["num_episodes_lifetime"] >= 10
                and result["env_runners"]["episode_return_mean"] >= -200
            ):
                break
    finally:
        algo.stop()
    assert result["env_runners"]["episode_return_mean"] >= -200, result["env_runners"]


@pytest.mark.slow
def test_discrete_sac_improves_on_cartpole() -> None:
    config = _tuned(SACConfig().environment("CartPole-v1"), TUNED_SAC["CartPole-v1"])
    algo = config.reporting(metrics_num_episodes_for_smoothing=20).build_algo()
    try:
        result = algo.train()
        first = result["env_runners"]["episode_return_mean"]
        while result["num_env_steps_sampled_lifetime"] < 6_000:
            result = algo.train()
    finally:
        algo.stop()
    # A uniformly random policy averages about 22.
    assert result["env_runners"]["episode_return_mean"] >= 100, (first, result["env_runners"])


@pytest.mark.slow
def test_multi_agent_dqn_learns_with_one_buffer_per_module() -> None:
    config = (
        _tuned(DQNConfig(), TUNED_DQN["CartPole-v1"])
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
    )
    config.model_config = {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"}
    algo = config.reporting(metrics_num_episodes_for_smoothing=20).build_algo()
    try:
        result = algo.train()
        while result["num_env_steps_sampled_lifetime"] < 12_288:
            result = algo.train()
        assert set(algo.replay_buffer.buffers) == {"p0", "p1"}
    finally:
        algo.stop()
    returns = result["env_runners"]["module_episode_returns_mean"]
    assert min(returns["p0"], returns["p1"]) >= 60, returns  # random: about 22
