"""Shared fixtures of the offline tests: a scripted CartPole expert and recorded data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmod.offline import record_episodes
from rlmod.testing import cartpole_expert


@pytest.fixture
def expert_dir(tmp_path: Path) -> Path:
    """Ten scripted-expert CartPole episodes (5,000 rows) in three rolling files."""
    out = tmp_path / "expert"
    record_episodes(
        gym.make("CartPole-v1"),
        cartpole_expert,
        num_episodes=10,
        output_dir=out,
        seed=0,
        max_rows_per_file=2000,
    )
    return out


def train_keeping_batches(algo: Any, iterations: int) -> list[dict[str, np.ndarray]]:
    """Trains `algo` for `iterations`, returning a copy of every batch its local EnvRunner
    returned (what the recording saw)."""
    runner = algo.env_runner
    batches: list[dict[str, np.ndarray]] = []
    sample = runner.sample

    def keep(**kwargs: Any) -> Any:
        out = sample(**kwargs)
        batches.append({k: v.copy() for k, v in out["default_policy"].items()})
        return out

    runner.sample = keep
    for _ in range(iterations):
        algo.train()
    return batches


@pytest.fixture
def keep_batches() -> Callable[[Any, int], list[dict[str, np.ndarray]]]:
    """`train_keeping_batches`, for tests that record while training."""
    return train_keeping_batches
