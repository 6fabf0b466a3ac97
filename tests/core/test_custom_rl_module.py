"""Custom RLModules written the RLlib way: TorchRLModule + ValueFunctionAPI, the forward
dispatch, model_config as a free dict, and PPO training a module that never writes
vf_preds (rewritten from RLlib's rl-modules docs and its VPG example module)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import Columns, RLModule, RLModuleSpec, TorchRLModule, ValueFunctionAPI
from rlmod.core.rl_module import acting_forward

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
TWO = gym.spaces.Discrete(2)


class ActorCritic(TorchRLModule, ValueFunctionAPI):
    """A shared-encoder actor-critic as RLlib's docs write one: layers from
    `self.model_config`, one `_forward`, values through `compute_values`."""

    def setup(self) -> None:
        super().setup()
        hidden = self.model_config["hidden_dim"]
        self._encoder = nn.Sequential(nn.Linear(self.observation_space.shape[0], hidden), nn.Tanh())
        self._pi = nn.Linear(hidden, self.action_space.n)
        self._vf = nn.Linear(hidden, 1)

    def _forward(self, batch, **kwargs):
        embeddings = self._encoder(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._pi(embeddings), Columns.EMBEDDINGS: embeddings}

    def compute_values(self, batch, embeddings=None):
        if embeddings is None:
            embeddings = self._encoder(batch[Columns.OBS])
        return self._vf(embeddings).squeeze(-1)


def custom_ppo_config(**training):
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=ActorCritic, model_config={"hidden_dim": 64})
        )
        .env_runners(num_envs_per_env_runner=8)
        .training(**training)
        .debugging(seed=0)
    )


def test_model_config_reaches_the_module_as_the_free_dict_the_user_wrote():
    module = RLModuleSpec(
        module_class=ActorCritic,
        observation_space=BOX4,
        action_space=TWO,
        model_config={"hidden_dim": 7, "anything": [1, 2]},
    ).build()
    assert module.model_config == {"hidden_dim": 7, "anything": [1, 2]}
    assert module._pi.in_features == 7


def test_ppo_trains_a_custom_module_that_never_writes_vf_preds():
    algo = custom_ppo_config(train_batch_size=512, minibatch_size=128, num_epochs=2).build_algo()
    module = algo.learner_group.learner.module["default_policy"]
    before = {k: v.clone() for k, v in module.state_dict().items()}
    for _ in range(2):
        result = algo.train()
    learner = result["learners"]["default_policy"]
    assert np.isfinite(learner["vf_loss"]) and learner["vf_loss"] > 0
    assert all(
        not torch.equal(before[k], v) for k, v in module.state_dict().items() if k.startswith("_vf")
    ), "the value head was trained through compute_values"
    # The EnvRunner acts with the Learner's weights.
    runner = algo.get_module()
    assert isinstance(runner, ActorCritic) and runner.inference_only
    assert torch.equal(runner._pi.weight, module._pi.weight)
    algo.stop()


def test_loss_passes_forward_train_embeddings_to_compute_values(monkeypatch):
    algo = custom_ppo_config(train_batch_size=256, minibatch_size=256, num_epochs=1).build_algo()
    seen = []
    original = ActorCritic.compute_values

    def spy(self, batch, embeddings=None):
        seen.append(embeddings is not None and embeddings.requires_grad)
        return original(self, batch, embeddings)

    monkeypatch.setattr(ActorCritic, "compute_values", spy)
    algo.train()
    # GAE asks without embeddings (no gradient); the loss passes forward_train's.
    assert seen.count(True) == 1 and seen[0] is False
    algo.stop()


def test_a_module_without_value_function_is_refused_by_ppo_with_the_fix():
    class PolicyOnly(TorchRLModule):
        def setup(self):
            self.pi = nn.Linear(4, 2)

        def _forward(self, batch, **kwargs):
            return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .rl_module(rl_module_spec=RLModuleSpec(module_class=PolicyOnly))
    )
    with pytest.raises(TypeError, match=r"ValueFunctionAPI.*compute_values"):
        config.build_algo()


# ---------------------------------------------------------------------- forward dispatch
class Generic(RLModule):
    def setup(self):
        self.pi = nn.Linear(4, 2)

    def _forward(self, batch, **kwargs):
        return {"which": "generic"}


class SplitForwards(Generic):
    def _forward_inference(self, batch, **kwargs):
        return {"which": "inference"}

    def _forward_train(self, batch, **kwargs):
        return {"which": "train"}


class HandWritten(Generic):
    def forward_exploration(self, batch, **kwargs):
        return {"which": "hand-written"}


class BelowHandWritten(HandWritten):
    def _forward(self, batch, **kwargs):
        return {"which": "generic-below"}


def build(cls, **kw):
    return cls(observation_space=BOX4, action_space=TWO, **kw)


def test_public_forwards_dispatch_to_the_specific_forward_else_to_forward():
    m = build(SplitForwards)
    batch = {Columns.OBS: torch.zeros(1, 4)}
    assert m.forward_inference(batch) == {"which": "inference"}
    assert m.forward_exploration(batch) == {"which": "generic"}
    assert m.forward_train(batch) == {"which": "train"}
    assert build(Generic).forward_train(batch) == {"which": "generic"}


def test_dispatch_is_decided_once_per_class_not_per_call():
    # What EnvRunners call IS the method doing the work: no extra frame per step.
    m, split = build(Generic), build(SplitForwards)
    assert acting_forward(m, explore=False).__func__ is Generic._forward
    assert acting_forward(m, explore=True).__func__ is Generic._forward
    assert SplitForwards.forward_inference is SplitForwards._forward_inference
    assert acting_forward(split, explore=False).__func__ is SplitForwards._forward_inference


def test_generic_acting_forwards_run_without_grad_as_rllib():
    """RLlib's TorchRLModule runs `_forward` under no_grad for inference/exploration, so
    its docs call `.numpy()` on the outputs; rlmod's public forwards do the same."""

    class Linear(RLModule):
        def setup(self):
            self.net = torch.nn.Linear(4, 2)

        def _forward(self, batch, **kwargs):
            return {Columns.ACTION_DIST_INPUTS: self.net(batch[Columns.OBS])}

    m = build(Linear)
    batch = {Columns.OBS: torch.zeros(1, 4)}
    assert not m.forward_inference(batch)[Columns.ACTION_DIST_INPUTS].requires_grad
    assert not m.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS].requires_grad
    assert m.forward_train(batch)[Columns.ACTION_DIST_INPUTS].requires_grad


