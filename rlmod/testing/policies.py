"""Scripted policies shared by tests, examples and benchmarks (offline data to learn from).

Used with `rlmod.offline.record_episodes`, e.g. to record expert CartPole episodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def cartpole_expert(obs: Any) -> int:
    """A linear controller that balances CartPole-v1 for all 500 steps.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("CartPole-v1")
        >>> obs, _ = env.reset(seed=0)
        >>> total, done = 0.0, False
        >>> while not done:
        ...     obs, reward, terminated, truncated, _ = env.step(cartpole_expert(obs))
        ...     total, done = total + reward, terminated or truncated
        >>> total
        500.0
    """
    x, x_dot, theta, theta_dot = (float(v) for v in np.asarray(obs))
    return int(theta + 0.3 * theta_dot + 0.02 * x + 0.1 * x_dot > 0)


class RandomPolicy:
    """Uniformly random actions of `action_space`, seeded (a "random" data source)."""

    def __init__(self, action_space: Any, *, seed: int | None = None) -> None:
        self.action_space = action_space
        self.action_space.seed(seed)

    def __call__(self, obs: Any) -> Any:
        return self.action_space.sample()
