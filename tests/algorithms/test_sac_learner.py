"""SACLearner's losses (rlmod.algorithms.sac.sac_learner) against a hand computation on a
batch of three transitions, from the module's own critics and actor outputs: the soft
Bellman targets (n-step discount, terminated rows), the importance-weighted twin-critic
loss, the actor loss (discrete: in closed form; Box: on the same reparameterized samples),
the temperature loss and the TD errors kept for priorities; and the actor loss moving no
critic parameter.

SAC learning, the target networks and the helpers `auto_target_entropy` and `frozen` are
tested in tests/algorithms/test_sac.py.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from rlmod.algorithms.sac import SACConfig
from rlmod.algorithms.sac.sac_learner import SACLearner
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.core.distributions import TanhGaussian
from rlmod.replay import N_STEP, WEIGHTS

MID = DEFAULT_MODULE_ID
OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
G = 0.9


def _learner(action_space: gym.Space, **training: object) -> tuple[SACLearner, object]:
    torch.manual_seed(0)
    config = (
        SACConfig()
        .training(gamma=G, initial_alpha=0.5, **training)
        .rl_module(model_config={"fcnet_hiddens": [8]})
    )
    spec = config.get_multi_rl_module_spec(spaces={MID: (OBS, action_space)})
    learner = SACLearner(config=config, module_spec=spec)
    learner.build()
    return learner, config.get_config_for_module(MID)


def _batch(actions: torch.Tensor) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(4)
    return {
        Columns.OBS: torch.randn(3, 3, generator=gen),
        Columns.NEXT_OBS: torch.randn(3, 3, generator=gen),
        Columns.ACTIONS: actions,
        Columns.REWARDS: torch.tensor([1.0, -0.5, 2.0]),
        Columns.TERMINATEDS: torch.tensor([False, True, False]),
        N_STEP: torch.tensor([1, 1, 3]),
        WEIGHTS: torch.tensor([1.0, 2.0, 0.5]),
    }


def _loss(learner: SACLearner, config: object, batch) -> torch.Tensor:
    fwd = learner.module[MID].forward_train(batch)
    return learner.compute_loss_for_module(module_id=MID, config=config, batch=batch, fwd_out=fwd)


DISCOUNT = torch.tensor([G, 0.0, G**3])


def _critic_and_alpha_losses(module, batch, q_preds, v_next, entropy, target_entropy):
    targets = batch[Columns.REWARDS] + DISCOUNT * v_next
    critic = sum(0.5 * (batch[WEIGHTS] * (q - targets) ** 2).mean() for q in q_preds)
    alpha = -(module.alpha.log_alpha * (target_entropy - entropy)).mean()
    return critic, alpha, q_preds[0] - targets


def test_discrete_sac_losses_by_hand():
    learner, config = _learner(gym.spaces.Discrete(3), target_entropy=0.4)
    module = learner.module[MID]
    batch = _batch(torch.tensor([0, 2, 1]))
    alpha = 0.5
    with torch.no_grad():
        fwd = module.forward_train(batch)
        logp = torch.log_softmax(fwd[Columns.ACTION_DIST_INPUTS], -1)
        next_logp = torch.log_softmax(fwd["next_action_dist_inputs"], -1)
        q_next = torch.minimum(
            *[module.q_values(c, batch[Columns.NEXT_OBS]) for c in module.critics(target=True)]
        )
        v_next = (next_logp.exp() * (q_next - alpha * next_logp)).sum(-1)
        q_all = [module.q_values(c, batch[Columns.OBS]) for c in module.critics()]
        q_preds = [q[torch.arange(3), batch[Columns.ACTIONS]] for q in q_all]
        actor = (logp.exp() * (alpha * logp - torch.minimum(*q_all))).sum(-1).mean()
        entropy = -(logp.exp() * logp).sum(-1)
        critic, alpha_loss, td = _critic_and_alpha_losses(
            module, batch, q_preds, v_next, entropy, 0.4
        )
    assert len(q_all) == 2  # twin critics
    torch.testing.assert_close(_loss(learner, config, batch), critic + actor + alpha_loss)
    torch.testing.assert_close(learner._td_errors[MID][-1], td)


def test_box_sac_losses_by_hand_on_the_same_samples():
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    learner, config = _learner(space)  # target entropy "auto": -2
    module = learner.module[MID]
    batch = _batch(torch.tensor([[0.5, -0.5], [0.0, 0.9], [-0.3, 0.1]]))
    alpha = 0.5
    with torch.no_grad():
        fwd = module.forward_train(batch)
        torch.manual_seed(7)  # the learner draws a' ~ pi(s') first, then a ~ pi(s)
        next_a, next_logp = TanhGaussian(fwd["next_action_dist_inputs"]).rsample_with_logp()
        new_a, logp_new = TanhGaussian(fwd[Columns.ACTION_DIST_INPUTS]).rsample_with_logp()
        q_next = torch.minimum(
            *[
                module.q_values(c, batch[Columns.NEXT_OBS], next_a)
                for c in module.critics(target=True)
            ]
        )
        v_next = q_next - alpha * next_logp
        obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
        q_preds = [module.q_values(c, obs, actions) for c in module.critics()]
        q_new = torch.minimum(*[module.q_values(c, obs, new_a) for c in module.critics()])
        actor = (alpha * logp_new - q_new).mean()
        critic, alpha_loss, td = _critic_and_alpha_losses(
            module, batch, q_preds, v_next, -logp_new, -2.0
        )
    fwd = module.forward_train(batch)
    torch.manual_seed(7)
    loss = learner.compute_loss_for_module(module_id=MID, config=config, batch=batch, fwd_out=fwd)
    torch.testing.assert_close(loss, critic + actor + alpha_loss)
    torch.testing.assert_close(learner._td_errors[MID][-1], td)
    assert math.isclose(float(module.alpha.log_alpha.detach().exp()), alpha, rel_tol=1e-6)


def test_the_actor_loss_moves_no_critic_parameter():
    """With the critic term left out (importance weights 0), the actor (and the
    temperature) get gradients, the critics none, though Q(s, a~pi) is in the actor loss."""
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    learner, config = _learner(space)
    module = learner.module[MID]
    batch = _batch(torch.zeros(3, 2))
    batch[WEIGHTS] = torch.zeros(3)
    module.zero_grad()
    _loss(learner, config, batch).backward()
    critic_params = {id(p) for c in module.critics() for p in c.parameters()}
    for p in module.parameters():
        if id(p) in critic_params:
            assert p.grad is None or not p.grad.any()
    actor = [*module.pi_encoder.parameters(), *module.pi.parameters()]
    assert any(p.grad is not None and p.grad.any() for p in actor)
