"""Slow learning test: BC imitates a CartPole expert from 200 recorded episodes."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.offline import record_episodes
from rlmod.testing import cartpole_expert

pytestmark = pytest.mark.slow

SETTINGS = {"lr": 3e-3, "train_batch_size": 2000, "minibatch_size": 250, "num_epochs": 2}


def _eval_return(config: object, iterations: int) -> float:
    algo = config.build_algo()  # type: ignore[attr-defined]
    best = float("-inf")
    for _ in range(iterations):
        result = algo.train()
        if "evaluation" in result:
            best = result["evaluation"]["env_runners"]["episode_return_mean"]
    algo.stop()
    return best


def test_bc_on_200_expert_episodes_reaches_450(tmp_path: Path) -> None:
    record_episodes(gym.make("CartPole-v1"), cartpole_expert, num_episodes=200,
                    output_dir=tmp_path, seed=0)
    config = (BCConfig().environment("CartPole-v1").offline_data(input_=str(tmp_path))
              .training(**SETTINGS).evaluation(evaluation_interval=10, evaluation_duration=20)
              .debugging(seed=0))
    assert _eval_return(config, 10) >= 450


# MARWIL (beta=1) beating BC on half expert, half random data is not pinned by a test: at
# commit 72d730d it did not (benchmarks/offline.py, 3 seeds: MARWIL 365.5 vs BC 366.6 mean;
# this file's former one-seed test: 406 vs 454). See benchmarks/RESULTS.md, "Offline RL".
