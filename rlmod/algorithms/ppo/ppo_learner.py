"""PPOLearner: the clipped-surrogate loss of PPO, written once for one module and for a
stacked group (`compute_losses` over `[M, B]` columns).

Used by LearnerGroup for PPO; the advantages it needs come from the GAE learner connector.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from rlmod.core.apis import find_compute_values, find_self_supervised_loss
from rlmod.core.columns import Columns
from rlmod.core.learner import Learner
from rlmod.core.loss_group import ColumnMap, LossGroup

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

    def compute_losses(
        self,
        *,
        group: LossGroup,
        configs: Sequence[Any],
        batch: ColumnMap,
        fwd_out: ColumnMap,
    ) -> torch.Tensor:
        """Each module's PPO loss `[M]` over its rows (`[M, B]` columns; M = 1 for a module
        trained alone), with its own settings (per-module overrides) as `[M]` vectors."""
        setting = partial(_setting, configs, self.device)
        clip = setting("clip_param", column=True)
        use_kl = [bool(c.use_kl_loss) for c in configs]
        # a setting that is 0 (or off) for every module leaves its term out of the graph:
        # its gradient would be exactly 0 (bit-identical weights, fewer backward kernels)
        kl_in_loss = any(use_kl)
        entropy_in_loss = any(c.entropy_coeff for c in configs)
        dist_inputs = fwd_out[Columns.ACTION_DIST_INPUTS]
        old_inputs = batch[Columns.ACTION_DIST_INPUTS]
        dist = group.action_dist(dist_inputs)
        logp = dist.logp(batch[Columns.ACTIONS])  # [M, B]
        ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])
        advantages = batch[Columns.ADVANTAGES]
        surrogate = torch.min(
            ratio * advantages, _clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
        )
        # Diagnostics the loss does not need are logged as rows (`log_rows`): for a module
        # trained alone, computed once per update for all minibatches.
        early_stop = any(c.kl_early_stop is not None for c in configs)
        if kl_in_loss or early_stop:
            with torch.set_grad_enabled(kl_in_loss and torch.is_grad_enabled()):
                mean_kl = _mean_kl(group, old_inputs, dist_inputs)
            if early_stop:
                self.stop_early(group, mean_kl, setting("kl_early_stop"))
            self.log(group, mean_kl_loss=mean_kl)
        else:
            self.log_rows(group, "mean_kl_loss", _mean_kl, old_inputs, dist_inputs)
        if entropy_in_loss:
            entropy = group.mean(dist.entropy())
            self.log(group, entropy=entropy)
        else:
            self.log_rows(group, "entropy", _mean_entropy, dist_inputs)
        # As RLlib's PPOTorchLearner: values come from the module's ValueFunctionAPI,
        # reusing forward_train's embeddings.
        vf_preds = group.compute_values(batch, fwd_out)  # [M, B]
        vf_targets = batch[Columns.VALUE_TARGETS]
        vf_loss_unclipped = (vf_preds - vf_targets).pow(2)
        vf_loss = vf_loss_unclipped
        vf_clipped = any(c.vf_clip_param is not None for c in configs)
        if vf_clipped:
            vf_loss = _clamp(vf_loss_unclipped, None, setting("vf_clip_param", column=True))
        vf_loss = group.mean(vf_loss)
        policy_loss = -group.mean(surrogate)
        total = policy_loss + setting("vf_loss_coeff") * vf_loss
        if entropy_in_loss:
            total = total - setting("entropy_coeff") * entropy
        if kl_in_loss:
            kl_coeffs = torch.tensor(
                [self.curr_kl_coeffs[m] for m in group.module_ids], device=self.device
            )
            kl_used = torch.tensor(use_kl, device=self.device)
            total = total + torch.where(kl_used, kl_coeffs * mean_kl, 0.0)
            self.log(group, use_kl, curr_kl_coeff=kl_coeffs)  # only modules using it
        self.log(
            group,
            total_loss=total,
            policy_loss=policy_loss,
            vf_loss=vf_loss,
            vf_loss_unclipped=group.mean(vf_loss_unclipped.detach()) if vf_clipped else vf_loss,
        )
        self.log_rows(group, "vf_explained_var", _explained_var, vf_targets, vf_preds)
        self.log_rows(group, "clip_fraction", partial(_clip_fraction, clip), ratio)
        return total

    def after_gradient_based_update(self, *, timesteps: Mapping[str, int]) -> None:
        """Adapts each module's KL coefficient towards `kl_target` (PPO paper, sec. 4)."""
        for mid in self.trained_module_ids:
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


def _mean_kl(group: LossGroup, old_inputs: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Each module's mean KL(old || new) over its rows, `[M]`."""
    return group.mean(group.action_dist(old_inputs).kl(group.action_dist(inputs)))


def _mean_entropy(group: LossGroup, inputs: torch.Tensor) -> torch.Tensor:
    """Each module's mean entropy over its rows, `[M]`."""
    return group.mean(group.action_dist(inputs).entropy())


def _explained_var(group: LossGroup, targets: torch.Tensor, preds: torch.Tensor) -> torch.Tensor:
    """Each module's 1 - Var(targets - preds) / Var(targets) over its rows, `[M]` (RLlib's
    `explained_variance`)."""
    return 1.0 - group.var(targets - preds) / group.var(targets).clamp_min(1e-8)


def _clip_fraction(
    clip_param: float | torch.Tensor, group: LossGroup, ratio: torch.Tensor
) -> torch.Tensor:
    """Each module's fraction of rows whose probability ratio is clipped, `[M]`."""
    return group.mean(((ratio - 1.0).abs() > clip_param).float())


def _setting(
    configs: Sequence[Any], device: torch.device, name: str, *, column: bool = False
) -> float | torch.Tensor:
    """Setting `name` of each module: a float for one module, else `[M]` (`[M, 1]` with
    `column`, to broadcast over rows); None (off) reads as inf."""
    values = [math.inf if (v := getattr(c, name)) is None else float(v) for c in configs]
    if len(values) == 1:
        return values[0]
    t = torch.tensor(values, device=device)
    return t.unsqueeze(1) if column else t


def _clamp(
    x: torch.Tensor, low: float | torch.Tensor | None, high: float | torch.Tensor
) -> torch.Tensor:
    """`x.clamp(low, high)` for bounds that are floats (one module) or tensors (a stack;
    torch's stubs type the two apart)."""
    if isinstance(high, torch.Tensor):
        assert low is None or isinstance(low, torch.Tensor)
        return x.clamp(low, high)
    assert low is None or isinstance(low, float)
    return x.clamp(low, high)
