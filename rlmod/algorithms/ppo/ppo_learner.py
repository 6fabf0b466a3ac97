"""PPOLearner: the clipped-surrogate loss of PPO, one module at a time.

Used by LearnerGroup for PPO; the advantages it needs come from the GAE learner connector.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from rlmod.core.apis import find_compute_values, find_self_supervised_loss
from rlmod.core.columns import Columns
from rlmod.core.learner import Learner

if TYPE_CHECKING:
    from rlmod.algorithms.ppo.ppo import PPOConfig


class PPOLearner(Learner):
    """PPO (Schulman et al. 2017): clipped surrogate (eq. 7), clipped value loss, entropy
    bonus and an optional adaptive KL penalty (eq. 8)."""

    config: PPOConfig

    def build(self) -> None:
        super().build()
        assert self.module is not None
        for mid in self._optimizers:
            module = self.module[mid]
            if find_compute_values(module) is None and find_self_supervised_loss(module) is None:
                raise TypeError(
                    f"PPO trains module {mid!r} ({type(module).__name__}), which has no value "
                    "function: subclass rlmod.core.ValueFunctionAPI and implement "
                    "compute_values(batch, embeddings=None) -> V(obs) of shape [B], as in RLlib.")
        self.curr_kl_coeffs = {mid: self.config.get_config_for_module(mid).kl_coeff
                               for mid in self._optimizers}

    def compute_loss_for_module(self, *, module_id: str, config: Any,
                                batch: dict[str, torch.Tensor],
                                fwd_out: dict[str, torch.Tensor]) -> torch.Tensor:
        assert self.module is not None
        module: Any = self.module[module_id]
        dist = module.action_dist(fwd_out[Columns.ACTION_DIST_INPUTS])
        logp = dist.logp(batch[Columns.ACTIONS])
        ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])  # [B]
        advantages = batch[Columns.ADVANTAGES]  # [B]
        surrogate = torch.min(
            ratio * advantages,
            ratio.clamp(1.0 - config.clip_param, 1.0 + config.clip_param) * advantages,
        )
        old_dist = module.action_dist(batch[Columns.ACTION_DIST_INPUTS])
        with torch.set_grad_enabled(config.use_kl_loss):  # else only logged: no graph
            mean_kl = old_dist.kl(dist).mean()
        entropy = dist.entropy().mean()
        # As RLlib's PPOTorchLearner: values come from the module's ValueFunctionAPI,
        # reusing forward_train's embeddings when it returned them.
        vf_preds = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
        vf_targets = batch[Columns.VALUE_TARGETS]
        vf_loss_unclipped = (vf_preds - vf_targets).pow(2)
        vf_loss = vf_loss_unclipped
        if config.vf_clip_param is not None:
            vf_loss = vf_loss.clamp(0.0, config.vf_clip_param)
        vf_loss = vf_loss.mean()
        policy_loss = -surrogate.mean()
        total = policy_loss + config.vf_loss_coeff * vf_loss - config.entropy_coeff * entropy
        if config.use_kl_loss:
            total = total + self.curr_kl_coeffs[module_id] * mean_kl
        with torch.no_grad():
            explained_var = 1.0 - (vf_targets - vf_preds).var() / vf_targets.var().clamp_min(1e-8)
            clip_fraction = ((ratio - 1.0).abs() > config.clip_param).float().mean()
        self.log(module_id, total_loss=total, policy_loss=policy_loss, vf_loss=vf_loss,
                 vf_loss_unclipped=vf_loss_unclipped.detach().mean(), entropy=entropy, mean_kl_loss=mean_kl, vf_explained_var=explained_var,
                 clip_fraction=clip_fraction)
        if config.use_kl_loss:
            self.log(module_id, curr_kl_coeff=self.curr_kl_coeffs[module_id])
        return total

    def after_gradient_based_update(self, *, timesteps: Mapping[str, int]) -> None:
        """Adapts each module's KL coefficient towards `kl_target` (PPO paper, sec. 4)."""
        for mid, logged in self._logged.items():
            config = self.config.get_config_for_module(mid)
            if not config.use_kl_loss or not logged.get("mean_kl_loss"):  # all skipped
                continue
            kl = float(torch.stack(logged["mean_kl_loss"]).mean())
            if kl > 2.0 * config.kl_target:
                self.curr_kl_coeffs[mid] *= 1.5
            elif kl < 0.5 * config.kl_target:
                self.curr_kl_coeffs[mid] *= 0.5

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components)
        if components is None:
            state["curr_kl_coeffs"] = dict(self.curr_kl_coeffs)
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self.curr_kl_coeffs.update(state.get("curr_kl_coeffs", {}))
