"""Learner device plumbing (rlmod/core/devices.py, `Learner.device`), checked on the CPU.

There is no GPU in CI. Where a second device is needed, the tests use torch's `meta`
device: like CUDA, mixing it with (non-scalar) CPU tensors raises "Tensor on device cpu
is not on the expected device meta", so a tensor the Learner makes on the wrong device
fails here as it would on a GPU. A real GPU run is a benchmark, not a test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.devices import CPU, cpu_tensors, learner_device
from rlmod.core.minibatch_stats import per_minibatch
from rlmod.env import SingleAgentEnvRunner


def config(**learners) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, grad_clip=0.5)
        .learners(**learners)
        .debugging(seed=0)
    )


def test_the_device_comes_from_num_gpus_per_learner_and_local_gpu_idx(monkeypatch):
    assert learner_device(config()) == CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert learner_device(config(num_gpus_per_learner=1)) == torch.device("cuda", 0)
    assert learner_device(config(num_gpus_per_learner=0.5, local_gpu_idx=1)) == (
        torch.device("cuda", 1)
    )
    # A remote Learner uses the GPU Ray assigned to its actor (index 0 of what it sees);
    # the driver's never-trained copy of remote Learners stays on the CPU.
    remote = config(num_learners=2, num_gpus_per_learner=1, local_gpu_idx=1)
    assert learner_device(remote, remote=True) == torch.device("cuda", 0)
    assert learner_device(remote) == CPU
    with pytest.raises(
        ValueError,
        match=r"local_gpu_idx=2 names a GPU, but only 2 are "
        r"visible.*local_gpu_idx=\.\.\.\) to one of 0\.\.1",
    ):
        learner_device(config(num_gpus_per_learner=1, local_gpu_idx=2))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_a_gpu_without_cuda_is_a_clear_error_naming_the_setting_and_the_fix():
    algo_config = config(num_gpus_per_learner=1)
    with pytest.raises(
        ValueError,
        match=r"num_gpus_per_learner=1\.0 puts the Learner on a "
        r"GPU, but torch.cuda.is_available\(\) is False in this process.*"
        r"Set \.learners\(num_gpus_per_learner=0\) to train on the CPU",
    ):
        algo_config.build_algo()
    # Remote Learners fail in their actor with the same message (there: "this remote
    # Learner's Ray actor"); the driver's copy of them stays on the CPU without error.
    with pytest.raises(ValueError, match="remote Learner's Ray actor"):
        learner_device(config(num_learners=1, num_gpus_per_learner=1), remote=True)
    assert learner_device(config(num_learners=1, num_gpus_per_learner=1)) == CPU


def test_num_gpus_per_learner_and_local_gpu_idx_are_validated_settings():
    with pytest.raises(ValueError, match="num_gpus_per_learner=-1"):
        config(num_gpus_per_learner=-1)
    with pytest.raises(TypeError, match="local_gpu_idx"):
        config(local_gpu_idx=0.5)
    assert config(num_gpus_per_learner=0.25).to_dict()["num_gpus_per_learner"] == 0.25


def meta_learner():
    """A PPO Learner built on the meta device (the stand-in for a GPU) and one sample
    turned into its train batch: the learner connector (GAE) runs on CPU copies, as a
    GPU Learner's does, and its columns are moved to the meta device."""
    cfg = config()
    runner = SingleAgentEnvRunner(config=cfg)
    sample = runner.sample(num_timesteps=64)
    spec = cfg.get_multi_rl_module_spec(spaces=runner.get_spaces())
    runner.stop()
    learner = cfg.learner_class(config=cfg, module_spec=spec)
    reference = cfg.learner_class(config=cfg, module_spec=spec)
    reference.build()
    learner.device = torch.device("meta")
    learner.build()
    batch = reference._learner_connector(reference._to_tensors(sample), rl_module=reference.module)
    return learner, sample, batch


def test_modules_optimizers_batches_and_sgd_steps_live_on_learner_device():
    learner, sample, cpu_batch = meta_learner()
    meta = torch.device("meta")
    assert all(p.device == meta for p in learner.module.parameters())
    opt = learner._optimizers["default_policy"]
    assert all(t.device == meta for t in opt.exp_avg + opt.exp_avg_sq)
    # Numpy sample results become tensors on the Learner's device.
    tensors = learner._to_tensors(sample)
    assert all(v.device == meta for v in tensors["default_policy"].values())
    # One SGD step through the real code (minibatch gather, forward_train, PPO loss,
    # gradient clipping, logging, Adam): a CPU tensor mixed in anywhere raises. The
    # finiteness guard reads a value (impossible on meta) and is off for this step.
    batch = {"default_policy": {k: v.to(meta) for k, v in cpu_batch["default_policy"].items()}}
    learner.guard.enabled = False
    num_rows = {"default_policy": 64}
    cfgs = {"default_policy": learner.config.get_config_for_module("default_policy")}
    minibatches = list(learner._minibatches(batch, num_rows, *learner._minibatch_plan(num_rows)))
    assert len(minibatches) == 2
    mb, stack_mbs = minibatches[0]
    learner._sgd_step(mb, stack_mbs, cfgs)
    assert opt.step_count == 1
    logged = learner._alone["default_policy"]._logs
    assert {"policy_loss", "vf_loss", "gradients_default_optimizer_global_norm"} <= logged.keys()
    # values and deferred diagnostics (their rows, and their reduction) alike
    assert all(per_minibatch(v).device == meta for v in logged.values())
    assert all(p.grad is None or p.grad.device == meta for p in learner.module.parameters())


