"""rlmod.testing: tiny solvable envs shared by tests, examples, benchmarks and users.

`MultiAgentCartPole` and `StatelessCartPole` need only gymnasium; `TwoTeamGuessingEnv` (a PettingZoo env) is
imported on first access, so this package imports without pettingzoo installed.
"""

from __future__ import annotations

from typing import Any

from rlmod.testing.envs import MultiAgentCartPole, StatelessCartPole
from rlmod.testing.modules import CartPoleExpertModule
from rlmod.testing.pixel_envs import BarOrientationEnv
from rlmod.testing.policies import RandomPolicy, cartpole_expert

__all__ = [
    "BarOrientationEnv",
    "CartPoleExpertModule",
    "MultiAgentCartPole",
    "RandomPolicy",
    "StatelessCartPole",
    "TwoTeamGuessingEnv",
    "cartpole_expert",
]


def __getattr__(name: str) -> Any:
    """Imports the PettingZoo test envs lazily, on first access."""
    if name == "TwoTeamGuessingEnv":
        from rlmod.testing.pettingzoo_envs import TwoTeamGuessingEnv

        return TwoTeamGuessingEnv
    raise AttributeError(f"module 'rlmod.testing' has no attribute {name!r}")
