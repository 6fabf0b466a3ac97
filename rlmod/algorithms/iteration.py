"""How much work one `Algorithm.train()` call does: RLlib's `min_*_per_iteration` settings.

Used by `Algorithm.train()`, which repeats `training_step()` until an `IterationBudget` is
met, and merges the steps' Learner results with `merge_learner_results`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlmod.core.columns import ALL_MODULES

TRAINED_KEY = "num_module_steps_trained"
"""The Learner result (under ALL_MODULES) that counts rows trained on, epochs included."""


class IterationBudget:
    """Counts one iteration's training steps, env steps sampled, rows trained and time;
    `met()` is True once every minimum the config sets is reached (RLlib's TrainIterCtx:
    all of `min_time_s_per_iteration`, `min_sample_timesteps_per_iteration` and
    `min_train_timesteps_per_iteration`; a minimum of 0 or None holds at once).

    Example:
        >>> from rlmod.algorithms.dqn import DQNConfig
        >>> budget = IterationBudget(DQNConfig())  # RLlib's DQN: 1000 sampled env steps
        >>> budget.add(sampled=600, trained=32)
        >>> budget.met()
        False
        >>> budget.add(sampled=400, trained=32)
        >>> budget.met(), budget.num_training_steps
        (True, 2)
    """

    def __init__(self, config: Any) -> None:
        self.min_time_s = config.min_time_s_per_iteration or 0.0
        self.min_sampled = config.min_sample_timesteps_per_iteration
        self.min_trained = config.min_train_timesteps_per_iteration
        self.start = time.perf_counter()
        self.sampled = 0
        self.trained = 0
        self.num_training_steps = 0

    def add(self, *, sampled: int, trained: int) -> None:
        """Counts one `training_step()`: env steps it sampled and rows it trained on."""
        self.sampled += sampled
        self.trained += trained
        self.num_training_steps += 1

    def met(self) -> bool:
        """Whether the iteration may end (after at least one training step)."""
        return (
            self.num_training_steps > 0
            and self.sampled >= self.min_sampled
            and self.trained >= self.min_trained
            and time.perf_counter() - self.start >= self.min_time_s
        )


def rows_trained(learner_results: Mapping[str, Any]) -> int:
    """Rows one training step trained on (0 before learning starts)."""
    return int(learner_results.get(ALL_MODULES, {}).get(TRAINED_KEY, 0))


def merge_learner_results(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One iteration's `result["learners"]` from its training steps' (the empty ones of
    steps that did not train left out): per module, counters (`num_*`) summed, other
    numbers averaged, `*_lifetime` counters and anything else the last step's. One step's
    results come back as they are."""
    results = [r for r in results if r]
    if len(results) <= 1:
        return results[0] if results else {}
    merged: dict[str, Any] = {}
    for r in results:
        for mid in r:
            merged.setdefault(mid, {})
    for mid, out in merged.items():
        per_module = [r[mid] for r in results if isinstance(r.get(mid), Mapping)]
        keys: dict[str, None] = {}
        for values in per_module:
            keys.update(dict.fromkeys(values))
        for key in keys:
            values = [v[key] for v in per_module if key in v]
            out[key] = _merge(key, values)
    return merged


def _merge(key: str, values: list[Any]) -> Any:
    numbers = all(
        isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in values
    )
    if not numbers or key.endswith("_lifetime") or key == "num_trainable_parameters":
        return values[-1]
    if key.startswith("num_"):
        return sum(values)
    return sum(values) / len(values)
