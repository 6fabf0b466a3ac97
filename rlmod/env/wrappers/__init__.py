"""Gymnasium wrappers for tasks whose step limit is part of the task.

Gymnasium's `TimeLimit` ends an episode with `truncated=True`, and GAE bootstraps V(s)
there: right when the limit only cuts training episodes short. When the limit *is* the
task ("reach the goal within 22 steps"), nothing can follow the last step, and
bootstrapping makes up future value that does not exist (Pardo et al. 2018, "Time Limits
in Reinforcement Learning"). With sparse rewards that made-up value is all the signal
there is: in the curiosity example it steered plain PPO onto the goal's path by chance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym


class TimeLimitAsTermination(gym.Wrapper[object, object, object, object]):
    """Reports the end of the wrapped env's time limit as termination, not truncation."""

    def step(self, action: object) -> tuple[object, SupportsFloat, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, bool(terminated or truncated), False, info


def make_with_terminal_time_limit(env_config: Mapping[str, object]) -> TimeLimitAsTermination:
    """`gymnasium.make(id, max_episode_steps=..., **rest)` whose limit terminates episodes.

    An env creator for `config.environment(env=make_with_terminal_time_limit,
    env_config={"id": "FrozenLake-v1", "max_episode_steps": 22, ...})`; in a JSON config
    file, `"env": {"__import__": "rlmod.env.wrappers:make_with_terminal_time_limit"}`.

    Example:
        >>> env = make_with_terminal_time_limit({"id": "CartPole-v1", "max_episode_steps": 3})
        >>> _ = env.reset(seed=0)
        >>> [env.step(0)[2:4] for _ in range(3)]
        [(False, False), (False, False), (True, False)]
    """
    # Any: the user's keyword arguments for gymnasium.make, which checks them.
    kwargs: dict[str, Any] = dict(env_config)  # type: ignore[explicit-any]
    env_id = kwargs.pop("id", None)
    if not isinstance(env_id, str) or "max_episode_steps" not in kwargs:
        raise ValueError(
            "make_with_terminal_time_limit needs env_config with 'id' (a gymnasium ID) and "
            f"'max_episode_steps' (the task's step limit); got keys {sorted(env_config)}."
        )
    return TimeLimitAsTermination(gym.make(env_id, **kwargs))
