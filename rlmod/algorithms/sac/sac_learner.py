"""SACLearner: SAC's critic, actor and temperature losses, for Box and Discrete actions.

Used by LearnerGroup for SAC; batches are replayed n-step transitions with importance
weights; OffPolicyLearner moves the target critics and returns the TD errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch
from torch import nn

from rlmod.algorithms.off_policy import OffPolicyLearner
from rlmod.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from rlmod.core.columns import Columns
from rlmod.core.distributions import TanhGaussian
from rlmod.replay import N_STEP, WEIGHTS

if TYPE_CHECKING:
    from rlmod.algorithms.sac.sac import SACConfig


def auto_target_entropy(action_space: gym.Space) -> float:
    """Box: `-dim(A)` (Haarnoja et al. 2018b, sec. 5); Discrete: `0.98 * log(n)`, 98% of the
    uniform policy's entropy (Christodoulou 2019, sec. 4)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return 0.98 * math.log(int(action_space.n))
    return -float(math.prod(action_space.shape or ()))


@contextmanager
def frozen(modules: Sequence[nn.Module]) -> Iterator[None]:
    """No gradients into these modules' parameters (gradients still flow through them to
    their inputs): the actor loss must not move the critics."""
    params = [p for m in modules for p in m.parameters()]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class SACLearner(OffPolicyLearner):
    """Soft Actor-Critic (Haarnoja et al. 2018a; automatic temperature: 2018b) and its
    discrete variant (Christodoulou 2019). The three losses add up to one total whose
    parts move disjoint parameters: critics, actor, temperature."""

    config: SACConfig

    def optimizer_groups(
        self, module_id: str, config: Any
    ) -> dict[str, tuple[tuple[str, ...], Any]] | None:
        """RLlib's SAC optimizers: "policy" (actor_lr), "qf" and "qf_twin" (critic_lr),
        "alpha" (alpha_lr); results say `policy_learning_rate` etc. Adam is per element,
        so one Adam with these groups steps exactly as RLlib's separate optimizers (apart
        from RLlib's eps=1e-7 for alpha; gradient clipping stays per module)."""
        assert self.module is not None
        module = self.module[module_id]
        if not isinstance(module, DefaultSACRLModule):
            # e.g. a learner-only ICM beside it: one optimizer at critic_lr (SAC's lr is
            # None), reported as default_optimizer_learning_rate
            return {"default_optimizer": (("",), config.critic_lr)}
        groups: dict[str, tuple[tuple[str, ...], Any]] = {
            "qf": (("qf.",), config.critic_lr),
            "policy": (("pi_encoder.", "pi."), config.actor_lr),
            "alpha": (("alpha.",), config.alpha_lr),
        }
        if module.twin_q:
            groups["qf_twin"] = (("qf_twin.",), config.critic_lr)
        return groups

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
        log_alpha = module.alpha.log_alpha
        alpha = log_alpha.detach().exp()
        target_entropy = (
            auto_target_entropy(module.action_space)
            if config.target_entropy == "auto"
            else float(config.target_entropy)
        )
        discount = config.gamma ** batch[N_STEP].float() * (
            1.0 - batch[Columns.TERMINATEDS].float()
        )
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        logits, next_logits = (
            fwd_out[Columns.ACTION_DIST_INPUTS],
            fwd_out["next_action_dist_inputs"],
        )
        if module.discrete:
            with torch.no_grad():  # soft state value V(s') = sum_a pi(a|s') (Q - alpha log pi)
                next_logp = torch.log_softmax(next_logits, -1)
                q_next = torch.min(
                    torch.stack(
                        [module.q_values(c, next_obs) for c in module.critics(target=True)]
                    ),
                    0,
                ).values
                v_next = (next_logp.exp() * (q_next - alpha * next_logp)).sum(-1)
            q_all = [module.q_values(c, obs) for c in module.critics()]
            actions = batch[Columns.ACTIONS].long().unsqueeze(-1)
            q_preds = [q.gather(-1, actions).squeeze(-1) for q in q_all]
            logp = torch.log_softmax(logits, -1)
            probs = logp.exp()
            q_min = torch.min(torch.stack(q_all), 0).values.detach()
            # Christodoulou 2019, eq. 12: the expectation over actions in closed form.
            actor_loss = (probs * (alpha * logp - q_min)).sum(-1).mean()
            entropy = -(probs * logp).sum(-1)
        else:
            with torch.no_grad():  # V(s') = min_i Q_target_i(s', a') - alpha log pi(a'|s')
                next_a, next_logp = TanhGaussian(next_logits).rsample_with_logp()
                q_next = torch.min(
                    torch.stack(
                        [module.q_values(c, next_obs, next_a) for c in module.critics(target=True)]
                    ),
                    0,
                ).values
                v_next = q_next - alpha * next_logp
            q_preds = [module.q_values(c, obs, batch[Columns.ACTIONS]) for c in module.critics()]
            new_a, logp_new = TanhGaussian(logits).rsample_with_logp()
            with frozen(module.critics()):
                q_new = torch.min(
                    torch.stack([module.q_values(c, obs, new_a) for c in module.critics()]), 0
                ).values
            # Haarnoja et al. 2018b, eq. 7, with the reparameterized sample (eq. 8).
            actor_loss = (alpha * logp_new - q_new).mean()
            entropy = -logp_new
        targets = batch[Columns.REWARDS] + discount * v_next  # eq. 3 (soft Bellman backup)
        # eq. 5 per critic, weighted by prioritized replay's importance weights.
        critic_loss = sum(0.5 * (batch[WEIGHTS] * (q - targets).pow(2)).mean() for q in q_preds)
        # eq. 18 (2018b): alpha grows while the entropy is below its target.
        alpha_loss = -(log_alpha * (target_entropy - entropy.detach())).mean()
        td_error = (q_preds[0] - targets).detach()
        self.record_td_errors(module_id, td_error)
        q0 = q_preds[0].detach()
        # RLlib's SAC keys: policy_loss, qf_loss (rlmod: both critics' sum), alpha_loss,
        # alpha_value, log_alpha_value, target_entropy, logps (mean log pi of the policy's
        # actions), qf_mean/max/min (first critic, on the batch's actions), td_error_mean.
        self.log(
            module_id,
            policy_loss=actor_loss,
            qf_loss=critic_loss,
            alpha_loss=alpha_loss,
            alpha_value=alpha,
            log_alpha_value=log_alpha.detach().clone(),  # logged lazily: not a view
            target_entropy=torch.tensor(target_entropy),
            logps=-entropy.detach().mean(),
            entropy=entropy.mean(),
            qf_mean=q0.mean(),
            qf_max=q0.max(),
            qf_min=q0.min(),
            td_error_mean=td_error.mean(),
        )
        assert isinstance(critic_loss, torch.Tensor)
        return critic_loss + actor_loss + alpha_loss
