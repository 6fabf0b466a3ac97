"""Learners on a CUDA GPU (`learners(num_gpus_per_learner=1)`, rlmod/core/devices.py) and
mixed precision there (rlmod/core/mixed_precision.py). Skipped without CUDA: CI has no GPU
(tests/core/test_learner_device.py checks the same placement on torch's meta device, and
tests/core/test_mixed_precision.py bfloat16 and loss scaling on the CPU).

On a GPU: PPO trains with its modules, optimizer states and batches on the GPU while the
EnvRunner's module stays on the CPU and takes numpy weights; one update from the same
weights and batch equals the CPU Learner's within float tolerance; float16 (with loss
scaling) and bfloat16 train with finite losses close to float32's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import SingleAgentEnvRunner

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = torch.device("cuda", 0)


def config(**learners) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .training(train_batch_size=256, minibatch_size=64, num_epochs=2, grad_clip=0.5)
        .learners(**learners)
        .debugging(seed=0)
    )


def test_ppo_trains_on_the_gpu_and_samples_on_the_cpu():
    algo = config(num_gpus_per_learner=1).build_algo()
    try:
        for _ in range(3):
            result = algo.train()
        learner = algo.learner_group.learner
        assert learner.device == CUDA
        assert all(p.device.type == "cuda" for p in learner.module.parameters())
        opt = learner._optimizers["default_policy"]
        assert all(t.device.type == "cuda" for t in opt.exp_avg + opt.exp_avg_sq)
        stats = result["learners"]["default_policy"]
        assert math.isfinite(stats["total_loss"]) and stats["num_non_finite_updates"] == 0
        # The EnvRunner's module is on the CPU and holds the Learner's weights.
        runner_module = algo.env_runner.module
        held = runner_module.get_state(inference_only=True)
        trained = learner.get_weights(inference_only=True)["default_policy"]
        for k, v in trained.items():
            assert isinstance(v, np.ndarray) and held[k].device.type == "cpu"
            np.testing.assert_array_equal(held[k].numpy(), v)
    finally:
        algo.stop()


def _update(cfg: PPOConfig, sample, spec, weights=None):
    learner = cfg.learner_class(config=cfg, module_spec=spec)
    learner.build()
    if weights is not None:
        learner.module.load_state_dict(weights)
    initial = {k: v.detach().cpu().clone() for k, v in learner.module.state_dict().items()}
    results = learner.update(sample)
    after = {k: v.detach().cpu() for k, v in learner.module.state_dict().items()}
    return initial, results["default_policy"], after


def _sample_and_spec():
    runner = SingleAgentEnvRunner(config=config())
    sample = runner.sample(num_timesteps=256)
    spec = config().get_multi_rl_module_spec(spaces=runner.get_spaces())
    runner.stop()
    return sample, spec


def test_one_gpu_update_equals_the_cpu_learners():
    sample, spec = _sample_and_spec()
    initial, cpu, cpu_after = _update(config(), sample, spec)
    _, gpu, gpu_after = _update(config(num_gpus_per_learner=1), sample, spec, initial)
    for key in ("total_loss", "policy_loss", "vf_loss", "entropy", "mean_kl_loss"):
        assert gpu[key] == pytest.approx(cpu[key], rel=1e-4, abs=1e-5), key
    for k, v in cpu_after.items():
        torch.testing.assert_close(gpu_after[k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mixed_precision_on_the_gpu_is_finite_and_close_to_float32(dtype):
    sample, spec = _sample_and_spec()
    initial, full, _ = _update(config(num_gpus_per_learner=1), sample, spec)
    _, mixed, _ = _update(
        config(num_gpus_per_learner=1, mixed_precision=dtype), sample, spec, initial
    )
    assert all(math.isfinite(v) for v in mixed.values())
    assert mixed["num_non_finite_updates"] == 0
    assert mixed["total_loss"] != full["total_loss"]  # autocast did run
    assert mixed["total_loss"] == pytest.approx(full["total_loss"], rel=2e-2)
    assert mixed["policy_loss"] == pytest.approx(full["policy_loss"], abs=1e-2)


def test_float16_training_through_build_algo_keeps_a_loss_scale():
    algo = config(num_gpus_per_learner=1, mixed_precision="float16").build_algo()
    try:
        for _ in range(3):
            stats = algo.train()["learners"]["default_policy"]
        assert math.isfinite(stats["total_loss"])
        scale = algo.learner_group.learner.precision.loss_scale
        assert scale is not None and 0 < scale.scale.item() <= 2.0**16
    finally:
        algo.stop()
