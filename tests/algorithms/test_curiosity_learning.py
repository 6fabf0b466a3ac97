"""Learning test: with a learner-only ICM, PPO solves the 12x12 FrozenLake; without, not.

Budget: 70,000 env steps (what RLlib 2.60 needed on this task), seed 0, the example's
settings (the 22-step limit ends episodes as termination). With curiosity seed 0 reaches
episode_return_mean >= 0.9 after about 37k env steps (about 4 s); plain PPO stays at 0.0
(a random walk finds the goal with probability ~4e-8 per episode). About 10 s in all.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = (
    Path(__file__).resolve().parents[2]
    / "examples"
    / "curiosity"
    / "inverse_dynamics_model_based_curiosity.py"
)
BUDGET = 70_000


def _example():
    spec = importlib.util.spec_from_file_location("icm_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("curiosity", [True, False], ids=["icm", "no_curiosity"])
def test_frozenlake_12x12_needs_curiosity(curiosity):
    example = _example()
    out = example.run(
        example.build_config("FrozenLake", curiosity=curiosity, seed=0),
        stop_reward=0.9,
        stop_timesteps=BUDGET,
        verbose=False,
    )
    if curiosity:
        assert out["reached"], out
        assert out["env_steps"] <= BUDGET
    else:
        assert not out["reached"], out
        assert out["best_episode_return_mean"] == 0.0
        assert out["env_steps"] >= BUDGET
