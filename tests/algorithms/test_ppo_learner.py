"""PPOLearner's loss (rlmod.algorithms.ppo.ppo_learner) against a hand computation on a
batch of four rows: the clipped surrogate (eq. 7) with ratios inside and outside the clip
range, the clipped value loss, the entropy bonus and the KL penalty (eq. 8), each with
its own coefficient; terms whose setting is off leave the loss; a clipped row gives no
policy gradient; and the KL coefficient's adaptation towards kl_target in a real update.

PPO learning, its diagnostics and the KL early stop are tested in
tests/algorithms/test_ppo.py, test_ppo_diagnostics.py, test_ppo_kl_early_stop.py and
test_ppo_against_sb3.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig, PPOLearner
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
MID = DEFAULT_MODULE_ID


def _learner(**training: object) -> tuple[PPOLearner, PPOConfig]:
    torch.manual_seed(0)
    config = PPOConfig().training(**training).rl_module(model_config={"fcnet_hiddens": [8]})
    spec = config.get_multi_rl_module_spec(spaces={MID: (BOX, gym.spaces.Discrete(3))})
    learner = PPOLearner(config=config, module_spec=spec)
    learner.build()
    return learner, config


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {
        Columns.OBS: torch.randn(4, 3, generator=gen),
        Columns.ACTIONS: torch.tensor([0, 1, 2, 1]),
        # row 2's old logp is far below the new one: its ratio is far above 1 + clip
        Columns.ACTION_LOGP: torch.tensor([-1.0, -1.2, -4.0, -1.1]),
        Columns.ADVANTAGES: torch.tensor([1.0, -1.0, 2.0, -0.5]),
        Columns.VALUE_TARGETS: torch.tensor([0.1, 2.0, -1.0, 0.0]),
        Columns.ACTION_DIST_INPUTS: torch.tensor([[0.0, 0.0, 0.0]] * 2 + [[1.0, 0.0, -1.0]] * 2),
    }


def _by_hand(learner: PPOLearner, batch, *, clip, vf_clip, vf_coeff, ent_coeff, kl_coeff):
    module = learner.module[MID]
    with torch.no_grad():
        fwd = module.forward_train(batch)
        logits = fwd[Columns.ACTION_DIST_INPUTS]
        values = module.compute_values(batch, embeddings=fwd[Columns.EMBEDDINGS])
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all[torch.arange(4), batch[Columns.ACTIONS]]
    ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])
    adv = batch[Columns.ADVANTAGES]
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    vf = (values - batch[Columns.VALUE_TARGETS]) ** 2
    if vf_clip is not None:
        vf = vf.clamp(max=vf_clip)
    p = logp_all.exp()
    entropy = -(p * logp_all).sum(-1)
    old = torch.log_softmax(batch[Columns.ACTION_DIST_INPUTS], -1)
    kl = (old.exp() * (old - logp_all)).sum(-1)
    loss = -surrogate.mean() + vf_coeff * vf.mean() - ent_coeff * entropy.mean()
    return loss + kl_coeff * kl.mean(), ratio


def _loss(learner: PPOLearner, config: PPOConfig, batch) -> torch.Tensor:
    module = learner.module[MID]
    return learner.compute_loss_for_module(
        module_id=MID,
        config=config.get_config_for_module(MID),
        batch=batch,
        fwd_out=module.forward_train(batch),
    )


def test_the_loss_equals_the_papers_terms_by_hand():
    settings = {
        "clip_param": 0.2,
        "vf_clip_param": 0.5,
        "vf_loss_coeff": 0.7,
        "entropy_coeff": 0.01,
        "use_kl_loss": True,
        "kl_coeff": 0.3,
    }
    learner, config = _learner(**settings)
    batch = _batch()
    want, ratio = _by_hand(
        learner, batch, clip=0.2, vf_clip=0.5, vf_coeff=0.7, ent_coeff=0.01, kl_coeff=0.3
    )
    assert ratio[2] > 1.2 and (ratio[[0, 1, 3]] - 1).abs().max() < 0.2  # one clipped row
    torch.testing.assert_close(_loss(learner, config, batch), want)


def test_terms_whose_setting_is_off_leave_the_loss():
    learner, config = _learner(
        clip_param=0.3, vf_clip_param=None, entropy_coeff=0.0, use_kl_loss=False
    )
    batch = _batch()
    want, _ = _by_hand(
        learner, batch, clip=0.3, vf_clip=None, vf_coeff=1.0, ent_coeff=0.0, kl_coeff=0.0
    )
    torch.testing.assert_close(_loss(learner, config, batch), want)


def test_the_clipped_objective_gives_a_clipped_row_no_policy_gradient():
    learner, config = _learner(
        clip_param=0.2, vf_loss_coeff=0.0, entropy_coeff=0.0, use_kl_loss=False
    )
    module = learner.module[MID]
    batch = _batch()
    fwd = module.forward_train(batch)
    logits = fwd[Columns.ACTION_DIST_INPUTS]
    logits.retain_grad()
    loss = learner.compute_loss_for_module(
        module_id=MID, config=config.get_config_for_module(MID), batch=batch, fwd_out=fwd
    )
    loss.backward()
    grads = logits.grad.abs().sum(-1)
    assert grads[2] == 0  # ratio above 1 + clip with a positive advantage: flat
    assert (grads[[0, 1, 3]] > 0).all()


@pytest.mark.parametrize(("kl_target", "factor"), [(1e-9, 1.5), (1e3, 0.5)])
def test_the_kl_coefficient_moves_towards_kl_target(
    cartpole_config: PPOConfig, kl_target: float, factor: float
):
    """One real update: a measured KL above 2 * kl_target raises the coefficient by half,
    one below kl_target / 2 halves it (PPO paper, sec. 4)."""
    config = cartpole_config.training(use_kl_loss=True, kl_coeff=0.2, kl_target=kl_target)
    algo = config.build_algo()
    try:
        result = algo.train()
        kl = result["learners"][MID]["mean_kl_loss"]
        assert kl > 2 * kl_target if factor > 1 else kl < kl_target / 2
        learner = algo.learner_group.learner
        assert learner.curr_kl_coeffs[MID] == pytest.approx(0.2 * factor)
        assert learner.get_state()["curr_kl_coeffs"] == {MID: pytest.approx(0.2 * factor)}
    finally:
        algo.stop()
