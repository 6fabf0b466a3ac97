"""TrainStack: a stacked group of modules as a Learner trains it, one loss, one backward
and one optimizer step per group and minibatch.

Used by Learner (rlmod.core.learner) for the groups `find_stack_groups` forms among its
trainable modules when `stack_modules` is on. Holds the group's optimizer (GroupAdam), its
rows of the current update in one padded layout `[M, K, ...]`, and its logged values as
`[M]` tensors, so that nothing here loops over modules in Python per minibatch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

import numpy as np
import torch

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.optim import GroupAdam
from rlmod.core.stacked import StackedGroup

TensorBatch = dict[ModuleID, dict[str, torch.Tensor]]
TensorDict = dict[str, torch.Tensor]

GATHER_COST_SLOTS = 32
"""What running a module in a bucket of its own (not the whole group) costs, in padded row
slots: its parameter rows are gathered for the pass and their gradients scattered back
(measured on the project's Xeon host, [64, 64] PPO modules: about 140 us per module, the
compute of ~32 padded rows)."""
MIN_SPLIT_ROWS = 8192
"""Below this many padded slots a minibatch is cheap to pad whole (each extra bucket
costs a stacked pass's fixed overhead, about a millisecond)."""


def row_buckets(k: np.ndarray) -> list[tuple[np.ndarray | None, int]]:
    """How to run a minibatch whose modules have `k[i]` rows: (module positions, None for
    the whole group; width) per bucket, each bucket padded to its widest module.

    The whole group padded to its widest module, unless two buckets (the modules with
    the most rows, the rest) cost fewer padded slots plus GATHER_COST_SLOTS per module by
    a fifth: agents whose episodes ended early leave their modules few rows, and padding
    them to the longest would multiply the work.
    """
    active = np.flatnonzero(k > 0)
    if len(active) == 0:
        return []
    width = int(k.max())
    whole = width * len(k)
    if whole < MIN_SPLIT_ROWS or len(active) < 2:
        return [(None, width)]
    order = active[np.argsort(-k[active], kind="stable")]
    sorted_k = k[order]
    split = np.arange(1, len(order))  # the first `split` modules form the wide bucket
    cost = (width * split + sorted_k[split] * (len(order) - split)
            + GATHER_COST_SLOTS * len(order))
    best = int(np.argmin(cost))
    if cost[best] >= 0.8 * whole:
        return [(None, width)]
    s = int(split[best])
    return [(np.sort(order[:s]), width), (np.sort(order[s:]), int(sorted_k[s]))]


class TrainStack:
    """A StackedGroup, its GroupAdam and its rows of one update.

    Row layout of an update: the rows of all members are concatenated (module after
    module, as the batch holds them) with one all-zero row at the end; a minibatch is a
    gather of `[M, K]` row numbers into that, where the slots past a module's rows point
    at the zero row (finite inputs, so a padded slot can never put a NaN into a loss)
    and `mask` is False.
    """

    def __init__(self, group: StackedGroup, optimizer: GroupAdam) -> None:
        self.group = group
        self.optimizer = optimizer
        self.module_ids = group.module_ids
        self.active = np.zeros(len(group), dtype=bool)  # trainable with rows, this update
        self.columns: dict[str, torch.Tensor] = {}
        self.num_rows = np.zeros(len(group), dtype=np.int64)
        self._offsets = np.zeros(len(group), dtype=np.int64)
        self._buckets: list[tuple[torch.Tensor | None, TensorDict, torch.Tensor]] = []
        self._logs: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = defaultdict(list)
        self._pending: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    # ------------------------------------------------------------------ rows
    def start_update(self, batch: TensorBatch, trainable: Collection[ModuleID]) -> None:
        """Takes the members' rows out of `batch` (they are trained here, as one)."""
        present = [(i, m) for i, m in enumerate(self.module_ids) if m in trainable and m in batch]
        self.active[:] = False
        self.num_rows[:] = 0
        self._logs = defaultdict(list)
        parts: dict[str, list[torch.Tensor]] = defaultdict(list)
        offset = 0
        for i, mid in present:
            cols = batch[mid]
            n = next(iter(cols.values())).shape[0]
            self.num_rows[i], self._offsets[i] = n, offset
            self.active[i] = n > 0
            offset += n
            for c, v in cols.items():
                parts[c].append(v)
        # columns every member has (a learner connector may add some to one module only)
        common = [c for c, v in parts.items() if len(v) == len(present)]
        self.columns = {c: torch.cat([*parts[c], parts[c][0].new_zeros((1, *parts[c][0].shape[1:]))])
                        for c in common}
        self._zero_row = offset

    def start_epoch(self, perms: Mapping[int, np.ndarray] | None, num_steps: int,
                    size: int | None) -> None:
        """The row order of this epoch: `perms[i]` shuffles module i's rows (None: rows
        in order, the whole batch in one minibatch), each module's cycled to `num_steps`
        minibatches of min(size, its rows) rows, as Learner._minibatches does per module."""
        n = self.num_rows
        k = n.copy() if perms is None or size is None else np.minimum(size, n)
        k[~self.active] = 0
        self._buckets = []
        for positions, width in row_buckets(k):
            picked = np.arange(len(k)) if positions is None else positions
            rows = np.full((num_steps, len(picked), width), self._zero_row, dtype=np.int64)
            for j, i in enumerate(picked.tolist()):
                if k[i] == 0:
                    continue
                order = np.arange(n[i]) if perms is None else perms[i]
                idx = np.resize(order, num_steps * k[i]).reshape(num_steps, k[i])
                rows[:, j, :k[i]] = idx + self._offsets[i]
            index = torch.from_numpy(rows)
            mask = torch.arange(width).unsqueeze(0) < torch.from_numpy(k[picked]).unsqueeze(1)
            self._buckets.append((None if positions is None else torch.from_numpy(positions),
                                  {c: v[index] for c, v in self.columns.items()}, mask))

    def minibatch(self, step: int) -> list[tuple[torch.Tensor | None, TensorDict, torch.Tensor]]:
        """Minibatch `step` of this epoch, per bucket of modules: (positions in the group,
        None for all; columns `[M', K, ...]` (views); mask `[M', K]`)."""
        return [(pos, {c: v[step] for c, v in cols.items()}, mask)
                for pos, cols, mask in self._buckets]

    # ------------------------------------------------------------------ gradients
    def grad_norms(self) -> torch.Tensor:
        """`[M]`: each module's global L2 gradient norm over its rows of all parameters
        (what `clip_grad_norm_` computes over that module's own parameters)."""
        grads = [p.grad for p in self.optimizer.params if p.grad is not None]
        if not grads:
            return torch.zeros(len(self.group))
        per_param = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])
        return torch.linalg.vector_norm(per_param, dim=0)

    def clip(self, norms: torch.Tensor, max_norms: torch.Tensor) -> None:
        """Scales each module's gradient rows by min(1, max_norm / (norm + 1e-6)), as
        `torch.nn.utils.clip_grad_norm_` does per module (inf: no clipping)."""
        coef = torch.clamp(max_norms / (norms + 1e-6), max=1.0)
        for p in self.optimizer.params:
            if p.grad is not None:
                p.grad.mul_(coef.view(-1, *([1] * (p.grad.dim() - 1))))

    # ------------------------------------------------------------------ logs
    def log(self, values: Mapping[str, torch.Tensor], valid: torch.Tensor | None = None,
            positions: torch.Tensor | None = None) -> None:
        """Per-module values of the current minibatch: `[M]`, or `[M']` for the modules at
        `positions`; `valid` (bool, same size) marks the modules that logged the key at
        all (None: all of them)."""
        size = len(self.group)
        for key, v in values.items():
            v = v.detach().float()
            ok = torch.ones(v.shape[0], dtype=torch.bool) if valid is None else valid
            if positions is None:
                self._pending[key] = (v, ok)
                continue
            full, full_ok = self._pending.get(key) or (torch.zeros(size),
                                                      torch.zeros(size, dtype=torch.bool))
            full[positions] = v
            full_ok[positions] = ok
            self._pending[key] = (full, full_ok)

    def commit(self, stepped: torch.Tensor) -> None:
        """Keeps the current minibatch's logs of the modules that were stepped (a skipped
        module's are dropped from its means, as Learner._skip_non_finite does)."""
        for key, (v, valid) in self._pending.items():
            self._logs[key].append((v, stepped & valid))
        self._pending = {}

    def pending_terms(self, position: int) -> dict[str, float]:
        """Module `position`'s logged values of the current minibatch (error messages)."""
        return {k: float(v[position]) for k, (v, _) in self._pending.items()}

    def means(self) -> dict[ModuleID, dict[str, float]]:
        """Per module, the mean of each logged key over its kept minibatches."""
        out: dict[ModuleID, dict[str, float]] = {}
        per_key = {}
        for key, entries in self._logs.items():
            values = torch.stack([v for v, _ in entries])  # [S, M]
            keep = torch.stack([w for _, w in entries])
            num = keep.sum(0)
            total = torch.where(keep, values, torch.zeros(())).sum(0)
            per_key[key] = ((total / num.clamp_min(1)).tolist(), (num > 0).tolist())
        for i, mid in enumerate(self.module_ids):
            if not self.active[i]:
                continue
            out[mid] = {k: m[i] for k, (m, has) in per_key.items() if has[i]}
        return out
