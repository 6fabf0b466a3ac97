"""The Learner's numerical guard: a NaN/inf loss or gradient never reaches the weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmod.errors import NonFiniteUpdateError


def _batch_with_nan_rewards(algo):
    batch = algo.env_runner_group.sample()[0]
    bad = {mid: dict(cols) for mid, cols in batch.items()}
    rewards = bad["default_policy"]["rewards"].copy()
    rewards[3] = np.nan
    bad["default_policy"]["rewards"] = rewards
    return bad


def _weights(learner):
    return {k: v.clone() for k, v in learner.module["default_policy"].state_dict().items()}


def _assert_optimizer_state_unchanged(learner, before):
    """Adam's moments bit for bit and its step count (bias correction) as before."""
    after = learner._optimizers["default_policy"].state_dict()
    assert after["step"] == before["step"]
    for key in ("exp_avg", "exp_avg_sq"):
        for a, b in zip(before[key], after[key], strict=True):
            assert torch.equal(a, b), key


def test_a_nan_loss_skips_the_update_and_keeps_weights_bit_identical(cartpole_config):
    algo = cartpole_config.learners(max_consecutive_non_finite_updates=100).build_algo()
    learner = algo.learner_group.learner
    learner.update(algo.env_runner_group.sample()[0])  # moments and step count not 0
    before = _weights(learner)
    adam_before = learner._optimizers["default_policy"].state_dict()
    assert adam_before["step"] > 0
    result = learner.update(_batch_with_nan_rewards(algo))
    after = _weights(learner)
    for name, value in before.items():
        assert torch.equal(value, after[name]), name
        assert torch.isfinite(after[name]).all()
    _assert_optimizer_state_unchanged(learner, adam_before)
    # 256 rows / 64 per minibatch, 2 epochs: every minibatch was skipped.
    assert result["default_policy"]["num_non_finite_updates"] == 8
    assert result["__all_modules__"]["num_non_finite_updates"] == 8
    assert "policy_loss" not in result["default_policy"]  # no NaN means reported
    # A finite batch afterwards trains normally.
    result = learner.update(algo.env_runner_group.sample()[0])
    assert result["default_policy"]["num_non_finite_updates"] == 0
    assert np.isfinite(result["default_policy"]["policy_loss"])
    assert any(not torch.equal(v, _weights(learner)[k]) for k, v in before.items())
    algo.stop()


def test_non_finite_updates_in_a_row_raise_naming_the_module_and_loss_terms(cartpole_config):
    algo = cartpole_config.learners(max_consecutive_non_finite_updates=2).build_algo()
    learner = algo.learner_group.learner
    before = _weights(learner)
    with pytest.raises(
        NonFiniteUpdateError,
        match=r"Module 'default_policy'.*2 minibatches "
        r"in a row \(max_consecutive_non_finite_updates=2\).*policy_loss",
    ):
        learner.update(_batch_with_nan_rewards(algo))
    for name, value in before.items():
        assert torch.equal(value, _weights(learner)[name])
    algo.stop()


def test_without_gradient_clipping_a_non_finite_gradient_is_caught_too(cartpole_config):
    algo = (
        cartpole_config.training(grad_clip=None)
        .learners(max_consecutive_non_finite_updates=100)
        .build_algo()
    )
    learner = algo.learner_group.learner
    learner.update(algo.env_runner_group.sample()[0])
    before = _weights(learner)
    adam_before = learner._optimizers["default_policy"].state_dict()
    result = learner.update(_batch_with_nan_rewards(algo))
    assert result["default_policy"]["num_non_finite_updates"] == 8
    for name, value in before.items():
        assert torch.equal(value, _weights(learner)[name])
    _assert_optimizer_state_unchanged(learner, adam_before)
    algo.stop()


def test_train_reports_num_non_finite_updates(cartpole_config):
    algo = cartpole_config.build_algo()
    result = algo.train()
    assert result["learners"]["default_policy"]["num_non_finite_updates"] == 0
    algo.stop()
