"""A Learner's batches: sample results as tensors, and how an epoch splits them into minibatches.

Functions of the batch and the random generator they are given (no Learner state), used by
Learner.update (rlmod.core.learner); `epoch_minibatches` also asks the StackedTrainer for its
groups' minibatches of the same epoch.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array, IntArray

if TYPE_CHECKING:
    from rlmod.core.learner_stacks import StackMinibatch, TrainStack
    from rlmod.core.stacked_trainer import StackedTrainer

NumpyBatch = Mapping[ModuleID, Mapping[str, Array]]
"""Per module ID, its rows as numpy columns: what Learners receive (a `SampleResult`)."""
TensorBatch = dict[ModuleID, dict[str, torch.Tensor]]
"""Per module ID, its rows as tensor columns: what learner connectors and losses see."""


def to_tensor_batch(
    batches: NumpyBatch | Sequence[NumpyBatch], known: Collection[ModuleID], device: torch.device
) -> TensorBatch:
    """The rows of the modules in `known`, concatenated per module, as tensors on `device`
    (zero-copy on the CPU where possible); other modules' rows are left out."""
    seq = [batches] if isinstance(batches, Mapping) else list(batches)
    out: TensorBatch = {}
    for mid in sorted({m for b in seq for m in b}):  # sorted: no hash-order dependence
        if mid not in known:
            continue
        parts = [b[mid] for b in seq if mid in b]
        # Writable and contiguous: arrays from Ray's object store are read-only (copied
        # here once; torch warns on a read-only view), local ones are taken as they are.
        out[mid] = {
            col: torch.from_numpy(
                np.require(
                    parts[0][col] if len(parts) == 1 else np.concatenate([p[col] for p in parts]),
                    requirements=("C", "W"),
                )
            ).to(device)
            for col in parts[0]
        }
    return out


def num_rows(batch: TensorBatch) -> dict[ModuleID, int]:
    """Rows per module of a batch (every column of a module has its rows)."""
    return {m: next(iter(cols.values())).shape[0] for m, cols in batch.items()}


def minibatch_plan(rows: Mapping[ModuleID, int], size: int | None) -> tuple[int, int | None]:
    """(minibatches per epoch, rows per module and minibatch (None: all its rows)):
    round(rows / size) minibatches of the module with the most rows, one (of every row,
    in order) where that is 1 or `size` (`minibatch_size`) is None."""
    longest = max(rows.values(), default=0)
    if longest == 0:
        return 0, None
    if size is None or size >= longest:
        return 1, None
    num_steps = max(1, round(longest / size))
    return num_steps, None if num_steps <= 1 else size


def shuffled_rows(
    batch: TensorBatch, perms: Mapping[ModuleID, IntArray], num_steps: int, size: int
) -> TensorBatch:
    """Each module's columns gathered once per epoch in its shuffled order `perms[mid]`,
    repeated to `num_steps * min(size, rows)` rows (a module with fewer rows than a
    minibatch cycles through them again, as RLlib's cyclic iterator does); minibatch i is
    then rows `[i * k, (i + 1) * k)`, a view (small gathers per minibatch cost ~4 us each)."""
    out: TensorBatch = {}
    for mid, perm in perms.items():
        cols = batch[mid]
        device = next(iter(cols.values())).device
        rows = torch.from_numpy(np.resize(perm, num_steps * min(size, len(perm)))).to(device)
        out[mid] = {c: v[rows] for c, v in cols.items()}
    return out


def epoch_minibatches(
    batch: TensorBatch,
    rows: Mapping[ModuleID, int],
    num_steps: int,
    size: int | None,
    rng: np.random.Generator,
    stacked: StackedTrainer,
) -> Iterator[tuple[TensorBatch, list[tuple[TrainStack, StackMinibatch]]]]:
    """One epoch's shuffled minibatches of `size` rows per module (`minibatch_plan`),
    `num_steps` of them (the few rows past a multiple of the size wait for the next
    epoch's shuffle). Yields the minibatch of the modules trained alone and each stacked
    group's (in buckets). Every module draws its shuffle from `rng` in the same order,
    stacked or not, so both ways train on the same minibatches."""
    if num_steps == 0:
        return  # no trainable module (policies_to_train) has rows: nothing to step
    if size is None:
        stacked.start_epoch(None, 1)
        yield {m: c for m, c in batch.items() if m not in stacked}, stacked.minibatch(0)
        return
    perms = {mid: rng.permutation(n) for mid, n in rows.items() if n > 0}
    shuffled = shuffled_rows(
        batch, {m: p for m, p in perms.items() if m not in stacked}, num_steps, size
    )
    stacked.start_epoch({m: p for m, p in perms.items() if m in stacked}, num_steps)
    for i in range(num_steps):
        mb: TensorBatch = {}
        for mid, cols in shuffled.items():
            k = min(size, rows[mid])
            mb[mid] = {c: v[i * k : (i + 1) * k] for c, v in cols.items()}
        yield mb, stacked.minibatch(i)