def test_weights_and_state_leave_the_learner_as_cpu_data():
    learner, _, _ = meta_learner()
    cpu_learner = config().learner_class(config=config(), module_spec=learner.module_spec)
    cpu_learner.build()
    weights = cpu_learner.get_weights(inference_only=True)
    assert all(isinstance(v, np.ndarray) for w in weights.values() for v in w.values())
    # What remote Learners' get_state goes through (meta tensors have no data to copy).
    grad = torch.ones(2, requires_grad=True) * 2
    state = cpu_tensors({"a": [grad], "b": (torch.ones(1),), "c": 3})
    assert state["a"][0].device == CPU and not state["a"][0].requires_grad
    assert isinstance(state["b"], tuple) and state["c"] == 3
    # An EnvRunner takes the (CPU, numpy) weights of a Learner on another device.
    runner = SingleAgentEnvRunner(config=config())
    runner.set_state({"rl_module": weights})
    held = runner.module.get_state(inference_only=True)
    for k, v in weights["default_policy"].items():
        assert held[k].device == CPU
        np.testing.assert_array_equal(held[k].numpy(), v)
    runner.stop()


@pytest.mark.fast_path
def test_a_stacked_group_trains_on_the_learner_device():
    """The stacked path (rlmod/core/learner_stacks.py, GroupAdam): its row indices, masks,
    counts, per-module norms and Adam moments are all made on the Learner's device."""
    from rlmod.env import MultiAgentEnvRunner
    from rlmod.testing import MultiAgentCartPole

    cfg = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 3})
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(policies={"p0", "p1", "p2"}, policy_mapping_fn=lambda aid, ep, **kw: f"p{aid}")
        .rl_module(model_config={"fcnet_hiddens": [16, 16]})
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, grad_clip=0.5)
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=cfg)
    sample = runner.sample(num_timesteps=64)
    spec = cfg.get_multi_rl_module_spec(spaces=runner.get_spaces())
    runner.stop()
    reference = cfg.learner_class(config=cfg, module_spec=spec)
    reference.build()
    cpu_batch = reference._learner_connector(
        reference._to_tensors(sample), rl_module=reference.module
    )
    learner = cfg.learner_class(config=cfg, module_spec=spec)
    meta = torch.device("meta")
    learner.device = meta
    learner.build()
    assert len(learner.stacked.stacks) == 1 and len(learner.stacked.stacks[0].group) == 3
    assert all(p.device == meta for p in learner.module.parameters())
    batch = {m: {k: v.to(meta) for k, v in cols.items()} for m, cols in cpu_batch.items()}
    learner.guard.enabled = False  # it reads values (impossible on meta)
    configs = {m: cfg.get_config_for_module(m) for m in batch}
    stack = learner.stacked.stacks[0]
    num_rows = {m: next(iter(cols.values())).shape[0] for m, cols in batch.items()}
    num_steps, size = learner._minibatch_plan(num_rows)
    stack.start_update(batch, configs, size)
    mb, stack_mbs = next(iter(learner._minibatches(batch, num_rows, num_steps, size)))
    assert not mb and len(stack_mbs) == 1  # every module trains inside the group
    learner._sgd_step(mb, stack_mbs, configs)
    stack.finish_update()
    assert stack.optimizer.steps.tolist() == [1, 1, 1]
    assert all(t.device == meta for t in stack.optimizer.exp_avg + stack.optimizer.exp_avg_sq)


def test_weights_leave_the_learner_once_per_training_iteration(monkeypatch):
    """A GPU Learner's weights cross to the CPU once per sync: one `get_weights` (numpy
    arrays) per `train()`, whatever the number of EnvRunners they go to."""
    from rlmod.core.learner_group import LearnerGroup

    algo = config().env_runners(num_envs_per_env_runner=2).build_algo()
    calls: list[dict] = []
    real = LearnerGroup.get_weights

    def counted(self, *args, **kwargs):
        weights = real(self, *args, **kwargs)
        calls.append(weights)
        return weights

    monkeypatch.setattr(LearnerGroup, "get_weights", counted)
    try:
        for _ in range(3):
            algo.train()
    finally:
        algo.stop()
    assert len(calls) == 3
    assert all(isinstance(v, np.ndarray) for w in calls for m in w.values() for v in m.values())
