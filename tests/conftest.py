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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under RLMOD_PLAIN_PATHS=1 (rlmod/fast_paths.py) the tests of a fast path itself
    (`fast_path`, and the doctests of the modules that implement one) are skipped: they
    check that it runs. Everything else runs on the plain paths and must pass."""
    from rlmod.fast_paths import plain_paths

    if not plain_paths():
        return
    skip = pytest.mark.skip(reason="a fast path's own test; RLMOD_PLAIN_PATHS=1 turns it off")
    for item in items:
        doctest_of_fast_path = item.nodeid.startswith("rlmod/core/deferred_init.py")
        if item.get_closest_marker("fast_path") or doctest_of_fast_path:
            item.add_marker(skip)
