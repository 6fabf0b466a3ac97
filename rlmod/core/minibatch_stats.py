"""What a Learner logged per minibatch, and its mean over the minibatches of an update.

An entry is either a value (a 0-d tensor, computed in the minibatch) or a `RowStat`: the
minibatch's per-row tensors and the function that reduces them to the value, run once per
update on all minibatches' rows stacked (`Learner.log_rows`, for a module trained alone;
a stacked group's are computed in the minibatch, `[M]` at once). Why: the diagnostics PPO
reports but does not train on (KL, explained variance, clip fraction, and the entropy
when its coefficient is 0) are about 18 tiny kernels per minibatch, ~5 ms of a 61 ms
tuned-CartPole update on a 2-core Xeon (AVX-512); stacked, they are 18 kernels per
update. Reductions over the rows dimension of the stacked tensors give the same floats as
over each minibatch alone (checked bit for bit in tests/core/test_minibatch_stats.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

RowReduce = Callable[..., torch.Tensor]  # type: ignore[explicit-any]
"""`reduce(*rows) -> [N]`; the rows are 1 or 2 tensors, so the arity is left open."""

GroupReduce = Callable[..., torch.Tensor]  # type: ignore[explicit-any]
"""`reduce(group, *rows) -> [M]`: a diagnostic of `Learner.log_rows`, reducing rows
`[M, B, ...]` with the LossGroup's `mean` / `var`; the same function reduces N stacked
minibatches of one module, `[N, B, ...]` -> `[N]`, given a `ModuleRows`."""


class RowStat(NamedTuple):
    """One minibatch's rows of a deferred diagnostic, each `[1, B, ...]`.

    `reduce(*rows)` takes the rows of N minibatches concatenated, each `[N, B, ...]`, and
    returns the N values `[N]` (reducing over dim 1, the rows: `x.mean(1)`, not
    `x.mean()`); the same function for every minibatch of an update and key.
    """

    reduce: RowReduce
    rows: tuple[torch.Tensor, ...]

    def value(self) -> torch.Tensor:
        """This minibatch's value alone, 0-d."""
        return self.reduce(*self.rows)[0]


Logged = torch.Tensor | RowStat
"""One minibatch's entry of a logged key."""


def per_minibatch(entries: Sequence[Logged]) -> torch.Tensor:
    """The value of each minibatch, `[N]`: deferred ones (`RowStat`) computed in one call
    where all minibatches have the same row shapes (one per minibatch otherwise)."""
    stats = [e for e in entries if isinstance(e, RowStat)]
    if stats and len(stats) == len(entries):
        shapes = [tuple(r.shape for r in s.rows) for s in stats]
        if all(s == shapes[0] for s in shapes):
            columns = zip(*(s.rows for s in stats), strict=True)
            return stats[0].reduce(*(torch.cat(c) for c in columns))
    # values: 0-d, or `[1]` (one module's entry of a LossGroup's `[M]`)
    return torch.stack([(e.value() if isinstance(e, RowStat) else e).reshape(()) for e in entries])


def mean_over_minibatches(entries: Sequence[Logged]) -> float:
    """The mean over minibatches of one logged key (what `Learner.update` returns)."""
    return float(per_minibatch(entries).float().mean())
