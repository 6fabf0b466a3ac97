"""Deferred per-minibatch diagnostics (rlmod.core.minibatch_stats, Learner.log_rows): the
values reduced once per update are those computed in each minibatch, bit for bit."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.ppo.ppo_learner import (
    PPOLearner,
    _clip_fraction,
    _explained_var,
    _mean_entropy,
    _mean_kl,
)
from rlmod.core.columns import Columns
from rlmod.core.distributions import Categorical
from rlmod.core.minibatch_stats import RowStat, mean_over_minibatches, per_minibatch


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
            [RowStat(_explained_var, (t, p)) for t, p in zip(targets, preds, strict=True)],
            [
                1.0 - (t - p).var() / t.var().clamp_min(1e-8)
                for t, p in zip(targets, preds, strict=True)
            ],
        ),
        (
            [RowStat(lambda r: _clip_fraction(0.2, r), (r,)) for r in ratios],
            [((r - 1.0).abs() > 0.2).float().mean() for r in ratios],
        ),
        (
            [RowStat(lambda x: _mean_entropy(Categorical, x), (x,)) for x in logits],
            [Categorical(x).entropy().mean() for x in logits],
        ),
        (
            [
                RowStat(lambda o, x: _mean_kl(Categorical, o, x), (o, x))
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
    stats = [RowStat(lambda x: x.mean(1), (r,)) for r in rows]
    assert per_minibatch(stats).tolist() == [1.5, 2.5]
    # plain values mixed with deferred ones (a Learner subclass logging both ways)
    mixed = [torch.tensor(1.0), stats[0]]
    assert per_minibatch(mixed).tolist() == [1.0, 1.5]


class _EagerPPOLearner(PPOLearner):
    """Also logs PPO's deferred diagnostics as they were computed before (per minibatch)."""

    def compute_loss_for_module(
        self,
        *,
        module_id: str,
        config: Any,
        batch: dict[str, torch.Tensor],
        fwd_out: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        total = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        assert self.module is not None
        module: Any = self.module[module_id]
        with torch.no_grad():
            dist = module.action_dist(fwd_out[Columns.ACTION_DIST_INPUTS])
            old = module.action_dist(batch[Columns.ACTION_DIST_INPUTS])
            ratio = torch.exp(dist.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP])
            vf = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
            vt = batch[Columns.VALUE_TARGETS]
            self.log(
                module_id,
                eager_mean_kl_loss=old.kl(dist).mean(),
                eager_entropy=dist.entropy().mean(),
                eager_vf_explained_var=1.0 - (vt - vf).var() / vt.var().clamp_min(1e-8),
                eager_clip_fraction=((ratio - 1.0).abs() > config.clip_param).float().mean(),
            )
        return total


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_ppo_reports_the_per_minibatch_means(env: str) -> None:
    config = (
        PPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=4)
        .training(
            train_batch_size=256, minibatch_size=64, num_epochs=2, learner_class=_EagerPPOLearner
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            results = algo.train()["learners"]["default_policy"]
            for key in ("mean_kl_loss", "entropy", "vf_explained_var", "clip_fraction"):
                assert results[key] == results[f"eager_{key}"], key
    finally:
        algo.stop()
