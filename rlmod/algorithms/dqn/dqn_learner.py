"""DQNLearner: the (double, n-step, prioritized) Q-learning loss, target updates, epsilon.

Used by LearnerGroup for DQN; its batches are replayed n-step transitions with importance
weights (`weights`), and it returns per-row TD errors for the priorities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from rlmod.algorithms.dqn.default_dqn_rl_module import (
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
)
from rlmod.algorithms.off_policy import OffPolicyLearner
from rlmod.core.columns import Columns
from rlmod.core.learner import NumpyBatch
from rlmod.replay import N_STEP, WEIGHTS
from rlmod.utils.schedules import scheduled_value

if TYPE_CHECKING:
    from rlmod.algorithms.dqn.dqn import DQNConfig

TD_TARGETS = "td_targets"
"""Minibatch key DQNLearner.step_minibatch adds without double Q while the target network
is fixed: the TD targets `[B]`, computed for all remaining gradient steps at once."""


def q_learning_targets(
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    n_step: torch.Tensor,
    q_target_next: torch.Tensor,
    q_online_next: torch.Tensor | None,
    *,
    gamma: float,
) -> torch.Tensor:
    """`r + gamma^n * (1 - terminated) * Q_target(s', a')`, `[B]`.

    `a' = argmax_a Q_online(s', a)` with `q_online_next` (double Q, van Hasselt et al.
    2016, eq. 4), else `argmax_a Q_target(s', a)` (Mnih et al. 2015). `rewards` are n-step
    returns already (Hessel et al. 2018, sec. 3: multi-step learning).
    """
    greedy = (q_target_next if q_online_next is None else q_online_next).argmax(-1, keepdim=True)
    q_next = q_target_next.gather(-1, greedy).squeeze(-1)
    discount = gamma ** n_step.to(q_next.dtype) * (1.0 - terminateds.to(q_next.dtype))
    return rewards + discount * q_next


class DQNLearner(OffPolicyLearner):
    """DQN with Rainbow's double Q, dueling, n-step and prioritized replay (Hessel et al. 2018).

    Per update: epsilon follows its schedule, one gradient step on the importance-weighted
    TD loss, then (OffPolicyLearner) the target network moves by `tau` when
    `target_network_update_freq` env steps passed since its last update.
    """

    config: DQNConfig

    def compute_loss_for_module(
        self,
        *,
        module_id: str,
        config: Any,
        batch: dict[str, torch.Tensor],
        fwd_out: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        q = fwd_out[QF_PREDS]  # [B, A]
        q_taken = q.gather(-1, batch[Columns.ACTIONS].long().unsqueeze(-1)).squeeze(-1)  # [B]
        targets = batch.get(TD_TARGETS)  # precomputed for this update (step_minibatch)
        if targets is None:
            with torch.no_grad():
                targets = q_learning_targets(
                    batch[Columns.REWARDS],
                    batch[Columns.TERMINATEDS],
                    batch[N_STEP],
                    fwd_out[QF_TARGET_NEXT_PREDS],
                    fwd_out[QF_NEXT_PREDS] if config.double_q else None,
                    gamma=config.gamma,
                )
        td_error = q_taken - targets
        if config.td_error_loss_fn == "huber":
            per_row = F.huber_loss(q_taken, targets, reduction="none", delta=1.0)
        else:
            per_row = 0.5 * td_error.pow(2)
        loss = (batch[WEIGHTS] * per_row).mean()  # prioritized replay's IS correction
        self.record_td_errors(module_id, td_error)
        q_sel = q_taken.detach()
        self.log(  # RLlib's DQN keys and meanings: statistics of Q(s, a) of the batch's actions
            module_id,
            qf_loss=loss,
            qf_mean=q_sel.mean(),
            qf_max=q_sel.max(),
            qf_min=q_sel.min(),
            td_error_mean=td_error.detach().mean(),
        )
        return loss

    def step_minibatch(
        self, module_id: str, cols: Mapping[str, torch.Tensor], step: int, num_steps: int
    ) -> dict[str, torch.Tensor]:
        """Block `step` of the rows; while the target network keeps its weights to the end of
        the update, with its Q(new_obs, .) for all remaining steps computed in one forward
        pass (the module computes it per step otherwise), and without double Q (whose
        argmax needs the online network of each step) the TD targets from them too."""
        mb = super().step_minibatch(module_id, cols, step, num_steps)
        assert self.module is not None
        module: Any = self.module[module_id]
        if not hasattr(module, "target_q") or not self.target_fixed_for_rest_of_update(module_id):
            return mb
        version = self.target_version(module_id)
        cached = self._target_q_next.get(module_id)
        if cached is None or cached[0] != version:
            size = next(iter(cols.values())).shape[0] // num_steps
            rest = slice(step * size, None)
            with torch.no_grad():
                q = module.target_q(cols[Columns.NEXT_OBS][rest])
                config: Any = self.config.get_config_for_module(module_id)
                targets = (
                    None
                    if config.double_q
                    else q_learning_targets(
                        cols[Columns.REWARDS][rest],
                        cols[Columns.TERMINATEDS][rest],
                        cols[N_STEP][rest],
                        q,
                        None,
                        gamma=config.gamma,
                    )
                )
            cached = self._target_q_next[module_id] = (version, step, q, targets)
        size = len(mb[Columns.NEXT_OBS])
        rows = slice((step - cached[1]) * size, (step - cached[1] + 1) * size)
        mb[QF_TARGET_NEXT_PREDS] = cached[2][rows]
        if cached[3] is not None:
            mb[TD_TARGETS] = cached[3][rows]
        return mb

    def update(
        self,
        batches: NumpyBatch | Sequence[NumpyBatch],
        *,
        timesteps: Mapping[str, int] | None = None,
        num_gradient_steps: int = 1,
    ) -> dict[str, dict[str, Any]]:
        """Sets each module's epsilon from its schedule, then `num_gradient_steps` gradient
        steps (OffPolicyLearner.update)."""
        assert self.module is not None
        self._target_q_next: dict[str, tuple[int, int, torch.Tensor, torch.Tensor | None]] = {}
        now = int((timesteps or {}).get("num_env_steps_sampled_lifetime", 0))
        q_modules = [m for m in self._optimizers if hasattr(self.module[m], "epsilon")]
        for mid in q_modules:  # (a learner-only module beside them has no epsilon)
            epsilon = scheduled_value(self.config.get_config_for_module(mid).epsilon, now)
            self.module[mid].get_buffer("epsilon").fill_(epsilon)
        results = super().update(
            batches, timesteps=timesteps, num_gradient_steps=num_gradient_steps
        )
        self._target_q_next = {}
        for mid in q_modules:
            if mid in results:
                results[mid]["epsilon"] = float(self.module[mid].get_buffer("epsilon"))
        return results
