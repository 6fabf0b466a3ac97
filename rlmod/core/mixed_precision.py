"""Learner: mixed precision, the `learners(mixed_precision=...)` setting.

With "bfloat16" or "float16", each minibatch's forward passes and losses run under
`torch.autocast`: matrix products in the lower precision, the ops autocast keeps in float32
(softmax, log-probabilities, reductions) and the weights and optimizer states stay float32.
The backward pass follows the forward's dtypes on its own. bfloat16 has float32's range and
needs nothing more; it is what CPUs and recent GPUs run fast. float16 has a narrow range, so
its gradients would underflow: as `torch.amp.GradScaler` does, the loss is multiplied by a
dynamic scale before the backward pass and each step unit's gradients are divided by it
after (after the all-reduce of data-parallel Learners, so all of them see the same ones); a
unit whose gradients overflowed skips that step and the scale halves, 2000 steps without
overflow double it (GradScaler's defaults and its kernels). An overflow is not a NaN in the
data, so the non-finite guard (`max_consecutive_non_finite_updates`) does not count it; a
non-finite loss still goes to the guard. The scale is not checkpointed: after a restore it
starts again at 2**16 and finds its level within a few minibatches.

RLlib has no such switch (its `experimental(_torch_grad_scaler_class=...)` takes a loss
scaler, and autocast needs a custom Learner); rlmod's name follows Accelerate's
`mixed_precision`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlmod.core.types import BoolArray

if TYPE_CHECKING:
    from rlmod.core.update_guard import NonFiniteGuard, StepUnit

DTYPES: dict[str, torch.dtype] = {"bfloat16": torch.bfloat16, "float16": torch.float16}
"""The values of `mixed_precision` (None: everything in float32)."""


class MixedPrecision:
    """The autocast context, backward pass and step check of one Learner (built with it)."""

    def __init__(self, setting: str | None, device: torch.device) -> None:
        if setting is not None and setting not in DTYPES:
            raise ValueError(
                f"mixed_precision={setting!r} is not one of None, 'bfloat16', 'float16'."
            )
        if setting == "float16" and device.type != "cuda":
            raise ValueError(
                f"mixed_precision='float16' needs a Learner on a CUDA GPU, but this one is on "
                f"{device}: float16 has no fast kernels on CPUs and its loss scaling is "
                "for GPUs. Use .learners(mixed_precision='bfloat16') on the CPU, or put the "
                "Learner on a GPU with .learners(num_gpus_per_learner=1)."
            )
        self.device = device
        self.dtype = None if setting is None else DTYPES[setting]
        self.loss_scale = LossScale(device) if setting == "float16" else None

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        """Where the forward passes and losses of a minibatch run."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, total: torch.Tensor) -> None:
        """`total.backward()`, of the scaled loss with float16."""
        if self.loss_scale is None:
            total.backward()
        else:
            self.loss_scale.backward(total)

    def check(self, guard: NonFiniteGuard, unit: StepUnit, losses: torch.Tensor) -> BoolArray:
        """Which modules of `unit` step (`guard.check`); with float16 its gradients are
        unscaled first, and a unit whose gradients overflowed while its losses are finite
        skips this step without counting as non-finite."""
        overflow = self.loss_scale is not None and not self.loss_scale.unscale(unit.grads())
        if overflow and bool(torch.isfinite(losses).all()):
            skipped = np.zeros(len(unit.ids), dtype=bool)
            unit.resolve_stops()  # this minibatch's early-stop request still counts
            unit.commit(skipped)  # its logs are dropped, as for a skipped step
            return skipped
        return guard.check(unit, losses)


class LossScale:
    """GradScaler's dynamic loss scale: starts at 2**16, halves on an overflow, doubles after
    2000 minibatches without one (torch.amp.GradScaler's defaults, with its kernels)."""

    def __init__(self, device: torch.device, init_scale: float = 2.0**16) -> None:
        self.scale = torch.full((1,), init_scale, device=device)
        self.growth_factor, self.backoff_factor, self.growth_interval = 2.0, 0.5, 2000
        self._growth_tracker = torch.zeros((1,), dtype=torch.int32, device=device)
        self._found_inf = torch.zeros((1,), device=device)  # in this minibatch, any unit
        self._unit_found = torch.zeros((1,), device=device)
        self._stepped = False

    def backward(self, total: torch.Tensor) -> None:
        """Moves the scale by the last minibatch's overflows, then backward of the scaled
        loss."""
        if self._stepped:
            torch._amp_update_scale_(
                self.scale,
                self._growth_tracker,
                self._found_inf,
                self.growth_factor,
                self.backoff_factor,
                self.growth_interval,
            )
            self._found_inf.zero_()
        (total * self.scale.to(total.dtype)).backward()
        self._stepped = True

    def unscale(self, grads: list[torch.Tensor]) -> bool:
        """Divides `grads` by the scale in place; whether they are all finite."""
        if not grads:
            return True
        self._unit_found.zero_()
        inverse = self.scale.double().reciprocal().float()
        torch._amp_foreach_non_finite_check_and_unscale_(grads, self._unit_found, inverse)
        self._found_inf += self._unit_found
        return bool(self._unit_found.item() == 0.0)
