"""PPOLearner: the clipped-surrogate loss of PPO, one module at a time.

Used by LearnerGroup for PPO; the advantages it needs come from the GAE learner connector.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from rlmod.core.apis import find_compute_values, find_self_supervised_loss
from rlmod.core.columns import Columns
from rlmod.core.learner import Learner
from rlmod.core.learner_stacks import StackBucket

if TYPE_CHECKING:
    from rlmod.algorithms.ppo.ppo import PPOConfig


class PPOLearner(Learner):
    """PPO (Schulman et al. 2017): clipped surrogate (eq. 7), clipped value loss, entropy
    bonus, an optional adaptive KL penalty (eq. 8) and an optional per-module early stop
    of the update on the KL (`kl_early_stop`, as Stable-Baselines3's `target_kl`)."""

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
                    "compute_values(batch, embeddings=None) -> V(obs) of shape [B], as in RLlib."
                )
        self.curr_kl_coeffs = {
            mid: self.config.get_config_for_module(mid).kl_coeff for mid in self._optimizers
        }

    def compute_loss_for_module(
        self,
        *,
        module_id: str,
        config: Any,
        batch: dict[str, torch.Tensor],
        fwd_out: dict[str, torch.Tensor],
    ) -> torch.Tensor:
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
        # Diagnostics the loss does not need are logged as rows (`log_rows`): computed
        # once per update for all minibatches, the same values as per minibatch.
        dist_inputs = fwd_out[Columns.ACTION_DIST_INPUTS]
        old_inputs = batch[Columns.ACTION_DIST_INPUTS]
        mean_kl: torch.Tensor | None = None
        if config.use_kl_loss:
            mean_kl = module.action_dist(old_inputs).kl(dist).mean()
        kl = mean_kl  # the minibatch's KL, computed here only where the loss or the stop needs it
        if config.kl_early_stop is not None:
            if kl is None:
                with torch.no_grad():
                    kl = module.action_dist(old_inputs).kl(dist).mean()
            self.stop_early(module_id, kl, config.kl_early_stop)
        # A 0 coefficient: the entropy term's gradient is exactly 0, so it is left out of
        # the graph (bit-identical weights, fewer backward kernels) and only logged.
        entropy = dist.entropy().mean() if config.entropy_coeff else None
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
        total = policy_loss + config.vf_loss_coeff * vf_loss
        if entropy is not None:
            total = total - config.entropy_coeff * entropy
        if mean_kl is not None:
            total = total + self.curr_kl_coeffs[module_id] * mean_kl
        self.log(
            module_id,
            total_loss=total,
            policy_loss=policy_loss,
            vf_loss=vf_loss,
            vf_loss_unclipped=vf_loss if config.vf_clip_param is None else vf_loss_unclipped.mean(),
        )
        action_dist = module.action_dist
        if entropy is None:
            self.log_rows(module_id, "entropy", partial(_mean_entropy, action_dist), dist_inputs)
        else:
            self.log(module_id, entropy=entropy)
        if kl is None:
            self.log_rows(
                module_id, "mean_kl_loss", partial(_mean_kl, action_dist), old_inputs, dist_inputs
            )
        else:
            self.log(module_id, mean_kl_loss=kl)
        self.log_rows(module_id, "vf_explained_var", _explained_var, vf_targets, vf_preds)
        self.log_rows(module_id, "clip_fraction", partial(_clip_fraction, config.clip_param), ratio)
        if mean_kl is not None:
            self.log(module_id, curr_kl_coeff=self.curr_kl_coeffs[module_id])
        return total

    def compute_losses_for_group(
        self,
        *,
        group: StackBucket,
        configs: Sequence[Any],
        batch: dict[str, torch.Tensor],
        mask: torch.Tensor,
        fwd_out: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """`compute_loss_for_module`'s math for every module of a stacked group at once:
        the same terms per row `[M, K]`, each module's means over its own rows (`mask`),
        its own coefficients (per-module overrides) as `[M]` vectors."""
        w = mask.to(torch.float32)  # [M, K]
        count = w.sum(1)  # [M]

        def mean(x: torch.Tensor) -> torch.Tensor:  # per module, over its rows: [M]
            return (x * w).sum(1) / count.clamp_min(1.0)

        def setting(name: str, default: float = math.inf) -> torch.Tensor:  # [M]
            return torch.tensor(
                [default if (v := getattr(c, name)) is None else float(v) for c in configs],
                device=self.device,
            )

        clip = setting("clip_param").unsqueeze(1)  # [M, 1]
        kl_flags = [bool(c.use_kl_loss) for c in configs]
        use_kl = torch.tensor(kl_flags, device=self.device)
        module: Any = group.modules[0]
        dist = module.action_dist(fwd_out[Columns.ACTION_DIST_INPUTS])
        logp = dist.logp(batch[Columns.ACTIONS])  # [M, K]
        ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])
        advantages = batch[Columns.ADVANTAGES]
        surrogate = torch.min(
            ratio * advantages, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
        )
        old_dist = module.action_dist(batch[Columns.ACTION_DIST_INPUTS])
        with torch.set_grad_enabled(any(kl_flags)):
            mean_kl = mean(old_dist.kl(dist))
        if any(c.kl_early_stop is not None for c in configs):
            self.stop_early_group(group, mean_kl, setting("kl_early_stop"))
        entropy = mean(dist.entropy())
        vf_preds = group.call_padded(
            "compute_values", {Columns.OBS: batch[Columns.OBS]}, fwd_out[Columns.EMBEDDINGS]
        )  # [M, K]
        vf_targets = batch[Columns.VALUE_TARGETS]
        vf_loss_unclipped = (vf_preds - vf_targets).pow(2)
        vf_loss = mean(torch.minimum(vf_loss_unclipped, setting("vf_clip_param").unsqueeze(1)))
        policy_loss = -mean(surrogate)
        kl_coeffs = torch.tensor(
            [self.curr_kl_coeffs[m] for m in group.module_ids], device=self.device
        )
        total = (
            policy_loss
            + setting("vf_loss_coeff") * vf_loss
            - setting("entropy_coeff") * entropy
            + torch.where(use_kl, kl_coeffs * mean_kl, 0.0)
        )
        with torch.no_grad():
            err = vf_targets - vf_preds
            explained_var = 1.0 - _var(err, w, count) / _var(vf_targets, w, count).clamp_min(1e-8)
            clip_fraction = mean(((ratio - 1.0).abs() > clip).float())
        self.log_group(
            group,
            total_loss=total,
            policy_loss=policy_loss,
            vf_loss=vf_loss,
            vf_loss_unclipped=mean(vf_loss_unclipped.detach()),
            entropy=entropy,
            mean_kl_loss=mean_kl,
            vf_explained_var=explained_var,
            clip_fraction=clip_fraction,
        )
        if any(kl_flags):
            self.log_group(group, valid=use_kl, curr_kl_coeff=kl_coeffs)
        return total

    def after_gradient_based_update(self, *, timesteps: Mapping[str, int]) -> None:
        """Adapts each module's KL coefficient towards `kl_target` (PPO paper, sec. 4)."""
        for mid in [*self._logged, *self._group_means]:
            config = self.config.get_config_for_module(mid)
            if not config.use_kl_loss:
                continue
            kl = self.logged_mean(mid, "mean_kl_loss")
            if kl is None:  # all skipped
                continue
            if kl > 2.0 * config.kl_target:
                self.curr_kl_coeffs[mid] *= 1.5
            elif kl < 0.5 * config.kl_target:
                self.curr_kl_coeffs[mid] *= 0.5

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components)
        if components is None:
            state["curr_kl_coeffs"] = dict(self.curr_kl_coeffs)
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self.curr_kl_coeffs.update(state.get("curr_kl_coeffs", {}))


