"""Shared fixtures: tiny configs and envs for fast tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rlmod.algorithms.ppo import PPOConfig


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A local Ray cluster for one test module, 2 CPUs (CI runs on 2 cores), started here
    unless one runs already; modules ask for it with pytest.mark.usefixtures."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


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
