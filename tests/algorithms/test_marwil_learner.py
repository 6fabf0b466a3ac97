"""MARWILLearner's loss (rlmod.algorithms.marwil.marwil_learner) against a hand computation
on four rows: behaviour cloning (beta=0) is the negative log-likelihood alone; with beta > 0
the advantage weights exp(beta * A / c) use the running c^2, updated once per loss call
(Wang et al. 2018, eq. 5), plus the value loss; c^2 is part of the Learner's state; and
BootstrapTruncatedReturns adds gamma^(T-t) * V(s_T) to truncated rows' targets only.

MARWIL and BC learning from recorded data are tested in tests/algorithms/test_marwil.py and
tests/offline/test_marwil_bootstrap.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.marwil.marwil_learner import BootstrapTruncatedReturns, MARWILLearner
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.offline.returns import BOOTSTRAP_DISCOUNT, BOOTSTRAP_OBS

MID = DEFAULT_MODULE_ID
BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _learner(**training: object) -> tuple[MARWILLearner, object]:
    torch.manual_seed(0)
    config = MARWILConfig().training(**training).rl_module(model_config={"fcnet_hiddens": [8]})
    spec = config.get_multi_rl_module_spec(spaces={MID: (BOX, gym.spaces.Discrete(3))})
    learner = MARWILLearner(config=config, module_spec=spec)
    learner.build()
    return learner, config.get_config_for_module(MID)


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return {
        Columns.OBS: torch.randn(4, 3, generator=gen),
        Columns.ACTIONS: torch.tensor([2, 0, 1, 1]),
        Columns.VALUE_TARGETS: torch.tensor([1.0, -2.0, 0.5, 3.0]),
    }


def _loss(learner: MARWILLearner, config: object, batch) -> torch.Tensor:
    fwd = learner.module[MID].forward_train(batch)
    return learner.compute_loss_for_module(module_id=MID, config=config, batch=batch, fwd_out=fwd)


def _logp_and_values(learner: MARWILLearner, batch) -> tuple[torch.Tensor, torch.Tensor]:
    module = learner.module[MID]
    with torch.no_grad():
        fwd = module.forward_train(batch)
        logp = torch.log_softmax(fwd[Columns.ACTION_DIST_INPUTS], -1)[
            torch.arange(4), batch[Columns.ACTIONS]
        ]
        values = module.compute_values(batch, embeddings=fwd.get(Columns.EMBEDDINGS))
    return logp, values


def test_behaviour_cloning_is_the_negative_log_likelihood():
    learner, config = _learner(beta=0.0)
    batch = _batch()
    logp, _ = _logp_and_values(learner, batch)
    torch.testing.assert_close(_loss(learner, config, batch), -logp.mean())


def test_advantage_weights_use_the_running_norm_updated_per_call():
    learner, config = _learner(
        beta=0.7,
        vf_coeff=0.3,
        moving_average_sqd_adv_norm_start=4.0,
        moving_average_sqd_adv_norm_update_rate=0.1,
    )
    batch = _batch()
    c2 = 4.0
    for _ in range(2):  # the second call starts from the first call's c^2
        logp, values = _logp_and_values(learner, batch)
        adv = batch[Columns.VALUE_TARGETS] - values
        c2 = c2 + 0.1 * (float((adv**2).mean()) - c2)
        weights = torch.exp(0.7 * adv / (1e-8 + c2**0.5))
        vf_loss = 0.5 * ((values - batch[Columns.VALUE_TARGETS]) ** 2).mean()
        want = -(weights * logp).mean() + 0.3 * vf_loss
        torch.testing.assert_close(_loss(learner, config, batch), want)
        assert learner.moving_avg_sqd_adv_norms[MID] == pytest.approx(c2)
    assert learner.get_state()["moving_avg_sqd_adv_norms"] == {MID: pytest.approx(c2)}


def test_the_weights_carry_no_gradient_into_the_value_function():
    """The advantage is R - V(s) with V detached: the policy term moves the policy only,
    so with vf_coeff=0 the value head gets no gradient."""
    learner, config = _learner(beta=1.0, vf_coeff=0.0)
    learner.module[MID].zero_grad()
    _loss(learner, config, _batch()).backward()
    vf_grads = [p.grad for n, p in learner.module[MID].named_parameters() if n.startswith("vf")]
    assert vf_grads and all(g is None or not g.any() for g in vf_grads)


def test_truncated_rows_get_the_discounted_value_of_the_next_observation():
    learner, _ = _learner(beta=1.0)
    module = learner.module[MID]
    final = torch.randn(4, 3, generator=torch.Generator().manual_seed(3))
    cols = {
        Columns.VALUE_TARGETS: torch.tensor([1.0, 2.0, 3.0, 4.0]),
        BOOTSTRAP_DISCOUNT: torch.tensor([0.0, 0.25, 0.5, 0.0]),
        BOOTSTRAP_OBS: final,
    }
    out = BootstrapTruncatedReturns()({MID: cols}, rl_module=learner.module)[MID]
    with torch.no_grad():
        v = module.compute_values({Columns.OBS: final})
    want = torch.tensor([1.0, 2.0, 3.0, 4.0]) + torch.tensor([0.0, 0.25, 0.5, 0.0]) * v
    torch.testing.assert_close(out[Columns.VALUE_TARGETS], want)
    assert set(out) == {Columns.VALUE_TARGETS}  # both bootstrap columns dropped


def test_batches_without_bootstrap_columns_pass_unchanged():
    learner, _ = _learner(beta=1.0)
    targets = torch.tensor([1.0, 2.0])
    out = BootstrapTruncatedReturns()(
        {MID: {Columns.VALUE_TARGETS: targets}}, rl_module=learner.module
    )
    assert out[MID][Columns.VALUE_TARGETS] is targets
    nothing_truncated = {
        Columns.VALUE_TARGETS: targets,
        BOOTSTRAP_DISCOUNT: torch.zeros(2),
        BOOTSTRAP_OBS: torch.zeros(2, 3),
    }
    out = BootstrapTruncatedReturns()({MID: nothing_truncated}, rl_module=learner.module)
    assert out[MID][Columns.VALUE_TARGETS] is targets