def _mean_entropy(action_dist: Callable[[torch.Tensor], Any], inputs: torch.Tensor) -> torch.Tensor:
    """Per minibatch, the mean entropy of its rows: `[N, B, ...]` inputs -> `[N]`."""
    return action_dist(inputs).entropy().mean(1)


def _mean_kl(
    action_dist: Callable[[torch.Tensor], Any], old_inputs: torch.Tensor, inputs: torch.Tensor
) -> torch.Tensor:
    """Per minibatch, the mean KL(old || new) of its rows: `[N, B, ...]` -> `[N]`."""
    return action_dist(old_inputs).kl(action_dist(inputs)).mean(1)


def _explained_var(targets: torch.Tensor, preds: torch.Tensor) -> torch.Tensor:
    """Per minibatch, 1 - Var(targets - preds) / Var(targets) of its rows: `[N, B]` ->
    `[N]` (RLlib's `explained_variance`)."""
    return 1.0 - (targets - preds).var(1) / targets.var(1).clamp_min(1e-8)


def _clip_fraction(clip_param: float, ratio: torch.Tensor) -> torch.Tensor:
    """Per minibatch, the fraction of its rows whose probability ratio is clipped:
    `[N, B]` -> `[N]`."""
    return ((ratio - 1.0).abs() > clip_param).float().mean(1)


def _var(x: torch.Tensor, w: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Per module, the unbiased variance of its rows of `x` ([M, K], rows where `w` is 1),
    as `Tensor.var()` of those rows (NaN with one row)."""
    mean = (x * w).sum(1, keepdim=True) / count.clamp_min(1.0).unsqueeze(1)
    return ((x - mean).pow(2) * w).sum(1) / (count - 1.0)