def test_a_public_forward_written_by_hand_is_kept_in_subclasses():
    batch = {Columns.OBS: torch.zeros(1, 4)}
    assert build(BelowHandWritten).forward_exploration(batch) == {"which": "hand-written"}
    assert build(BelowHandWritten).forward_inference(batch) == {"which": "generic-below"}


def test_forward_train_on_an_inference_only_module_is_refused_as_in_rllib():
    with pytest.raises(RuntimeError, match="inference-only"):
        build(Generic, inference_only=True).forward_train({Columns.OBS: torch.zeros(1, 4)})


@pytest.mark.slow
def test_ppo_with_a_custom_module_learns_cartpole():
    # rlmod.tuned.FAST_PPO's loss settings (PPOConfig's defaults are RLlib's, slower here).
    algo = custom_ppo_config(
        train_batch_size=2000,
        minibatch_size=250,
        num_epochs=6,
        lr=1e-3,
        lambda_=0.95,
        clip_param=0.2,
        vf_clip_param=None,
        vf_loss_coeff=0.5,
        use_kl_loss=False,
        grad_clip=0.5,
    ).build_algo()
    best = 0.0
    for _ in range(40):
        best = max(best, algo.train()["env_runners"]["episode_return_mean"])
        if best > 150:
            break
    algo.stop()
    assert best > 100, f"random play scores ~22; got {best}"
