"""TrainAlone: one module as a Learner trains it alone, with its Adam, logs and early stop.

The M = 1 counterpart of TrainStack (rlmod.core.learner_stacks): both are step units of
`NonFiniteGuard.check` (rlmod.core.update_guard), so the guard, clipping and the logs a
skipped minibatch drops are written once. What the loss logs for this minibatch waits in
`pending` until the step decides whether the module stepped (`commit`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlmod.core.minibatch_stats import Logged, RowStat, mean_over_minibatches
from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.optim import Adam, grad_norm
from rlmod.core.optimizer_groups import clip_gradients
from rlmod.core.types import BoolArray
from rlmod.core.update_guard import clip_limits

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig


class TrainAlone:
    """One module trained alone: its optimizer, and its logs and early stop of one update."""

    def __init__(self, module_id: ModuleID, optimizer: Adam, config: AlgorithmConfig) -> None:
        self.ids = [module_id]
        self.optimizer = optimizer
        self.configs = [config]
        self.clip_limits = clip_limits(self.configs)
        self._logs: dict[str, list[Logged]] = defaultdict(list)
        self._pending: dict[str, list[Logged]] = defaultdict(list)
        self._stop_request: tuple[torch.Tensor, float] | None = None
        self._stopped = self._stop_checked = False
        # `finite`'s flag and scale, made once (a step allocates nothing for the check)
        self._flag: tuple[torch.Tensor, torch.Tensor] | None = None

    def start_update(self, config: AlgorithmConfig) -> None:
        """Forgets the last update's logs and stop, and takes this update's config."""
        self.configs = [config]
        self.clip_limits = clip_limits(self.configs)
        self._logs, self._pending = defaultdict(list), defaultdict(list)
        self._stop_request = None
        self._stopped = self._stop_checked = False

    # ------------------------------------------------------------------ from the loss
    def log(self, values: Mapping[str, Logged], valid: BoolArray | None = None) -> None:
        """This minibatch's values (0-d or `[1]` tensors, or deferred RowStats)."""
        if valid is not None and not bool(valid[0]):
            return
        for key, value in values.items():
            self._pending[key].append(value if isinstance(value, RowStat) else value.detach())

    def request_stop(self, value: torch.Tensor, limit: float) -> None:
        """Stop this module's update if `value` (this minibatch's) exceeds `limit`."""
        self._stop_request = (value.detach().reshape(()), limit)

    # ------------------------------------------------------------------ the step
    def resolve_stops(self) -> BoolArray:
        if self._stop_request is not None:
            value, limit = self._stop_request
            self._stop_request = None
            self._stop_checked = True
            self._stopped |= float(value) > limit
        return np.array([self._stopped])

    def grad_norms(self) -> torch.Tensor:
        return grad_norm(self.optimizer.params).reshape(1)

    def grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.optimizer.params if p.grad is not None]

    def finite(self, losses: torch.Tensor, norms: torch.Tensor | None) -> BoolArray:
        """Whether the loss and every gradient entry are finite, by the cheapest kernels
        (CPU, one thread, PPO's 64x64 MLP, 2-core Xeon): the loss and a norm that clipping
        computed anyway read as Python floats (under 1 us each; `torch.isfinite` on a
        tensor of one is several kernels, ~8 us), else one pass of torch's foreach
        non-finite check (GradScaler's kernel, scale 1: gradients unchanged; 7 us against
        37 us for the global norm). A NaN/inf gradient entry makes the norm NaN/inf, so
        both decide as `torch.isfinite(losses + norms)` does for a group."""
        if not math.isfinite(losses.item()):
            return np.zeros(1, dtype=bool)
        if norms is not None:
            return np.array([math.isfinite(norms.item())])
        grads = [p.grad for p in self.optimizer.params if p.grad is not None]
        if not grads:
            return np.ones(1, dtype=bool)
        if self._flag is None:
            self._flag = (
                torch.zeros(1, device=grads[0].device),
                torch.ones(1, device=grads[0].device),
            )
        found, one = self._flag
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, one)
        ok = found.item() == 0.0
        found.zero_()
        return np.array([ok])

    def clip(self, norms: torch.Tensor, max_norms: torch.Tensor) -> None:
        """By the module's `grad_clip_by`: "global_norm" as `torch.nn.utils.clip_grad_norm_`
        scales (the same floats), "norm" and "value" as RLlib (`clip_gradients`)."""
        clip_by = self.configs[0].grad_clip_by
        if clip_by != "global_norm":
            clip_gradients(self.optimizer.params, float(max_norms[0]), clip_by)
            return
        coef = torch.clamp(max_norms / (norms + 1e-6), max=1.0).reshape(())
        grads = [p.grad for p in self.optimizer.params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, coef)

    def pending_terms(self, position: int) -> dict[str, float]:
        return {
            k: float(e.value() if isinstance(e := v[-1], RowStat) else e)
            for k, v in self._pending.items()
            if v
        }

    def commit(self, stepped: BoolArray) -> None:
        if stepped[0]:
            for key, entries in self._pending.items():
                self._logs[key].extend(entries)
        self._pending = defaultdict(list)

    @property
    def stepper(self) -> Adam:
        return self.optimizer

    # ------------------------------------------------------------------ results
    def means(self) -> dict[str, float]:
        """The mean of each logged key over the minibatches the module stepped in (what
        it logged outside a minibatch, e.g. after the update, counts too)."""
        self.commit(np.ones(1, dtype=bool))
        return {k: mean_over_minibatches(v) for k, v in self._logs.items() if v}

    def logged_mean(self, key: str) -> float | None:
        """The mean of `key` so far (None if nothing was kept under it)."""
        entries = self._logs.get(key, []) + self._pending.get(key, [])
        return mean_over_minibatches(entries) if entries else None

    def early_stops(self) -> dict[ModuleID, bool]:
        """Whether the module stopped early, if it was checked in this update."""
        return {self.ids[0]: self._stopped} if self._stop_checked else {}
