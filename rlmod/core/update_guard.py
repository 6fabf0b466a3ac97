"""What may step after a minibatch's backward pass, written once for a module alone and a group.

A Learner's modules train in step units: one module alone (TrainAlone, M = 1) or a stacked
group (TrainStack, M modules). After the backward pass, `NonFiniteGuard.check` runs the
same code on each unit's `[M]` vectors: early stops, gradient norms, the non-finite guard,
clipping as `torch.nn.utils.clip_grad_norm_` does, the logs it keeps or drops; then
`unit.stepper.step(mask)` takes one Adam step of the modules it allows.

The guard (`max_consecutive_non_finite_updates`): a module whose minibatch loss or gradient
norm is NaN/inf is not stepped (weights and optimizer state stay bit-identical) and what it
logged for that minibatch is left out of its means; `counts` says per module how many of
this update's minibatches were skipped, and that many in a row raise NonFiniteUpdateError.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import BoolArray, FloatArray
from rlmod.errors import NonFiniteUpdateError

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

GRAD_NORM_KEY = "gradients_default_optimizer_global_norm"
"""RLlib's result key of a module's gradient norm before clipping."""


def clip_limits(configs: Sequence[AlgorithmConfig]) -> tuple[FloatArray, BoolArray]:
    """`[M]` each module's `grad_clip` (inf: none) and whether it is clipped by the global
    norm (whose value RLlib then logs); a unit takes them once per update."""
    max_norms = np.array([np.inf if c.grad_clip is None else float(c.grad_clip) for c in configs])
    by_global = np.array([c.grad_clip_by == "global_norm" for c in configs], dtype=bool)
    return max_norms, np.isfinite(max_norms) & by_global


class Stepper(Protocol):
    """An optimizer that steps the modules of a `[M]` mask (Adam, GroupAdam: rlmod.core.optim)."""

    def step(self, stepped: BoolArray) -> None: ...


class StepUnit(Protocol):
    """Modules that step together, `[M]` of them (TrainAlone: 1; TrainStack: a group)."""

    @property
    def ids(self) -> Sequence[ModuleID]: ...

    @property
    def clip_limits(self) -> tuple[FloatArray, BoolArray]:
        """`clip_limits(configs)` of this update's modules."""
        ...

    def resolve_stops(self) -> BoolArray:
        """`[M]`: the modules stopped early in this update (this minibatch's requests too)."""
        ...

    def grad_norms(self) -> torch.Tensor:
        """`[M]`: each module's global L2 gradient norm."""
        ...

    def grads(self) -> list[torch.Tensor]:
        """Every gradient tensor of this minibatch's step (float16 loss scaling divides
        them in place: rlmod.core.mixed_precision)."""
        ...

    def finite(self, losses: torch.Tensor, norms: torch.Tensor | None) -> BoolArray:
        """`[M]`: whether each module's loss and gradients are finite (`norms`: the
        gradient norms if clipping computed them)."""
        ...

    def clip(self, norms: torch.Tensor, max_norms: torch.Tensor) -> None:
        """Clips each module's gradients to its max_norm (by its `grad_clip_by`)."""
        ...

    def log(self, values: Mapping[str, torch.Tensor], valid: BoolArray | None = None) -> None:
        """Per-module `[M]` values of this minibatch; `valid` marks the modules they apply to."""
        ...

    def pending_terms(self, position: int) -> dict[str, float]:
        """Module `position`'s values logged in this minibatch (for the guard's error)."""
        ...

    def commit(self, stepped: BoolArray) -> None:
        """Keeps this minibatch's logs of the modules in `stepped`, drops the others'."""
        ...

    @property
    def stepper(self) -> Stepper:
        """The optimizer whose `step(stepped)` steps the modules marked in `stepped`."""
        ...


class NonFiniteGuard:
    """Steps units after a backward pass, skipping modules whose loss or gradient is NaN/inf.

    `enabled=False` steps every module that is not stopped early (benchmarks/guard_overhead.py
    measures the guard's cost that way)."""

    def __init__(self, max_in_a_row: int, *, enabled: bool = True) -> None:
        self.max_in_a_row = max_in_a_row
        self.enabled = enabled
        self.counts: dict[ModuleID, int] = {}  # skipped minibatches, this update
        self._streaks: dict[ModuleID, int] = {}  # skipped in a row, across updates

    def start_update(self, module_ids: Iterable[ModuleID]) -> None:
        """Counts this update's skips of `module_ids` from 0."""
        self.counts = dict.fromkeys(module_ids, 0)

    def check(self, unit: StepUnit, losses: torch.Tensor) -> BoolArray:
        """Readies `unit`'s step after backward, given its modules' detached losses `[M]`:
        returns which modules may step (`unit.stepper.step(...)` takes it), with their gradients
        clipped and their logs of this minibatch kept (the others' dropped)."""
        active = ~unit.resolve_stops()
        max_norms, logs_global_norm = unit.clip_limits
        norms = unit.grad_norms() if np.isfinite(max_norms).any() else None
        if self.enabled:
            finite = unit.finite(losses, norms)
            skipped = np.flatnonzero(active & ~finite).tolist()
            if skipped:
                shown = unit.grad_norms() if norms is None else norms  # for the error
                for i in skipped:
                    self._skip(unit.ids[i], losses[i], shown[i], unit.pending_terms(i))
            active &= finite
        if norms is not None:
            unit.clip(norms, torch.as_tensor(max_norms, dtype=norms.dtype, device=norms.device))
            unit.log({GRAD_NORM_KEY: norms}, logs_global_norm)
        unit.commit(active)
        if self._streaks:  # a stepped module ends its run of skips
            for i in np.flatnonzero(active).tolist():
                self._streaks.pop(unit.ids[i], None)
        return active

    def _skip(
        self, mid: ModuleID, loss: torch.Tensor, norm: torch.Tensor, terms: Mapping[str, float]
    ) -> None:
        """Counts a skipped minibatch of `mid`; raises after `max_in_a_row` in a row."""
        self.counts[mid] = self.counts.get(mid, 0) + 1
        streak = self._streaks[mid] = self._streaks.get(mid, 0) + 1
        if streak >= self.max_in_a_row:
            raise NonFiniteUpdateError(
                f"Module {mid!r}: the loss or its gradient was NaN/inf in {streak} "
                f"minibatches in a row (max_consecutive_non_finite_updates="
                f"{self.max_in_a_row}); its weights were kept as they were before the first. "
                f"Last loss={float(loss)}, gradient norm={float(norm)}, loss terms={dict(terms)}. "
                "Look for NaN/inf in the batch (rewards, observations), a too-high lr or a "
                "log of 0 in a custom loss."
            )
