"""TrainStack: a stacked group of modules as a Learner trains it, one loss, one backward
and one optimizer step per group and minibatch.

Used by Learner (rlmod.core.learner) for the groups `find_stack_groups` forms among its
trainable modules when `stack_modules` is on. For one update (all epochs) a TrainStack
holds its modules that have rows in a working order, most rows first, with copies of
their parameter and Adam rows in that order (written back when the update ends), so
that modules of similar row counts are contiguous slices: each minibatch then runs in a
few row buckets, each padded only to its own widest module, without gathering parameter
rows per minibatch. Logged values are `[M]` tensors: nothing loops over modules in
Python per minibatch.

Why: agents whose episodes ended early leave their modules few rows (1,000 CartPole
agents, 64 env steps: 10th/50th/90th percentile 11/19/37 rows, widest 64), and padding
every module to the widest one made 64,000 row slots out of 21,970 rows in each epoch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias, overload

import numpy as np
import torch

from rlmod.core.columns import Columns
from rlmod.core.loss_group import ColumnMap, masked_mean, masked_var
from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.optim import GroupAdam, is_identity_order
from rlmod.core.rl_module import RLModule
from rlmod.core.stacked import ForwardMethod, StackedGroup
from rlmod.core.stacked_train import StackedTraining, Workspace
from rlmod.core.types import BoolArray, IntArray
from rlmod.core.update_guard import clip_limits

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig
    from rlmod.core.distributions import Distribution

TensorBatch = dict[ModuleID, dict[str, torch.Tensor]]
TensorDict = dict[str, torch.Tensor]

BUCKET_COST_SLOTS = 512
"""What one more row bucket costs per minibatch, in padded row slots: a stacked pass's
fixed cost (its loss, forward and backward are some 150 small kernels and vmap calls,
about 1.5 ms) in units of one padded row's compute (measured on the project's Xeon host,
[64, 64] PPO modules, one thread: about 350 slots per ms). Modules with more parameters
make a slot dearer, so this overstates a bucket's cost for them: they split less than
they could, never more."""


def row_buckets(k: IntArray, bucket_cost: int | None = None) -> list[tuple[int, int, int]]:
    """How to run a minibatch whose modules have `k[i]` rows, with `k` sorted from most
    rows to fewest (all > 0): contiguous buckets `(start, stop, width)` covering all
    modules, each padded to its widest (first) module, that minimize the padded slots
    plus `bucket_cost` (default BUCKET_COST_SLOTS) per bucket.

    Exact over bucket starts at changes of `k` (a bucket never starts inside a run of
    equal counts: that would add a bucket and save no slot), by dynamic programming.
    """
    cost_per_bucket = BUCKET_COST_SLOTS if bucket_cost is None else bucket_cost
    k = np.asarray(k, dtype=np.int64)
    m = len(k)
    if m == 0:
        return []
    if np.any(k[1:] > k[:-1]) or k[-1] <= 0:
        raise ValueError("row_buckets needs row counts > 0, sorted from most to fewest.")
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])  # candidate bucket starts
    ends = np.r_[starts[1:], m]
    best = np.zeros(len(starts) + 1)  # best[j]: the modules before starts[j] (ends[j-1])
    choice = np.zeros(len(starts) + 1, dtype=np.int64)
    for j in range(1, len(starts) + 1):
        stop = ends[j - 1]
        # the last bucket starts at starts[i], i < j
        cost = best[:j] + k[starts[:j]] * (stop - starts[:j]) + cost_per_bucket
        i = int(np.argmin(cost))
        best[j], choice[j] = cost[i], i
    out = []
    j = len(starts)
    while j > 0:
        i = int(choice[j])
        out.append((int(starts[i]), int(ends[j - 1]), int(k[starts[i]])))
        j = i
    return out[::-1]


class StackBucket:
    """Modules `start:stop` of a TrainStack's working order: the LossGroup
    (rlmod.core.loss_group) `Learner.compute_losses` sees for them, with `module_ids`,
    `modules`, `mask` (`[m, width]`: which slots hold rows), `positions` (their working
    positions, a slice; None where the bucket is every module of the update) and
    `call_padded`, which runs these modules with their working parameter rows (views: no
    gather); `forward_train` takes the fast path of rlmod.core.stacked_train where the
    class declares train layers, its activations in the bucket's own `workspace` (for
    one update, as the bucket)."""

    def __init__(
        self,
        stack: TrainStack,
        start: int,
        stop: int,
        width: int,
        params: Mapping[str, torch.Tensor],
        whole: bool,
        mask: torch.Tensor,
    ) -> None:
        self.group = stack.group
        self.mask: torch.Tensor = mask
        self.fast_train = stack.fast_train
        self.workspace = Workspace()
        self.start, self.stop, self.width = start, stop, width
        self.module_ids: list[ModuleID] = stack.ids[start:stop]
        self.modules: list[RLModule] = [
            stack.group.modules[i] for i in stack.order[start:stop].tolist()
        ]
        self.configs: list[AlgorithmConfig] = stack.configs[start:stop]
        max_norms, logs_global_norm = stack.clip_limits
        self.clip_limits = (max_norms[start:stop], logs_global_norm[start:stop])
        self.positions: slice[int, int, None] | None = None if whole else slice(start, stop)
        self.params = dict(params)

    def __len__(self) -> int:
        return self.stop - self.start

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return masked_mean(x, self.mask)

    def var(self, x: torch.Tensor) -> torch.Tensor:
        return masked_var(x, self.mask)

    def action_dist(self, inputs: torch.Tensor) -> Distribution:
        return self.modules[0].action_dist(inputs)

    def compute_values(self, batch: ColumnMap, fwd_out: ColumnMap) -> torch.Tensor:
        return self.call_padded(
            "compute_values", {Columns.OBS: batch[Columns.OBS]}, fwd_out[Columns.EMBEDDINGS]
        )

    @overload
    def call_padded(
        self, method: Literal["compute_values"], batch: TensorDict, *args: torch.Tensor
    ) -> torch.Tensor: ...

    @overload
    def call_padded(
        self, method: ForwardMethod, batch: TensorDict, *args: torch.Tensor
    ) -> TensorDict: ...

    def call_padded(
        self,
        method: Literal["compute_values"] | ForwardMethod,
        batch: TensorDict,
        *args: torch.Tensor,
    ) -> TensorDict | torch.Tensor:
        """`StackedGroup.call_padded` of these modules, on their working rows."""
        if (
            method == "forward_train"
            and self.fast_train is not None
            and not args
            and torch.is_grad_enabled()
        ):
            return self.fast_train(batch[Columns.OBS], self.params, self.workspace)
        return self.group.call_padded(method, batch, *args, params=self.params)


StackMinibatch: TypeAlias = "list[tuple[StackBucket, TensorDict]]"
"""A group's minibatch, per bucket: the bucket and its columns `[m, width, ...]`
(`TrainStack.minibatch`; the bucket's `mask` says which slots hold rows)."""


class TrainStack:
    """A StackedGroup, its GroupAdam and its working state of one update.

    Between `start_update` and `finish_update`: `ids`/`order` are the modules with rows
    (trainable and present in the batch) by working position, most rows first;
    `optimizer` is the group's GroupAdam (module order) and `work` a GroupAdam over the
    working parameter rows (`GroupAdam.rows`), whose gradients the buckets' backward
    passes fill in place.

    Row layout of an update: the rows of all working modules are concatenated (in working
    order) with one all-zero row at the end; a bucket's minibatch is a gather of
    `[m, width]` row numbers into that, where the slots past a module's rows point at the
    zero row (finite inputs, so a padded slot can never put a NaN into a loss) and `mask`
    is False.
    """

    def __init__(self, group: StackedGroup, optimizer: GroupAdam) -> None:
        self.group = group
        self.optimizer = optimizer
        self.module_ids = group.module_ids
        self.fast_train = StackedTraining.of(group)  # forward_train's fast path, or None
        self.ids: list[ModuleID] = []
        self.order = np.zeros(0, dtype=np.int64)
        self.configs: list[AlgorithmConfig] = []
        self.clip_limits = clip_limits(self.configs)
        self.work: GroupAdam | None = None
        self._copied = False  # working parameter rows are copies (the order is not the group's)
        self.columns: dict[str, torch.Tensor] = {}
        self.num_rows = np.zeros(0, dtype=np.int64)  # per working position
        self._k = np.zeros(0, dtype=np.int64)  # rows per minibatch, per working position
        self._offsets = np.zeros(0, dtype=np.int64)
        self._zero_row = 0
        self._leaves: list[list[tuple[int, torch.Tensor]]] = []
        self._buckets: list[StackBucket] = []
        self._epoch: list[TensorDict] = []
        self._in_order: list[TensorDict] | None = None  # whole-batch minibatches, cached
        self._logs: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = defaultdict(list)
        self._pending: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        # early stops (Learner.stop_early with a bucket): per working position, and this
        # minibatch's request (exceeded, checked)
        self.stopped = np.zeros(0, dtype=bool)
        self.stop_checked = np.zeros(0, dtype=bool)
        self._stop_request: tuple[torch.Tensor, torch.Tensor] | None = None

    def __len__(self) -> int:
        """Modules training in the current update."""
        return len(self.ids)

    # ------------------------------------------------------------------ an update
    def start_update(
        self, batch: TensorBatch, configs: Mapping[ModuleID, AlgorithmConfig], size: int | None
    ) -> None:
        """Takes the rows of the members in `configs` (the trainable ones) out of `batch`
        and sets up the working order for minibatches of `min(size, rows)` rows per module
        (`size` None: all of a module's rows); `configs[m]` is module m's config."""
        self._logs = defaultdict(list)
        self._pending = {}
        self._stop_request = None
        self._in_order = None
        present = [
            (i, m, next(iter(batch[m].values())).shape[0])
            for i, m in enumerate(self.module_ids)
            if m in configs and m in batch
        ]
        present = [p for p in present if p[2] > 0]
        n = np.array([r for *_, r in present], dtype=np.int64)
        k = n if size is None else np.minimum(size, n)
        by_rows = np.argsort(-k, kind="stable")
        self.order = np.array([present[j][0] for j in by_rows.tolist()], dtype=np.int64)
        self.ids = [present[j][1] for j in by_rows.tolist()]
        self.stopped = np.zeros(len(self.ids), dtype=bool)
        self.stop_checked = np.zeros(len(self.ids), dtype=bool)
        self.configs = [configs[m] for m in self.ids]
        self.clip_limits = clip_limits(self.configs)
        self.num_rows, self._k = n[by_rows], k[by_rows]
        self._offsets = np.cumsum(self.num_rows) - self.num_rows
        self._zero_row = int(self.num_rows.sum())
        parts: dict[str, list[torch.Tensor]] = defaultdict(list)
        for mid in self.ids:
            for c, v in batch[mid].items():
                parts[c].append(v)
        # columns every member has (a learner connector may add some to one module only)
        self.columns = {
            c: torch.cat([*v, v[0].new_zeros((1, *v[0].shape[1:]))])
            for c, v in parts.items()
            if len(v) == len(self.ids)
        }
        if not self.ids:
            self.work, self._buckets, self._leaves = None, [], []
            return
        # working parameter rows: the group's storage itself (detached views) where the
        # order is every module in order, else copies in working order
        same = is_identity_order(self.order, len(self.group))
        self._copied = not same
        rows = torch.from_numpy(self.order).to(self.optimizer.params[0].device)
        with torch.no_grad():
            work_params = [p.detach() if same else p.detach()[rows] for p in self.optimizer.params]
        self.work = self.optimizer.rows(self.order, work_params)
        self.work.grad_pieces = self._grads  # the buckets' leaves hold the gradients
        # every stacked tensor of the group in working order (trained ones: the working
        # rows; others and buffers: the group's, gathered where the order is not its own)
        trained = iter(work_params)
        state: list[tuple[str, torch.Tensor, bool]] = []
        for name, t in [*self.group.params.items(), *self.group.buffers.items()]:
            if isinstance(t, torch.nn.Parameter) and t.requires_grad:
                state.append((name, next(trained), True))
            else:
                state.append((name, t.detach() if same else t.detach()[rows], False))
        self._leaves = [[] for _ in work_params]  # per trained parameter: (start, leaf)
        device = rows.device
        spans = row_buckets(self._k)
        self._buckets = []
        for start, stop, width in spans:
            leaves: dict[str, torch.Tensor] = {}
            j = 0
            for name, rows_t, is_trained in state:
                part = rows_t[start:stop]
                if is_trained:  # a leaf of its own: backward leaves its gradient there
                    part.requires_grad_()
                    self._leaves[j].append((start, part))
                    j += 1
                leaves[name] = part
            k_here = torch.from_numpy(self._k[start:stop]).to(device)
            mask = torch.arange(width, device=device).unsqueeze(0) < k_here.unsqueeze(1)
            self._buckets.append(
                StackBucket(self, start, stop, width, leaves, whole=len(spans) == 1, mask=mask)
            )

    def finish_update(self) -> None:
        """Writes the working parameter and Adam rows back into the group's storage (the
        per-module views), and drops the working state. Called when the update ends, also
        when it raised."""
        if self.work is not None:
            if self._copied:
                rows = torch.from_numpy(self.order).to(self.optimizer.params[0].device)
                with torch.no_grad():
                    for p, w in zip(self.optimizer.params, self.work.params, strict=True):
                        p.index_copy_(0, rows, w)
            self.optimizer.put_rows(self.work, self.order)
        self.work, self._leaves, self._buckets = None, [], []
        self._epoch, self._in_order, self.columns = [], None, {}

    # ------------------------------------------------------------------ minibatches
    def start_epoch(self, perms: Sequence[IntArray] | None, num_steps: int) -> None:
        """The row order of this epoch: `perms[j]` shuffles working module j's rows (None:
        rows in order, all of them in one minibatch), each module's cycled to `num_steps`
        minibatches of its `k` rows, as Learner._minibatches does per module."""
        if perms is None and self._in_order is not None:
            self._epoch = self._in_order
            return
        self._epoch = []
        device = self._buckets[0].mask.device if self._buckets else None
        for bucket in self._buckets:
            a, b, width = bucket.start, bucket.stop, bucket.width
            k, n = self._k[a:b], self.num_rows[a:b]
            slot = np.arange(width)
            step = np.arange(num_steps)[:, None, None]
            # minibatch s, module j, slot t < k[j]: its rows cycled, (s * k + t) mod n
            pos = (step * k[None, :, None] + slot[None, None, :]) % n[None, :, None]
            if perms is not None:
                cat = np.concatenate([perms[j] for j in range(a, b)])
                pos = cat[pos + (np.cumsum(n) - n)[None, :, None]]
            rows = np.where(
                slot[None, None, :] < k[None, :, None],
                pos + self._offsets[a:b][None, :, None],
                self._zero_row,
            )
            # index_select of the flat rows: v[index] (advanced indexing) took twice as
            # long, 83 against 38 ms for 1.28M rows of [N, 4] observations (AMD EPYC)
            flat = torch.from_numpy(rows.reshape(-1)).to(device)
            self._epoch.append(
                {
                    c: v.index_select(0, flat).view(*rows.shape, *v.shape[1:])
                    for c, v in self.columns.items()
                }
            )
        if perms is None:
            self._in_order = self._epoch

    def minibatch(self, step: int) -> StackMinibatch:
        """Minibatch `step` of this epoch, per bucket: (the bucket, its columns
        `[m, width, ...]` (views))."""
        return [
            (bucket, {c: v[step] for c, v in cols.items()})
            for bucket, cols in zip(self._buckets, self._epoch, strict=True)
        ]

    # ------------------------------------------------------------------ gradients
    def zero_grad(self) -> None:
        """Drops the buckets' gradients (the next backward pass makes new ones)."""
        for pieces in self._leaves:
            for _, leaf in pieces:
                leaf.grad = None

    def _grads(self) -> list[list[tuple[int, torch.Tensor]]]:
        """Per trained parameter, its gradient pieces `(first working row, tensor)`, one
        per bucket that has one."""
        return [
            [(start, leaf.grad) for start, leaf in pieces if leaf.grad is not None]
            for pieces in self._leaves
        ]

    def grads(self) -> list[torch.Tensor]:
        """Every gradient piece of the working rows (float16 loss scaling)."""
        return [g for pieces in self._grads() for _, g in pieces]

    def grad_norms(self) -> torch.Tensor:
        """`[W]`: each working module's global L2 gradient norm over its rows of all
        parameters (what `clip_grad_norm_` computes over that module's own parameters)."""
        squares = torch.zeros(len(self), device=self.optimizer.params[0].device)
        for pieces in self._grads():
            for start, g in pieces:
                norm = torch.linalg.vector_norm(g.flatten(1), dim=1)
                squares[start : start + g.shape[0]] += norm * norm
        return squares.sqrt()

    def finite(self, losses: torch.Tensor, norms: torch.Tensor | None) -> BoolArray:
        """`[W]`: whether each module's loss and gradient norm are finite (one sync)."""
        norms = self.grad_norms() if norms is None else norms
        return torch.isfinite(losses + norms).cpu().numpy()

    def clip(self, norms: torch.Tensor, max_norms: torch.Tensor) -> None:
        """Scales each module's gradient rows by min(1, max_norm / (norm + 1e-6)), as
        `torch.nn.utils.clip_grad_norm_` does per module (inf: no clipping)."""
        coef = torch.clamp(max_norms / (norms + 1e-6), max=1.0)
        for pieces in self._grads():
            for start, g in pieces:
                g.mul_(coef[start : start + g.shape[0]].view(-1, *([1] * (g.dim() - 1))))

    @property
    def stepper(self) -> GroupAdam:
        """The optimizer of the working rows: `stepper.step(mask)` steps the working
        modules marked in `mask` (`[W]` bool)."""
        assert self.work is not None
        return self.work

    # ------------------------------------------------------------------ early stops
    def request_stop(
        self,
        values: torch.Tensor,
        limits: torch.Tensor,
        positions: slice[int, int, None] | None = None,
    ) -> None:
        """Learner.stop_early of a bucket, for the current minibatch: `values`, `limits` `[W]` or
        those of the modules at working `positions` (an inf limit: no check)."""
        exceeded, checked = values.detach() > limits, torch.isfinite(limits)
        if positions is None:
            self._stop_request = (exceeded, checked)
            return
        full, full_checked = self._stop_request or (
            torch.zeros(len(self), dtype=torch.bool, device=values.device),
            torch.zeros(len(self), dtype=torch.bool, device=values.device),
        )
        full[positions], full_checked[positions] = exceeded, checked
        self._stop_request = (full, full_checked)

    def resolve_stops(self) -> BoolArray:
        """`[W]`: the modules stopped in this update, this minibatch's requests included."""
        if self._stop_request is not None:
            exceeded, checked = (t.cpu().numpy() for t in self._stop_request)
            self.stopped |= exceeded & checked
            self.stop_checked |= checked
            self._stop_request = None
        return self.stopped

    def early_stops(self) -> dict[ModuleID, bool]:
        """Per module checked for an early stop in this update: whether it stopped."""
        return {self.ids[j]: bool(self.stopped[j]) for j in np.flatnonzero(self.stop_checked)}

    # ------------------------------------------------------------------ logs
    def log(
        self,
        values: Mapping[str, torch.Tensor],
        valid: torch.Tensor | BoolArray | None = None,
        positions: slice[int, int, None] | None = None,
    ) -> None:
        """Per-module values of the current minibatch: `[W]`, or those of the modules at
        working `positions`; `valid` (bool, same size) marks the modules that logged the
        key at all (None: all of them)."""
        if isinstance(valid, np.ndarray):
            valid = torch.from_numpy(valid).to(self.optimizer.params[0].device)
        for key, v in values.items():
            v = v.detach().float()
            ok = (
                torch.ones(v.shape[0], dtype=torch.bool, device=v.device)
                if valid is None
                else valid
            )
            if positions is None:
                self._pending[key] = (v, ok)
                continue
            full, full_ok = self._pending.get(key) or (
                torch.zeros(len(self), device=v.device),
                torch.zeros(len(self), dtype=torch.bool, device=v.device),
            )
            full[positions] = v
            full_ok[positions] = ok
            self._pending[key] = (full, full_ok)

    def commit(self, stepped: BoolArray) -> None:
        """Keeps the current minibatch's logs of the modules that were stepped (a skipped
        module's are dropped from its means, as TrainAlone.commit does)."""
        if not self._pending:
            return
        kept = torch.from_numpy(stepped).to(self.optimizer.params[0].device)
        for key, (v, valid) in self._pending.items():
            self._logs[key].append((v, kept & valid))
        self._pending = {}

    def pending_terms(self, position: int) -> dict[str, float]:
        """Working module `position`'s logged values of the current minibatch (errors)."""
        return {k: float(v[position]) for k, (v, _) in self._pending.items()}

    def means(self) -> dict[ModuleID, dict[str, float]]:
        """Per module of this update, the mean of each logged key over its kept
        minibatches."""
        per_key = {}
        for key, entries in self._logs.items():
            values = torch.stack([v for v, _ in entries])  # [S, W]
            keep = torch.stack([w for _, w in entries])
            num = keep.sum(0)
            total = torch.where(keep, values, values.new_zeros(())).sum(0)
            per_key[key] = ((total / num.clamp_min(1)).tolist(), (num > 0).tolist())
        return {
            mid: {k: m[j] for k, (m, has) in per_key.items() if has[j]}
            for j, mid in enumerate(self.ids)
        }
