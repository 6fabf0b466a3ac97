"""PPO's diagnostics (rlmod/algorithms/ppo/ppo_learner.py, `compute_losses`): the means it
reports per update are those of each minibatch computed on its own, the way a reader
would write them per module."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.ppo.ppo_learner import PPOLearner
from rlmod.core.columns import Columns


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
