"""BarOrientationEnv: a tiny pixel task a CNN solves and an MLP of its size does not.

Tests of the CNN encoders (rlmod/core/encoders.py) and their uint8 path use it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class BarOrientationEnv(gym.Env[np.ndarray, np.int64]):
    """A one-step task on a `size x size x 1` uint8 image: a bar of `bar_length` lit
    pixels (255) lies horizontally or vertically at a random place; action 0 says
    horizontal, 1 vertical; reward 1.0 when right, else 0.0, and the episode ends.

    Every pixel away from the border is lit as often under either answer, so a linear
    function of the pixels barely beats a guess: a network must detect the bar's shape
    wherever it lies. A small
    CNN shares one detector over all places; an MLP must learn each place on its own.
    The episode return is the fraction of right answers, 0.5 for a guess.

    Args:
        config: `{"size": 10, "bar_length": 2, "dict_obs": False}`; with `dict_obs` the
            observation is `{"image": ..., "flip": Discrete(2)}` and the right answer is
            swapped when `flip` is 1 (a Dict task needing both parts).

    Example:
        >>> env = BarOrientationEnv()
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype, int(obs.sum() // 255)
        ((10, 10, 1), dtype('uint8'), 2)
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        cfg = {"size": 10, "bar_length": 2, "dict_obs": False, **(config or {})}
        unknown = set(cfg) - {"size", "bar_length", "dict_obs"}
        if unknown:
            raise ValueError(
                f"BarOrientationEnv config has unknown keys {sorted(unknown)}; "
                "valid: size, bar_length, dict_obs."
            )
        self.size, self.bar_length = int(cfg["size"]), int(cfg["bar_length"])
        if not 1 < self.bar_length <= self.size:
            raise ValueError(
                f"BarOrientationEnv needs 1 < bar_length <= size, got {self.bar_length} "
                f"and {self.size}."
            )
        self.dict_obs = bool(cfg["dict_obs"])
        image = gym.spaces.Box(0, 255, (self.size, self.size, 1), np.uint8)
        self.observation_space: gym.Space = (
            gym.spaces.Dict({"image": image, "flip": gym.spaces.Discrete(2)})
            if self.dict_obs
            else image
        )
        self.action_space = gym.spaces.Discrete(2)
        self._answer = 0

    def _observe(self) -> Any:
        rng = self.np_random
        vertical = int(rng.integers(2))
        along = int(rng.integers(self.size - self.bar_length + 1))
        across = int(rng.integers(self.size))
        image = np.zeros((self.size, self.size, 1), np.uint8)
        if vertical:
            image[along : along + self.bar_length, across, 0] = 255
        else:
            image[across, along : along + self.bar_length, 0] = 255
        if not self.dict_obs:
            self._answer = vertical
            return image
        flip = int(rng.integers(2))
        self._answer = vertical ^ flip
        return {"image": image, "flip": np.int64(flip)}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == self._answer)
        return self._observe(), reward, True, False, {}
