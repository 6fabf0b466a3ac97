"""LossGroup: the modules a loss is computed for at once, and how to reduce over their rows.

A Learner's loss is written once, over `[M, B, ...]` tensors (M modules, B row slots each),
as `Learner.compute_losses(group=..., configs=..., batch=..., fwd_out=...) -> [M]`. Two
kinds of group call it:

- `OneModule` (below): one module trained alone, M = 1, every slot a row
  (no mask). `Learner.compute_loss_for_module` (RLlib's per-module hook) wraps a module's
  batch in one and calls `compute_losses`.
- `StackBucket` (rlmod.core.learner_stacks): modules of one architecture trained as a
  stack; slots past a module's rows are padding (`mask` False, zeros in the batch).

A loss reduces rows only with `group.mean` / `group.var` (so padding never counts) and
reaches the modules only through `group.action_dist` and `group.compute_values`; it logs
with `learner.log(group, ...)` and asks for an early stop with
`learner.stop_early(group, ...)`, both with `[M]` values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, cast

import torch

from rlmod.core.columns import Columns

if TYPE_CHECKING:
    from rlmod.core.apis import ValueFunctionAPI
    from rlmod.core.distributions import Distribution
    from rlmod.core.multi_rl_module import ModuleID
    from rlmod.core.rl_module import RLModule

ColumnMap = Mapping[str, torch.Tensor]
"""Columns of a batch or of forward outputs, by name."""
TensorDict = dict[str, torch.Tensor]


class LossGroup(Protocol):
    """What `Learner.compute_losses` sees of the modules it computes losses for."""

    @property
    def module_ids(self) -> list[ModuleID]:
        """`module_ids[i]` is module i."""
        ...

    @property
    def mask(self) -> torch.Tensor | None:
        """`[M, B]` bool, True where a slot holds a row; None: every slot does."""
        ...

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """`[M, B, ...]` -> `[M]`: each module's mean over its rows (and the rest)."""
        ...

    def var(self, x: torch.Tensor) -> torch.Tensor:
        """`[M, B]` -> `[M]`: each module's unbiased variance over its rows, as
        `Tensor.var()` of those rows (NaN with one row)."""
        ...

    def action_dist(self, inputs: torch.Tensor) -> Distribution:
        """The modules' action distribution over `[M, B, ...]` inputs (one architecture:
        one distribution class)."""
        ...

    def compute_values(self, batch: ColumnMap, fwd_out: ColumnMap) -> torch.Tensor:
        """`[M, B]`: each module's `ValueFunctionAPI.compute_values` on its rows, reusing
        `forward_train`'s embeddings."""
        ...


class ModuleRows:
    """Unpadded rows of modules of one class, reduced over dim 1: what a loss's reductions
    see for one module trained alone (`[1, B, ...]`), and what a deferred diagnostic
    (`Learner.log_rows`) sees for N minibatches of it stacked (`[N, B, ...]`)."""

    mask: torch.Tensor | None = None

    def __init__(self, module: RLModule) -> None:
        self.module = module

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(1) if x.dim() == 2 else x.flatten(1).mean(1)

    def var(self, x: torch.Tensor) -> torch.Tensor:
        return x.var(1)

    def action_dist(self, inputs: torch.Tensor) -> Distribution:
        return self.module.action_dist(inputs)


class OneModule(ModuleRows):
    """A LossGroup of one module trained alone: M = 1, every slot a row; `batch` and
    `fwd_out` give its columns with a leading axis of 1 (views, made when read)."""

    def __init__(
        self, module_id: ModuleID, module: RLModule, batch: TensorDict, fwd_out: TensorDict
    ) -> None:
        super().__init__(module)
        self.rows = ModuleRows(module)  # without this minibatch: what log_rows keeps
        self.module_ids = [module_id]
        self._batch, self._fwd_out = batch, fwd_out
        self.batch = LeadingAxis(batch)
        self.fwd_out = LeadingAxis(fwd_out)

    def compute_values(self, batch: ColumnMap, fwd_out: ColumnMap) -> torch.Tensor:
        # the module's own columns, not the [1, B] views: a custom compute_values may
        # read any column and expects its rows on dim 0
        module = cast("ValueFunctionAPI", self.module)
        embeddings = self._fwd_out.get(Columns.EMBEDDINGS)
        return module.compute_values(self._batch, embeddings=embeddings).unsqueeze(0)


class LeadingAxis(Mapping[str, torch.Tensor]):
    """`columns` read with a leading axis of 1 (`[B, ...]` -> `[1, B, ...]` views): a loss
    over `[M, B, ...]` reads one module's columns; only the columns it reads are viewed
    (a PPO batch has some 17 columns, its loss reads 6)."""

    def __init__(self, columns: Mapping[str, torch.Tensor]) -> None:
        self._columns = columns

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._columns[key].unsqueeze(0)

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`[M, B, ...]` -> `[M]`: the mean over each module's rows where `mask` ([M, B]) is
    True, and over the trailing dims (0 for a module without rows)."""
    w = mask.to(x.dtype).view(*mask.shape, *([1] * (x.dim() - 2)))
    count = mask.sum(1).to(x.dtype) * (x[0, 0].numel() if x.dim() > 2 else 1)
    return (x * w).flatten(1).sum(1) / count.clamp_min(1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`[M, B]` -> `[M]`: the unbiased variance over each module's rows (`mask`)."""
    w = mask.to(x.dtype)
    count = w.sum(1)
    mean = (x * w).sum(1, keepdim=True) / count.clamp_min(1.0).unsqueeze(1)
    return ((x - mean).pow(2) * w).sum(1) / (count - 1.0)
