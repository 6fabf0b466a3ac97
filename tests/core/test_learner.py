"""Tests of Learner and LearnerGroup (rlmod/core/learner.py, learner_group.py), with PPO's.

Gradient isolation (the value loss moves only value parameters), modules that are not
trained keep their weights, learning-rate schedules, and a Learner never makes an env.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlmod.env.registry
from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import Columns, LearnerGroup

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def envless_config(**training) -> PPOConfig:
    """A PPO config with spaces but no env (offline-style)."""
    return (
        PPOConfig()
        .environment(observation_space=OBS, action_space=ACT)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=2, **training)
        .debugging(seed=0)
    )


def synthetic_episodes(n: int = 64, seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """What an EnvRunner returns: one module's columns, sequences of 16 rows."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n + 1, 4)).astype(np.float32)
    seq_ends = np.zeros(n, bool)
    seq_ends[15::16] = True
    logits = rng.normal(size=(n, 2)).astype(np.float32)
    actions = rng.integers(0, 2, n)
    logp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True)))[np.arange(n), actions]
    return {
        "default_policy": {
            Columns.OBS: obs[:-1],
            Columns.NEXT_OBS: obs[1:],
            Columns.ACTIONS: actions,
            Columns.REWARDS: rng.normal(size=n).astype(np.float32),
            Columns.TERMINATEDS: seq_ends.copy(),
            Columns.TRUNCATEDS: np.zeros(n, bool),
            Columns.SEQ_ENDS: seq_ends,
            Columns.EPS_ID: np.repeat(np.arange(n // 16), 16),
            Columns.ACTION_LOGP: logp.astype(np.float32),
            Columns.ACTION_DIST_INPUTS: logits,
        }
    }


def build_learner_group(config: PPOConfig) -> LearnerGroup:
    return LearnerGroup(config=config, module_spec=config.get_multi_rl_module_spec())


def weights(group: LearnerGroup) -> dict[str, np.ndarray]:
    return {
        k: v.copy() for k, v in group.get_weights(inference_only=False)["default_policy"].items()
    }


def is_value_param(name: str) -> bool:
    return name.startswith(("vf.", "vf_encoder."))


# ---------------------------------------------------------------------- gradient isolation
def train_batch(group: LearnerGroup) -> dict[str, torch.Tensor]:
    """A PPO train batch of the default module, after the GAE learner connector."""
    connector = group.config.build_learner_connector(OBS, ACT)
    tensors = {
        mid: {c: torch.from_numpy(v) for c, v in cols.items()}
        for mid, cols in synthetic_episodes().items()
    }
    return connector(tensors, rl_module=group.learner.module)["default_policy"]


def grads_of(module: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor | None]:
    names, params = zip(*module.named_parameters(), strict=True)
    return dict(zip(names, torch.autograd.grad(loss, params, allow_unused=True), strict=True))


def touched(grads: dict[str, torch.Tensor | None]) -> set[str]:
    return {n for n, g in grads.items() if g is not None and g.abs().sum() > 0}


def test_value_loss_moves_only_value_parameters():
    group = build_learner_group(envless_config())
    module = group.learner.module["default_policy"]
    batch = train_batch(group)
    fwd = module.forward_train(batch)
    values = module.compute_values(batch, embeddings=fwd[Columns.EMBEDDINGS])
    vf_loss = (values - batch[Columns.VALUE_TARGETS]).pow(2).mean()
    moved = touched(grads_of(module, vf_loss))
    assert moved and all(is_value_param(n) for n in moved)
    assert {n for n, _ in module.named_parameters() if is_value_param(n)} == moved


def test_ppo_loss_with_zero_advantages_and_no_entropy_leaves_the_policy_alone():
    config = envless_config(entropy_coeff=0.0, use_kl_loss=False)  # the KL term moves pi
    group = build_learner_group(config)
    module = group.learner.module["default_policy"]
    batch = train_batch(group)
    batch[Columns.ADVANTAGES] = torch.zeros_like(batch[Columns.ADVANTAGES])
    loss = group.learner.compute_loss_for_module(
        module_id="default_policy", config=config, batch=batch, fwd_out=module.forward_train(batch)
    )
    moved = touched(grads_of(module, loss))
    assert moved and all(is_value_param(n) for n in moved)


def test_ppo_policy_loss_leaves_the_value_function_alone():
    config = envless_config(vf_loss_coeff=0.0)
    group = build_learner_group(config)
    module = group.learner.module["default_policy"]
    batch = train_batch(group)
    loss = group.learner.compute_loss_for_module(
        module_id="default_policy", config=config, batch=batch, fwd_out=module.forward_train(batch)
    )
    moved = touched(grads_of(module, loss))
    assert moved and not any(is_value_param(n) for n in moved)


# ---------------------------------------------------------------------- policies_to_train
def test_update_changes_the_weights_of_a_trained_module():
    group = build_learner_group(envless_config())
    before = weights(group)
    results = group.update([synthetic_episodes()])
    after = weights(group)
    assert all(not np.array_equal(before[k], after[k]) for k in before)
    assert results["default_policy"]["num_module_steps_trained"] == 64 * 2


@pytest.mark.parametrize(
    "policies_to_train",
    [set(), lambda module_id, batch=None: False],
    ids=["empty-set", "callable-false"],
)
def test_modules_not_trained_keep_their_weights_bit_for_bit(policies_to_train):
    config = envless_config().multi_agent(policies_to_train=policies_to_train)
    group = build_learner_group(config)
    before = weights(group)
    results = group.update([synthetic_episodes()])
    after = weights(group)
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert "default_policy" not in results
    assert results["__all_modules__"]["num_module_steps_trained"] == 0


def test_algo_with_no_trainable_module_samples_but_never_updates(cartpole_config):
    algo = cartpole_config.multi_agent(policies_to_train=set()).build_algo()
    before = weights(algo.learner_group)
    result = algo.train()
    assert result["num_env_steps_sampled_lifetime"] >= 256
    after = weights(algo.learner_group)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    algo.stop()


# ---------------------------------------------------------------------- lr schedule
@pytest.mark.parametrize(
    "now, expected", [(0, 1e-3), (250, 7.5e-4), (500, 5e-4), (1000, 0.0), (5000, 0.0)]
)
def test_lr_schedule_is_applied_at_the_sampled_env_steps(now, expected):
    group = build_learner_group(envless_config(lr=[[0, 1e-3], [1000, 0]]))
    results = group.update(
        [synthetic_episodes()], timesteps={"num_env_steps_sampled_lifetime": now}
    )
    assert results["default_policy"]["default_optimizer_learning_rate"] == pytest.approx(expected)


def test_lr_schedule_at_zero_freezes_the_weights():
    group = build_learner_group(envless_config(lr=[[0, 1e-3], [1000, 0]]))
    before = weights(group)
    group.update([synthetic_episodes()], timesteps={"num_env_steps_sampled_lifetime": 2000})
    after = weights(group)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_per_module_lr_override_reaches_the_optimizer():
    config = envless_config().rl_module(
        algorithm_config_overrides_per_module={"default_policy": {"lr": 1e-2}}
    )
    results = build_learner_group(config).update([synthetic_episodes()])
    assert results["default_policy"]["default_optimizer_learning_rate"] == pytest.approx(1e-2)


# ---------------------------------------------------------------------- no env on Learners
def _no_env(*args, **kwargs):
    raise AssertionError("a Learner must never create an env")


@pytest.mark.parametrize("env", [None, "CartPole-v1"], ids=["no-env", "env-set"])
def test_learner_never_creates_an_env(monkeypatch, env):
    for target, name in (
        (gym, "make"),
        (gym, "make_vec"),
        (rlmod.env.registry, "make_env"),
        (rlmod.env.registry, "make_vector_env"),
    ):
        monkeypatch.setattr(target, name, _no_env)
    config = envless_config()
    if env is not None:
        config.environment(env)
    spec = config.get_multi_rl_module_spec(spaces={"default_policy": (OBS, ACT)} if env else None)
    group = LearnerGroup(config=config, module_spec=spec)
    results = group.update([synthetic_episodes()])
    assert np.isfinite(results["default_policy"]["total_loss"])
    assert "vf_encoder.0.weight" in group.get_weights(inference_only=False)["default_policy"]
