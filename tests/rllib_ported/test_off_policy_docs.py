"""Item 2 of issue 33: RLlib's SAC and DQN docs (the SACConfig / DQNConfig docstrings and
DefaultDQNTorchRLModule) with only the imports changed, and the result keys RLlib's
SACTorchLearner and DQNTorchLearner log (ray 2.60.0's sac_learner.py / dqn_learner.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.core import DEFAULT_MODULE_ID, Columns


def test_sac_docstring_example_runs() -> None:
    # RLlib's SACConfig docstring; num_env_runners=0 instead of 1 (rlmod samples in
    # process without Ray) and a short warm-up so that one iteration trains.
    config = (
        SACConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .training(
            gamma=0.9,
            actor_lr=0.001,
            critic_lr=0.002,
            train_batch_size_per_learner=32,
            num_steps_sampled_before_learning_starts=32,
        )
        .rl_module(model_config={"fcnet_hiddens": [16]})
    )
    algo = config.build()
    try:
        for _ in range(40):
            result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        assert learner["policy_learning_rate"] == 0.001
        assert learner["qf_learning_rate"] == learner["qf_twin_learning_rate"] == 0.002
        assert learner["alpha_learning_rate"] == 3e-4  # RLlib's default
        assert learner["qf_min"] <= learner["qf_mean"] <= learner["qf_max"]
        assert learner["log_alpha_value"] == pytest.approx(np.log(learner["alpha_value"]), 1e-4)
    finally:
        algo.stop()


def test_sac_learning_rates_default_as_rllib_and_lr_is_refused() -> None:
    config = SACConfig()
    assert (config.actor_lr, config.critic_lr, config.alpha_lr, config.lr) == (
        3e-5,
        3e-4,
        3e-4,
        None,
    )
    with pytest.raises(ValueError, match="actor_lr, critic_lr and alpha_lr"):
        SACConfig().training(lr=1e-3)


def test_sac_parts_step_with_their_own_learning_rates() -> None:
    """Each part moves by its own lr (Adam moves each weight by about lr per step): the
    policy by ~1e-6, the critics and the temperature by ~1e-2 (RLlib's separate
    optimizers)."""
    config = (
        SACConfig()
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .training(actor_lr=1e-6, critic_lr=1e-2, alpha_lr=1e-2)
    )
    box, act = gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Box(-1.0, 1.0, (1,))
    spec = config.get_multi_rl_module_spec(spaces={DEFAULT_MODULE_ID: (box, act)})
    learner = config.learner_class(config=config, module_spec=spec)
    learner.build()
    module = learner.module[DEFAULT_MODULE_ID]
    before = {k: v.clone() for k, v in module.state_dict().items()}
    rng = np.random.default_rng(0)
    n = 16
    batch = {
        DEFAULT_MODULE_ID: {
            Columns.OBS: rng.normal(size=(n, 3)).astype(np.float32),
            Columns.ACTIONS: rng.uniform(-1, 1, (n, 1)).astype(np.float32),
            Columns.REWARDS: rng.normal(size=n).astype(np.float32),
            Columns.NEXT_OBS: rng.normal(size=(n, 3)).astype(np.float32),
            Columns.TERMINATEDS: np.zeros(n, bool),
            "n_step": np.ones(n, np.int64),
            "weights": np.ones(n, np.float32),
        }
    }
    # The groups keep the module's parameter order: optimizer states saved before
    # SAC had separate learning rates load unchanged.
    own = [p for p in module.parameters() if p.requires_grad]
    assert all(
        a is b for a, b in zip(learner._optimizers[DEFAULT_MODULE_ID].params, own, strict=True)
    )
    learner.update(batch)
    step = {k: float((v - before[k]).abs().max()) for k, v in module.state_dict().items()}
    assert max(v for k, v in step.items() if k.startswith(("pi.", "pi_encoder."))) < 1.5e-6
    assert min(v for k, v in step.items() if k.startswith(("qf.", "qf_twin."))) > 5e-3
    assert step["alpha.log_alpha"] > 5e-3


def test_dqn_docstring_example_and_forward_inference_actions() -> None:
    # RLlib's DQNConfig docstring (num_env_runners=0, a small buffer and warm-up).
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .training(
            replay_buffer_config={
                "type": "PrioritizedEpisodeReplayBuffer",
                "capacity": 60000,
                "alpha": 0.5,
                "beta": 0.5,
            },
            num_steps_sampled_before_learning_starts=64,
        )
        .env_runners(num_env_runners=0)
    )
    algo = config.build()
    try:
        for _ in range(80):
            result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        assert {"qf_loss", "qf_mean", "qf_max", "qf_min", "td_error_mean"} <= set(learner)
        assert learner["qf_min"] <= learner["qf_mean"] <= learner["qf_max"]
        # RLlib's DefaultDQNTorchRLModule: forward_inference gives the greedy actions.
        module = algo.get_module()
        obs = torch.as_tensor(
            np.stack([gym.make("CartPole-v1").reset(seed=s)[0] for s in range(5)])
        )
        out = module.forward_inference({Columns.OBS: obs})
        assert torch.equal(out[Columns.ACTIONS], out[Columns.ACTION_DIST_INPUTS].argmax(-1))
    finally:
        algo.stop()
