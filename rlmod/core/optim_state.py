"""The one check of a stored Adam state, before any of it is loaded.

Used by `Adam` and `AdamSlot` (rlmod.core.optim), whose `load_state_dict` share it, and by
`OptimizerStates`, which checks every module's state before loading any. Without it a
moment of shape `[1]` was broadcast into a `(16, 4)` one by `copy_`, a float64 moment of
1e300 became inf in float32, and a NaN moment or a negative second moment (whose square
root is NaN) turned every later step of that parameter into NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch

from rlmod.errors import CheckpointError

KEYS = ("step", "lr", "exp_avg", "exp_avg_sq")
"""The keys of an Adam `state_dict()`."""


class CheckedAdamState(NamedTuple):
    """A stored Adam state that passed `check_adam_state`, ready to load: the moments are
    in their parameters' dtypes and shapes, `exp_avg` then `exp_avg_sq`, one per parameter."""

    step: int
    lr: float
    moments: list[torch.Tensor]


def check_adam_state(
    state: object,
    params: Sequence[torch.Tensor],
    names: Sequence[str] | None = None,
    *,
    where: str = "Optimizer state",
) -> CheckedAdamState:
    """`state` (an `Adam.state_dict()`, e.g. read from a checkpoint) checked against the
    optimizer's `params`, changing nothing.

    Args:
        state: The stored state.
        params: The optimizer's parameters, in order (their shapes and dtypes are what the
            moments must fit).
        names: The parameters' names (as `named_parameters()` gives them), for errors;
            without them, errors name parameters by position.
        where: What the state is, at the start of each error (e.g. "Optimizer state of
            module 'p0'").

    Returns:
        The step count, the learning rate and the moments, converted to the parameters'
        dtypes (a value that does not fit the dtype is caught here, not after loading).

    Raises:
        CheckpointError: naming the field (and the parameter with both shapes) if a key is
            missing, `step` is not an int >= 0, `lr` is not a finite number >= 0, a moment
            list has another length than `params`, or a moment is not a float array of its
            parameter's shape, is NaN or inf, or (second moments) negative.
    """
    if not isinstance(state, Mapping):
        raise CheckpointError(
            f"{where} is a {type(state).__name__}, not a dict of {list(KEYS)}; "
            "the checkpoint is corrupt or was edited."
        )
    missing = [k for k in KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{where} lacks {missing}; the checkpoint is corrupt or was edited.")
    step, lr = state["step"], state["lr"]
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
        raise CheckpointError(f"{where}: step={step!r} must be an int >= 0 (Adam steps taken).")
    if (
        isinstance(lr, bool)
        or not isinstance(lr, int | float | np.integer | np.floating)
        or not math.isfinite(lr)
        or lr < 0
    ):
        raise CheckpointError(f"{where}: lr={lr!r} must be a finite number >= 0.")
    moments = []
    for key in ("exp_avg", "exp_avg_sq"):
        stored = state[key]
        if not isinstance(stored, list | tuple):
            raise CheckpointError(
                f"{where}: {key} is a {type(stored).__name__}, not a list of "
                "tensors (one per parameter)."
            )
        if len(stored) != len(params):
            raise CheckpointError(
                f"{where} has {len(stored)} tensors for {len(params)} parameters in {key}; it "
                "was saved for another module."
            )
        for i, (value, param) in enumerate(zip(stored, params, strict=True)):
            moments.append(_moment(value, param, (where, key, i, names)))
    _check_values(moments, params, (where, names))
    return CheckedAdamState(int(step), float(lr), moments)


def _label(where: str, key: str, i: int, names: Sequence[str] | None) -> str:
    """How errors name moment `i` of `key` (built only for an error, not per moment)."""
    name = f"parameter {names[i]!r}" if names is not None else f"parameter {i}"
    return f"{where}: {key}[{i}] ({name})"


def _check_values(
    moments: list[torch.Tensor],
    params: Sequence[torch.Tensor],
    context: tuple[str, Sequence[str] | None],
) -> None:
    """CheckpointError naming the first moment that holds NaN or inf, or the first second
    moment (the later half) that holds a negative value. One reduction over all moments
    of a module in the usual case, each tensor on its own only to name the bad one: for
    1,000 modules of 4 layers (64 units) the whole check took 0.25 s per tensor and takes
    0.12 s so, against about 2 s for the restore (benchmarks/RESULTS.md, checkpoint_io)."""
    if not moments:
        return
    num = len(params)  # moments: exp_avg of each parameter, then exp_avg_sq of each
    flat = [t.reshape(-1) for t in moments]
    if bool(torch.isfinite(torch.cat(flat)).all()) and not bool((torch.cat(flat[num:]) < 0).any()):
        return
    where, names = context
    for i, t in enumerate(moments):
        if not bool(torch.isfinite(t).all()):
            what = _label(where, "exp_avg" if i < num else "exp_avg_sq", i % num, names)
            raise CheckpointError(
                f"{what} holds NaN or inf (in {params[i % num].dtype}); every "
                "later step of the parameter would be NaN, so it is refused (the state was "
                "corrupted, or saved after a diverged update)."
            )
    for i, t in enumerate(moments[num:], start=num):
        if bool((t < 0).any()):
            what = _label(where, "exp_avg_sq", i - num, names)
            raise CheckpointError(
                f"{what} holds negative values; a second moment is a mean of squares (its "
                "square root would be NaN), so the checkpoint is corrupt or was edited."
            )


def _moment(
    value: object, param: torch.Tensor, label: tuple[str, str, int, Sequence[str] | None]
) -> torch.Tensor:
    """`value` as a tensor of `param`'s dtype and device, if it is a float array of its
    shape; CheckpointError starting with `_label(*label)` otherwise."""
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        # from_numpy warns on a read-only array (e.g. from Ray's object store): copy those
        value = torch.from_numpy(value if value.flags.writeable else value.copy())
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        kind = (
            f"a {value.dtype} tensor"
            if isinstance(value, torch.Tensor | np.ndarray)
            else f"a {type(value).__name__}"
        )
        raise CheckpointError(
            f"{_label(*label)} is {kind}, not a float tensor; the checkpoint is "
            "corrupt or was edited."
        )
    if value.shape != param.shape:
        raise CheckpointError(
            f"{_label(*label)} has shape {tuple(value.shape)}, the parameter {tuple(param.shape)}; the "
            "checkpoint was edited or saved for a module of another architecture."
        )
    return value.to(device=param.device, dtype=param.dtype)
