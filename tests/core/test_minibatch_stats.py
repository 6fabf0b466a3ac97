"""Deferred per-minibatch diagnostics (rlmod.core.minibatch_stats, Learner.log_rows): the
values reduced once per update are those computed in each minibatch, bit for bit."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import torch

from rlmod.algorithms.ppo.ppo_learner import (
    _clip_fraction,
    _explained_var,
    _mean_entropy,
    _mean_kl,
)
from rlmod.core.distributions import Categorical
from rlmod.core.loss_group import ModuleRows
from rlmod.core.minibatch_stats import RowStat, mean_over_minibatches, per_minibatch

# what Learner.log_rows defers for a module trained alone: the reducer bound to its rows
ROWS = ModuleRows(SimpleNamespace(action_dist=Categorical))  # type: ignore[arg-type]


def _rows(n: int, size: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(size, generator=gen) * (1 + i % 7) + i for i in range(n)]


def test_stacked_reductions_equal_each_minibatch_alone_bit_for_bit() -> None:
    targets, preds, ratios = _rows(64, 128, 0), _rows(64, 128, 1), _rows(64, 128, 2)
    logits, old = _rows(64, 256, 3), _rows(64, 256, 4)
    logits = [x.view(128, 2) for x in logits]
    old = [x.view(128, 2) for x in old]
    cases = [
        (
            [
                RowStat(partial(_explained_var, ROWS), (t[None], p[None]))
                for t, p in zip(targets, preds, strict=True)
            ],
            [
                1.0 - (t - p).var() / t.var().clamp_min(1e-8)
                for t, p in zip(targets, preds, strict=True)
            ],
        ),
        (
            [RowStat(partial(_clip_fraction, 0.2, ROWS), (r[None],)) for r in ratios],
            [((r - 1.0).abs() > 0.2).float().mean() for r in ratios],
        ),
        (
            [RowStat(partial(_mean_entropy, ROWS), (x[None],)) for x in logits],
            [Categorical(x).entropy().mean() for x in logits],
        ),
        (
            [
                RowStat(partial(_mean_kl, ROWS), (o[None], x[None]))
                for o, x in zip(old, logits, strict=True)
            ],
            [Categorical(o).kl(Categorical(x)).mean() for o, x in zip(old, logits, strict=True)],
        ),
    ]
    for deferred, eager in cases:
        assert torch.equal(per_minibatch(deferred), torch.stack(eager))
        assert mean_over_minibatches(deferred) == float(torch.stack(eager).mean())
        assert torch.equal(deferred[5].value(), eager[5])


def test_minibatches_of_different_sizes_are_reduced_one_by_one() -> None:
    rows = [torch.arange(4.0), torch.arange(6.0)]
    stats = [RowStat(lambda x: x.mean(1), (r[None],)) for r in rows]
    assert per_minibatch(stats).tolist() == [1.5, 2.5]
    # plain values mixed with deferred ones (a Learner subclass logging both ways)
    mixed = [torch.tensor(1.0), stats[0]]
    assert per_minibatch(mixed).tolist() == [1.0, 1.5]
