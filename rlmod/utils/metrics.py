"""Episode metrics: smoothing windows over the last N episodes, per module and per agent.

Used by Algorithm to turn EnvRunners' `get_metrics()` into `result["env_runners"]`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else math.nan


GUARD_COUNTERS = ("num_episodes_truncated_non_finite", "num_sub_env_restarts")
"""What the EnvRunners' guards did this iteration: episodes ended as truncated for
non-finite env data, sub-envs recreated after raising (summed over EnvRunners)."""


class EpisodeMetrics:
    """Keeps the last `window` episode returns and lengths (overall, per module, per agent)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.returns: deque[float] = deque(maxlen=window)
        self.lens: deque[int] = deque(maxlen=window)
        self.module_returns: dict[Any, deque[float]] = {}
        self.agent_returns: dict[Any, deque[float]] = {}
        self.num_episodes_lifetime = 0
        self.num_env_steps_lifetime = 0
        self.num_agent_steps_lifetime = 0
        self._period = self._new_period()

    def add(self, runner_metrics: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Adds EnvRunners' metrics; returns `result["env_runners"]` for this iteration."""
        self.ingest(runner_metrics)
        return self.reduce()

    def ingest(self, runner_metrics: Iterable[dict[str, Any]]) -> None:
        """Adds EnvRunners' metrics to the windows and counters; the per-iteration counts
        add up until `reduce()` (one train() may run several training steps)."""
        period = self._period
        for m in runner_metrics:
            for key in GUARD_COUNTERS:
                period[key] += m.get(key, 0)
            self.returns.extend(m["episode_returns"])
            self.lens.extend(m["episode_lens"])
            period["num_episodes"] += len(m["episode_returns"])
            period["num_env_steps_sampled"] += m["num_env_steps"]
            period["num_agent_steps_sampled"] += m.get("num_agent_steps", m["num_env_steps"])
            for key, target in (
                ("module_episode_returns", self.module_returns),
                ("agent_episode_returns", self.agent_returns),
            ):
                for k, values in m.get(key, {}).items():
                    target.setdefault(k, deque(maxlen=self.window)).extend(values)
            self.num_episodes_lifetime += len(m["episode_returns"])
            self.num_env_steps_lifetime += m["num_env_steps"]
            self.num_agent_steps_lifetime += m.get("num_agent_steps", m["num_env_steps"])

    def reduce(self) -> dict[str, Any]:
        """`result["env_runners"]`: the windows' means and what was ingested since the
        last call."""
        period, self._period = self._period, self._new_period()
        return {
            "episode_return_mean": _mean(self.returns),
            "episode_return_max": max(self.returns, default=math.nan),
            "episode_return_min": min(self.returns, default=math.nan),
            "episode_len_mean": _mean(self.lens),
            "num_episodes": period["num_episodes"],
            "num_episodes_lifetime": self.num_episodes_lifetime,
            "num_env_steps_sampled": period["num_env_steps_sampled"],
            "num_env_steps_sampled_lifetime": self.num_env_steps_lifetime,
            "num_agent_steps_sampled": period["num_agent_steps_sampled"],
            "num_agent_steps_sampled_lifetime": self.num_agent_steps_lifetime,
            "module_episode_returns_mean": {k: _mean(v) for k, v in self.module_returns.items()},
            # Keyed by str(agent_id), as RLlib's (ray 2.60 logs (..., str(agent_id))).
            "agent_episode_returns_mean": {str(k): _mean(v) for k, v in self.agent_returns.items()},
            **{key: period[key] for key in GUARD_COUNTERS},
        }

    @staticmethod
    def _new_period() -> dict[str, int]:
        keys = ("num_episodes", "num_env_steps_sampled", "num_agent_steps_sampled")
        return dict.fromkeys((*keys, *GUARD_COUNTERS), 0)

    def get_state(self) -> dict[str, Any]:
        return {
            "returns": list(self.returns),
            "lens": list(self.lens),
            "num_episodes_lifetime": self.num_episodes_lifetime,
            "num_env_steps_lifetime": self.num_env_steps_lifetime,
            "num_agent_steps_lifetime": self.num_agent_steps_lifetime,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores `get_state()`; ValueError naming the field if a value is not what it
        writes (lists of finite numbers, counters that are ints >= 0)."""
        for key in ("returns", "lens"):
            values = state.get(key, [])
            if not isinstance(values, list) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in values
            ):
                raise ValueError(f"metrics field {key!r} must be a list of finite numbers.")
        counters = ("num_episodes_lifetime", "num_env_steps_lifetime", "num_agent_steps_lifetime")
        for key in counters:
            value = state.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"metrics field {key!r} must be an int >= 0, got {value!r}.")
        self.returns.extend(state.get("returns", []))
        self.lens.extend(state.get("lens", []))
        for key in counters:
            setattr(self, key, state.get(key, 0))
