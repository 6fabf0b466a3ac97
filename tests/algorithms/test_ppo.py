"""PPO end to end: it solves CartPole-v1 and Pendulum-v1, and one seed gives one run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED


def _tuned(env: str, seed: int) -> PPOConfig:
    config = PPOConfig().environment(env).debugging(seed=seed)
    for name, value in TUNED[env].items():
        setattr(config, name, value)
    return config


def _train_until(config: PPOConfig, target: float, max_steps: int) -> dict:
    algo = config.build_algo()
    try:
        while True:
            result = algo.train()
            full_window = result["num_episodes_lifetime"] >= 100
            if full_window and result["env_runners"]["episode_return_mean"] >= target:
                return result
            if result["num_env_steps_sampled_lifetime"] >= max_steps:
                return result
    finally:
        algo.stop()


@pytest.mark.slow
def test_ppo_solves_cartpole() -> None:
    result = _train_until(_tuned("CartPole-v1", seed=0), 475.0, max_steps=300_000)
    assert result["env_runners"]["episode_return_mean"] >= 475.0, result["env_runners"]


@pytest.mark.slow
def test_ppo_reaches_minus_300_on_pendulum() -> None:
    result = _train_until(_tuned("Pendulum-v1", seed=0), -300.0, max_steps=300_000)
    assert result["env_runners"]["episode_return_mean"] >= -300.0, result["env_runners"]


def test_one_seed_gives_the_same_run_twice() -> None:
    def run() -> list[float]:
        config = (
            PPOConfig()
            .environment("CartPole-v1")
            .debugging(seed=7)
            .env_runners(num_envs_per_env_runner=4)
            .training(train_batch_size=256, minibatch_size=64, num_epochs=2)
        )
        algo = config.build_algo()
        out = []
        for _ in range(3):
            r = algo.train()
            out += [
                r["learners"]["default_policy"]["total_loss"],
                r["env_runners"]["episode_return_mean"],
            ]
        weights = algo.learner_group.get_weights()["default_policy"]
        out.append(float(sum(np.abs(w).sum() for w in weights.values())))
        algo.stop()
        return out

    first, second = run(), run()
    assert all(
        a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(first, second, strict=True)
    )


def test_result_dict_has_the_rllib_keys(cartpole_config: PPOConfig) -> None:
    algo = cartpole_config.build_algo()
    result = algo.train()
    algo.stop()
    assert result["num_env_steps_sampled_lifetime"] >= 256
    for key in ("episode_return_mean", "episode_len_mean", "num_episodes"):
        assert key in result["env_runners"]
    for key in (
        "policy_loss",
        "vf_loss",
        "entropy",
        "mean_kl_loss",
        "default_optimizer_learning_rate",
    ):
        assert key in result["learners"]["default_policy"]
    assert {"sample_time_s", "learn_time_s", "sync_weights_time_s"} <= set(result["timers"])


def test_evaluate_runs_greedy_episodes(cartpole_config: PPOConfig) -> None:
    algo = cartpole_config.evaluation(evaluation_interval=1, evaluation_duration=3).build_algo()
    result = algo.train()
    algo.stop()
    assert result["evaluation"]["env_runners"]["num_episodes"] >= 3
