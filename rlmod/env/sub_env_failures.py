"""Restart mode's bound: a sub-env that keeps raising stops sampling with an EnvError.

Used by SingleAgentEnvRunner and MultiAgentEnvRunner with
`restart_failed_sub_environments=True`, which recreate a sub-env that raises and drop its
unfinished episode. Without a bound, an env whose step() always raises is recreated
forever and every row is dropped: `train()` then sees empty batches (an IndexError in the
learner connector, or silently nothing learned). The bound is
`max_consecutive_sub_environment_failures`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlmod.core.types import BoolArray
from rlmod.errors import EnvError


class SubEnvFailureStreaks:
    """Per sub-env, the failures since a step of it was last kept for training (an episode
    of it ended, or a row of it reached a batch); raises an EnvError naming the env, the
    sub-env and the last exception when one reaches `limit`.

    Failures between kept steps, rather than failures without a step() that returned in
    between: an env that always fails at the 3rd step of its episodes returns from two
    step() calls out of three, yet no row of it is ever kept (its episodes are dropped).

    Costs nothing while no sub-env has failed (`active` is False): the EnvRunners only call
    `kept` when it is True.

    Example:
        >>> streaks = SubEnvFailureStreaks(env="CartPole-v1", num_envs=2, limit=2)
        >>> streaks.record(1, RuntimeError("sim crashed"), step=3)
        >>> streaks.kept(np.array([False, True]))  # a row of sub-env 1 reached a batch
        >>> streaks.active
        False
    """

    def __init__(self, *, env: object, num_envs: int, limit: int, unit: str = "sub-env") -> None:
        self.env = env
        self.limit = limit
        self.unit = unit  # how errors name one: "sub-env" (vector env) or "env"
        self.counts = np.zeros(num_envs, np.int64)
        self.active = False  # some count is above 0

    def record(self, index: int, err: BaseException, *, step: int) -> None:
        """Sub-env `index` raised `err` at EnvRunner step `step` (and is being recreated);
        raises an EnvError (from `err`) when this makes `limit` in a row. The count starts
        afresh after raising: the next sample() starts every sub-env anew."""
        self.counts[index] += 1
        self.active = True
        if self.counts[index] < self.limit:
            return
        self.counts[index] = 0
        raise EnvError(
            f"env={self.env!r} ({self.unit} {index} of this EnvRunner) raised {self.limit} "
            "times in a row with none of its steps kept for training in between, and was "
            f"recreated after each (restart_failed_sub_environments=True); the last time at "
            f"step {step} of this EnvRunner: {err!r}. Training on it would get no data: fix "
            "the env, or if it does recover after more tries, raise config.fault_tolerance("
            f"max_consecutive_sub_environment_failures=...) (now {self.limit})."
        ) from err

    def kept(self, rows_kept: BoolArray, *, failed: Sequence[int] = ()) -> None:
        """The sub-envs where `rows_kept` ([num_envs] bool) had a step kept for training
        (an episode that ended, or rows that reached a batch), less those in `failed`:
        their counts start afresh."""
        if failed:
            rows_kept = rows_kept.copy()
            rows_kept[list(failed)] = False
        self.counts[rows_kept] = 0
        self.active = bool(self.counts.any())
