"""MARWILLearner: the advantage-weighted log-likelihood of MARWIL, one module at a time.

Used by LearnerGroup for MARWIL and BC; `value_targets` (discounted returns) come from
the OfflineReader, and `BootstrapTruncatedReturns` (MARWIL's learner connector) adds the
value of the observation after a truncated episode's end to its rows' targets. Recurrent
modules (`use_lstm`) train on chunks of whole episodes (offline_sequences.py beside this
file); the Learner takes the padding out before the loss, so the loss below reads the
same rows either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rlmod.connectors.learner import LearnerConnector
from rlmod.core.apis import find_compute_values
from rlmod.core.columns import Columns
from rlmod.core.learner import Learner, TensorBatch
from rlmod.core.multi_rl_module import MultiRLModule
from rlmod.offline.returns import BOOTSTRAP_DISCOUNT, BOOTSTRAP_OBS

if TYPE_CHECKING:
    from rlmod.algorithms.marwil.marwil import MARWILConfig


class MARWILLearner(Learner):
    """MARWIL (Wang et al. 2018, eq. 5): maximize E[exp(beta * A / c) * log pi(a|s)] with
    A = R - V(s) and c^2 a moving average of A^2; V regresses R. With beta=0 it is
    behaviour cloning: the log-likelihood alone, no value loss."""

    config: MARWILConfig

    def build(self) -> None:
        super().build()
        assert self.module is not None
        for mid in self._optimizers:
            if self.config.get_config_for_module(mid).beta > 0.0 and not hasattr(
                self.module[mid], "compute_values"
            ):
                raise TypeError(
                    f"MARWIL with beta > 0 trains module {mid!r} "
                    f"({type(self.module[mid]).__name__}), which has no value function: "
                    "subclass rlmod.core.ValueFunctionAPI and implement compute_values(batch, "
                    "embeddings=None), or use beta=0 (BC)."
                )
        self.moving_avg_sqd_adv_norms = {
            mid: self.config.get_config_for_module(mid).moving_average_sqd_adv_norm_start
            for mid in self._optimizers
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
        logp = module.action_dist(fwd_out[Columns.ACTION_DIST_INPUTS]).logp(
            batch[Columns.ACTIONS]
        )  # [B]
        if config.beta == 0.0:
            policy_loss = -logp.mean()
            self.log(module_id, policy_loss=policy_loss, total_loss=policy_loss)
            return policy_loss
        # The value head reuses the encoder output where the module offers it (RLlib's
        # ValueFunctionAPI), as PPO's learner does.
        values = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))  # [B]
        returns = batch[Columns.VALUE_TARGETS]  # [B]
        advantages = returns - values.detach()
        # c^2 <- c^2 + rate * (mean(A^2) - c^2), the paper's running normalizer.
        c2 = self.moving_avg_sqd_adv_norms[module_id]
        c2 += config.moving_average_sqd_adv_norm_update_rate * (
            float(advantages.pow(2).mean()) - c2
        )
        self.moving_avg_sqd_adv_norms[module_id] = c2
        weights = torch.exp(config.beta * advantages / (1e-8 + c2**0.5))
        policy_loss = -(weights * logp).mean()
        vf_loss = 0.5 * (values - returns).pow(2).mean()
        total = policy_loss + config.vf_coeff * vf_loss
        explained_var = 1.0 - (returns - values).var() / returns.var().clamp_min(1e-8)
        # Keys as RLlib's MARWIL learner logs them (plus the weights' mean).
        self.log(
            module_id,
            policy_loss=policy_loss,
            vf_loss=vf_loss,
            total_loss=total,
            moving_avg_sqd_adv_norm=c2,
            vf_explained_variance=explained_var.detach(),
            mean_advantage_weight=weights.mean(),
        )
        return total

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components)
        if components is None:
            state["moving_avg_sqd_adv_norms"] = dict(self.moving_avg_sqd_adv_norms)
        return state

    def set_state(self, state: Any) -> None:
        super().set_state(state)
        self.moving_avg_sqd_adv_norms.update(state.get("moving_avg_sqd_adv_norms", {}))


class BootstrapTruncatedReturns(LearnerConnector):
    """`value_targets += bootstrap_discount * V(bootstrap_obs)` per module, then drops both
    columns (the OfflineReader adds them; see rlmod.offline.returns).

    A truncated episode's rows t then regress on
    `r_t + ... + gamma^(T-1-t) r_{T-1} + gamma^(T-t) V(s_T)`, a terminated one's on the
    plain discounted return: RLlib 2.60's MARWIL targets for whole episodes (its learner
    connector extends each episode by one step and runs GAE with lambda=1). V is the
    module's value function at the start of the update (no gradient), evaluated on the
    truncated episodes' rows only. Modules without a value function, and batches
    without the columns (BC), pass unchanged.
    """

    def __call__(
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        for mid, cols in batch.items():
            discount = cols.pop(BOOTSTRAP_DISCOUNT, None)
            final_obs = cols.pop(BOOTSTRAP_OBS, None)
            compute_values = find_compute_values(rl_module[mid])
            # (a recurrent module's bootstrap runs over its sequences, in
            # AddStatesFromOfflineEpisodes, which drops both columns before this piece)
            if discount is None or final_obs is None or compute_values is None:
                continue
            rows = torch.nonzero(discount).squeeze(1)
            if not len(rows):
                continue
            with torch.no_grad():
                values = compute_values({Columns.OBS: final_obs[rows]})
            targets = cols[Columns.VALUE_TARGETS].clone()
            targets[rows] += discount[rows] * values.to(targets.dtype)
            cols[Columns.VALUE_TARGETS] = targets
        return batch


def stateful_module_ids(learner: Learner) -> list[str]:
    """The IDs of `learner`'s stateful modules (`is_stateful()`, e.g. `use_lstm`), for
    `LearnerGroup.foreach_learner`: their offline rows must come as whole episodes."""
    assert learner.module is not None
    return [mid for mid, module in learner.module.items() if module.is_stateful()]
