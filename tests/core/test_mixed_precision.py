"""Mixed precision on Learners (rlmod/core/mixed_precision.py, `learners(mixed_precision=...)`),
checked on the CPU: bfloat16 autocast trains PPO with finite losses close to float32's,
alone and in a stacked group; float16's loss scaling (a CUDA feature) is checked through
its own class on CPU tensors; bad values are clear errors. The CUDA runs are in
tests/core/test_gpu_learner.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.mixed_precision import LossScale, MixedPrecision
from rlmod.core.optim import Adam
from rlmod.core.train_alone import TrainAlone
from rlmod.core.update_guard import NonFiniteGuard
from rlmod.env import MultiAgentEnvRunner, SingleAgentEnvRunner
from rlmod.testing import MultiAgentCartPole

CPU = torch.device("cpu")


def config(mixed_precision: str | None = None) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .rl_module(model_config={"fcnet_hiddens": [32, 32]})
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1, grad_clip=0.5)
        .learners(mixed_precision=mixed_precision)
        .debugging(seed=0)
    )


def one_update(cfg: PPOConfig, sample, spec, weights=None):
    """A Learner of `cfg` (with `weights`, else its own initial ones), its initial weights
    and the results of one update on `sample`."""
    learner = cfg.learner_class(config=cfg, module_spec=spec)
    learner.build()
    if weights is not None:
        learner.module.load_state_dict(weights)
    initial = {k: v.clone() for k, v in learner.module.state_dict().items()}
    return learner, initial, learner.update(sample)


def test_bfloat16_autocast_gives_finite_losses_close_to_float32():
    """The same weights and batch, one update each: bfloat16 really runs (the numbers
    differ from float32's) and stays close to them; weights stay float32."""
    runner = SingleAgentEnvRunner(config=config())
    sample = runner.sample(num_timesteps=128)
    spec = config().get_multi_rl_module_spec(spaces=runner.get_spaces())
    runner.stop()
    _, initial, full_results = one_update(config(), sample, spec)
    mixed, _, mixed_results = one_update(config("bfloat16"), sample, spec, initial)
    f32, bf16 = full_results["default_policy"], mixed_results["default_policy"]
    assert all(math.isfinite(v) for v in bf16.values())
    assert bf16["num_non_finite_updates"] == 0
    assert bf16["total_loss"] != f32["total_loss"]  # autocast did run in bfloat16
    for key in ("total_loss", "vf_loss"):
        assert bf16[key] == pytest.approx(f32[key], rel=2e-2)
    assert bf16["policy_loss"] == pytest.approx(f32["policy_loss"], abs=1e-2)
    assert bf16["entropy"] == pytest.approx(f32["entropy"], abs=1e-2)
    assert all(p.dtype == torch.float32 for p in mixed.module.parameters())
    opt = mixed._optimizers["default_policy"]
    assert all(t.dtype == torch.float32 for t in opt.exp_avg + opt.exp_avg_sq)


def test_ppo_trains_with_bfloat16_through_build_algo():
    algo = config("bfloat16").build_algo()
    try:
        for _ in range(2):
            learner = algo.train()["learners"]["default_policy"]
        assert math.isfinite(learner["total_loss"]) and learner["num_non_finite_updates"] == 0
    finally:
        algo.stop()


@pytest.mark.fast_path
def test_a_stacked_group_trains_under_bfloat16():
    """The stacked path's own autograd functions (rlmod/core/stacked_train.py) under
    autocast: finite losses, float32 weights and gradients."""
    cfg = (
        config("bfloat16")
        .environment(MultiAgentCartPole, env_config={"num_agents": 3})
        .multi_agent(policies={"p0", "p1", "p2"}, policy_mapping_fn=lambda aid, ep, **kw: f"p{aid}")
    )
    runner = MultiAgentEnvRunner(config=cfg)
    sample = runner.sample(num_timesteps=128)
    spec = cfg.get_multi_rl_module_spec(spaces=runner.get_spaces())
    runner.stop()
    learner, initial, results = one_update(cfg, sample, spec)
    assert len(learner.stacked.stacks) == 1 and len(learner.stacked.stacks[0].group) == 3
    _, _, f32 = one_update(cfg.copy().learners(mixed_precision=None), sample, spec, initial)
    for mid in ("p0", "p1", "p2"):
        assert math.isfinite(results[mid]["total_loss"])
        assert results[mid]["num_non_finite_updates"] == 0
        assert results[mid]["total_loss"] != f32[mid]["total_loss"]
        assert results[mid]["total_loss"] == pytest.approx(f32[mid]["total_loss"], rel=2e-2)
    assert all(p.dtype == torch.float32 for p in learner.module.parameters())


def test_bad_values_are_clear_errors():
    with pytest.raises(ValueError, match=r"mixed_precision='fp16' is invalid: must be one of"):
        config("fp16")
    with pytest.raises(
        ValueError,
        match=r"mixed_precision='float16' needs a Learner on a CUDA GPU, but this one is on "
        r"cpu.*mixed_precision='bfloat16'\) on the CPU",
    ):
        config("float16").build_algo()


def tiny_unit() -> tuple[torch.nn.Linear, TrainAlone]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    cfg = config()
    return layer, TrainAlone("m", Adam(layer.parameters(), lr=1e-2), cfg)


def test_loss_scaling_unscales_gradients_to_the_plain_backwards():
    """float16's loss scaling: the scaled backward, unscaled, gives the plain gradients."""
    x = torch.randn(4, 3)
    layer, unit = tiny_unit()
    layer(x).square().mean().backward()
    plain = [p.grad.clone() for p in layer.parameters()]
    unit.optimizer.zero_grad(set_to_none=True)
    scale = LossScale(CPU)
    scale.backward(layer(x).square().mean())
    assert not torch.allclose(unit.grads()[0], plain[0])  # scaled by 2**16
    assert scale.unscale(unit.grads())
    for got, want in zip(unit.grads(), plain, strict=True):
        torch.testing.assert_close(got, want)


def test_an_overflow_skips_the_step_uncounted_and_backs_the_scale_off():
    """An overflowed unit does not step, is not counted by the non-finite guard (it would
    raise after 3 in a row), and the next minibatch's scale is half; growth_interval
    minibatches without overflow double it."""
    x = torch.randn(4, 3)
    layer, unit = tiny_unit()
    precision = MixedPrecision(None, CPU)
    precision.loss_scale = LossScale(CPU, init_scale=3e38)  # float16's path, on CPU tensors
    guard = NonFiniteGuard(3)
    guard.start_update(["m"])
    before = [p.detach().clone() for p in layer.parameters()]
    for _ in range(4):  # more overflows in a row than the guard allows NaN minibatches
        unit.optimizer.zero_grad(set_to_none=True)
        loss = layer(x).square().mean() * 1e3
        precision.backward(loss)
        stepped = precision.check(guard, unit, loss.detach().reshape(1))
        assert not stepped[0]
        unit.stepper.step(stepped)
    assert guard.counts == {"m": 0}
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True))
    assert precision.loss_scale.scale.item() == pytest.approx(3e38 / 8)  # 3 backoffs so far
    precision.loss_scale = LossScale(CPU, init_scale=4.0)
    precision.loss_scale.growth_interval = 2
    for _ in range(3):
        unit.optimizer.zero_grad(set_to_none=True)
        loss = layer(x).square().mean()
        precision.backward(loss)
        stepped = precision.check(guard, unit, loss.detach().reshape(1))
        assert stepped[0]
        unit.stepper.step(stepped)
    assert precision.loss_scale.scale.item() == 8.0  # doubled after 2 clean minibatches
    assert not all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True))


