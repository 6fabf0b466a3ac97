"""Shared fixtures of the offline tests: a scripted CartPole expert and recorded data."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
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
