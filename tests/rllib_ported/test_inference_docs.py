"""Item 5 of issue 33: computing actions from a trained module as RLlib's inference docs
do (`RLModule.from_checkpoint(...)`, `forward_inference`, `get_inference_action_dist_cls()
.from_logits(...)`, `to_deterministic()`, `sample()`, `logp()`), and a custom distribution
class returned from `get_train_action_dist_cls` as in RLlib's custom-distribution example,
with only the imports changed."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule, PPOConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.core import DEFAULT_MODULE_ID, RLModule
from rlmod.core.distributions import Categorical, DiagGaussian, TanhGaussian


def test_inference_docs_example(tmp_path: Path) -> None:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=256, minibatch_size=128, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [16]})
    )
    algo = config.build_algo()
    algo.train()
    checkpoint_path = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()

    rl_module = RLModule.from_checkpoint(
        Path(checkpoint_path) / "learner_group" / "learner" / "rl_module" / DEFAULT_MODULE_ID
    )
    env = gym.make("CartPole-v1")
    obs, info = env.reset(seed=0)
    obs_batch = torch.from_numpy(obs).unsqueeze(0)
    model_outputs = rl_module.forward_inference({"obs": obs_batch})
    action_dist_params = model_outputs["action_dist_inputs"][0].numpy()
    greedy_action = np.argmax(action_dist_params)

    action_dist_class = rl_module.get_inference_action_dist_cls()
    action_dist = action_dist_class.from_logits(model_outputs["action_dist_inputs"])
    action = action_dist.sample()[0].numpy()
    assert env.action_space.contains(int(action))
    assert action_dist.to_deterministic().sample()[0].item() == greedy_action
    assert action_dist.to_deterministic().logp(torch.tensor([1])).tolist() == [0.0]
    logp = action_dist.logp(torch.tensor([int(action)]))
    assert torch.allclose(
        logp.exp(), torch.softmax(model_outputs["action_dist_inputs"], -1)[0, int(action)]
    )
    for get in ("inference", "exploration", "train"):
        assert getattr(rl_module, f"get_{get}_action_dist_cls")() is Categorical


def test_box_and_sac_modules_hand_out_their_distribution_classes() -> None:
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    ppo = DefaultPPORLModule(
        observation_space=box, action_space=box, model_config={"fcnet_hiddens": [8]}
    )
    assert ppo.get_inference_action_dist_cls() is DiagGaussian
    mean = ppo.get_inference_action_dist_cls().from_logits(torch.zeros(1, 4)).to_deterministic()
    assert mean.sample().tolist() == [[0.0, 0.0]]
    spec = (
        SACConfig()
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .get_rl_module_spec(spaces={DEFAULT_MODULE_ID: (box, box)})
    )
    sac = spec.build()
    dist = sac.get_exploration_action_dist_cls().from_logits(torch.zeros(3, 4))
    assert isinstance(dist, TanhGaussian) and dist.sample().abs().max() < 1.0


class TemperatureCategorical(Categorical):
    """A custom distribution as in RLlib's custom-action-distribution example."""

    temperature = 0.5

    @classmethod
    def from_logits(cls, logits, **kwargs):  # type: ignore[no-untyped-def]
        return cls(logits / cls.temperature)


class LowTemperatureModule(DefaultPPORLModule):
    def get_train_action_dist_cls(self):  # type: ignore[no-untyped-def]
        return TemperatureCategorical

    def get_exploration_action_dist_cls(self):  # type: ignore[no-untyped-def]
        return TemperatureCategorical

    def get_inference_action_dist_cls(self):  # type: ignore[no-untyped-def]
        return TemperatureCategorical


def test_a_custom_distribution_class_is_what_runners_and_losses_use() -> None:
    from rlmod.core import RLModuleSpec

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=LowTemperatureModule))
    )
    algo = config.build_algo()
    try:
        algo.train()
        module = algo.get_module()
        dist = module.action_dist(torch.tensor([[0.0, 1.0]]))
        assert isinstance(dist, TemperatureCategorical)
        assert torch.allclose(dist.inputs, torch.tensor([[0.0, 2.0]]))
        assert isinstance(
            algo.env_runner.module.action_dist(torch.zeros(1, 2)),
            TemperatureCategorical,
        )
    finally:
        algo.stop()