def test_a_nan_loss_still_goes_to_the_guard_with_loss_scaling():
    layer, unit = tiny_unit()
    precision = MixedPrecision(None, CPU)
    precision.loss_scale = LossScale(CPU)
    guard = NonFiniteGuard(3)
    guard.start_update(["m"])
    loss = layer(torch.full((2, 3), float("nan"))).mean()
    precision.backward(loss)
    stepped = precision.check(guard, unit, loss.detach().reshape(1))
    assert not stepped[0] and guard.counts == {"m": 1}
    assert np.array_equal(stepped, [False])


@pytest.mark.parametrize("algo", ["DQN", "SAC"])
def test_off_policy_losses_train_under_bfloat16(algo):
    """DQN's and SAC's losses (target networks, twin Q, the alpha loss) under autocast."""
    from rlmod.algorithms.dqn import DQNConfig
    from rlmod.algorithms.sac import SACConfig

    cfg = DQNConfig().environment("CartPole-v1") if algo == "DQN" else SACConfig()
    if algo == "SAC":
        cfg.environment("Pendulum-v1")
    cfg.training(num_steps_sampled_before_learning_starts=64, train_batch_size=32)
    cfg.rl_module(model_config={"fcnet_hiddens": [32, 32]}).debugging(seed=0)
    cfg.reporting(min_sample_timesteps_per_iteration=128)
    built = cfg.learners(mixed_precision="bfloat16").build_algo()
    try:
        for _ in range(3):
            stats = built.train()["learners"]["default_policy"]
    finally:
        built.stop()
    losses = {k: v for k, v in stats.items() if k.endswith("_loss")}
    assert losses and all(math.isfinite(v) for v in losses.values())
    assert stats["num_non_finite_updates"] == 0
