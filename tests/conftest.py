"""Shared fixtures: tiny configs and envs for fast tests."""

from __future__ import annotations

import pytest

from rlmod.algorithms.ppo import PPOConfig


@pytest.fixture
def cartpole_config() -> PPOConfig:
    """A small, fast PPO config on CartPole-v1 (one iteration in well under a second)."""
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=4)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=2)
        .debugging(seed=0)
    )
