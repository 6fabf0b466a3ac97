"""Slow learning tests: BC imitates a CartPole expert; MARWIL beats BC on mixed data."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.offline import record_episodes
from rlmod.testing import RandomPolicy, cartpole_expert

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


def test_marwil_beats_bc_on_half_expert_half_random_timesteps(tmp_path: Path) -> None:
    """20 expert episodes (10,000 steps) and random episodes up to as many steps."""
    env = gym.make("CartPole-v1")
    expert_rows = record_episodes(env, cartpole_expert, num_episodes=20, output_dir=tmp_path,
                                  seed=0)
    policy, random_rows, i = RandomPolicy(env.action_space, seed=0), 0, 0
    while random_rows < expert_rows:
        random_rows += record_episodes(env, policy, num_episodes=50, output_dir=tmp_path,
                                       seed=100_000 + i)
        i += 50
    returns = {}
    for name, cls in (("BC", BCConfig), ("MARWIL", MARWILConfig)):
        config = (cls().environment("CartPole-v1").offline_data(input_=str(tmp_path))
                  .training(**SETTINGS).evaluation(evaluation_interval=20,
                                                   evaluation_duration=20)
                  .debugging(seed=0))
        returns[name] = _eval_return(config, 20)
    assert returns["MARWIL"] > returns["BC"] + 50, returns
