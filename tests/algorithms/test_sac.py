"""SAC: the tanh log-prob correction, inference-only actors, targets, both action kinds."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.sac import SACConfig, SACLearner
from rlmod.algorithms.sac.sac_learner import auto_target_entropy, frozen
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.distributions import TanhGaussian

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def test_tanh_gaussian_logp_matches_a_monte_carlo_density() -> None:
    torch.manual_seed(0)
    inputs = torch.tensor([[0.7, math.log(0.8)]])  # mean 0.7, std 0.8 before tanh
    dist = TanhGaussian(inputs.expand(400_000, 2))
    samples = dist.sample()[:, 0].numpy()
    edges = np.linspace(-0.95, 0.95, 20)
    counts, _ = np.histogram(samples, bins=edges)
    mc_density = counts / len(samples) / np.diff(edges)
    centers = torch.tensor((edges[:-1] + edges[1:]) / 2, dtype=torch.float32)[:, None]
    # The bin's mean density, by the midpoint rule on a fine grid inside each bin.
    fine = torch.linspace(0, 1, 51)[1::2]
    width = float(edges[1] - edges[0])
    grid = centers - width / 2 + fine[None, :] * width  # [bins, 25]
    logp = TanhGaussian(inputs.expand(grid.numel(), 2)).logp(grid.reshape(-1, 1))
    density = logp.exp().reshape(grid.shape).mean(1).numpy()
    np.testing.assert_allclose(mc_density, density, rtol=0.03, atol=0.01)
    # Without the correction the density would be the Gaussian's: far off near the bounds.
    a, logp_sample = TanhGaussian(inputs.expand(5, 2)).rsample_with_logp()
    torch.testing.assert_close(
        TanhGaussian(inputs.expand(5, 2)).logp(a), logp_sample, rtol=1e-4, atol=1e-4
    )


def test_inference_only_sac_module_holds_the_actor_alone() -> None:
    config = (
        SACConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("Pendulum-v1")
        .debugging(seed=0)
        .training(num_steps_sampled_before_learning_starts=8, train_batch_size=8)
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .env_runners(rollout_fragment_length=4)
    )
    algo = config.build_algo()
    try:
        runner_keys = set(algo.env_runner.module.state_dict())
        assert runner_keys and all(k.startswith(("pi_encoder.", "pi.")) for k in runner_keys)
        learner_keys = set(algo.learner_group.learner.module[DEFAULT_MODULE_ID].state_dict())
        assert {"alpha.log_alpha"} <= learner_keys
        assert any(k.startswith("qf_twin_target.") for k in learner_keys)
        assert (
            set(algo.learner_group.get_weights(inference_only=True)[DEFAULT_MODULE_ID])
            == runner_keys
        )
        for _ in range(4):
            result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        assert {  # RLlib's SAC result keys, per-optimizer learning rates included
            "policy_loss",
            "qf_loss",
            "alpha_loss",
            "alpha_value",
            "log_alpha_value",
            "target_entropy",
            "logps",
            "qf_mean",
            "qf_max",
            "qf_min",
            "td_error_mean",
            "policy_learning_rate",
            "qf_learning_rate",
            "qf_twin_learning_rate",
            "alpha_learning_rate",
        } <= set(learner)
        assert "default_optimizer_learning_rate" not in learner
        assert learner["policy_learning_rate"] == 3e-5  # RLlib's actor_lr default
        assert learner["qf_learning_rate"] == learner["alpha_learning_rate"] == 3e-4
        runner_w = algo.env_runner.module.state_dict()
        for k, v in algo.learner_group.get_weights(inference_only=True)[DEFAULT_MODULE_ID].items():
            np.testing.assert_array_equal(runner_w[k].numpy(), v)
    finally:
        algo.stop()


def test_soft_target_update_after_every_gradient_step() -> None:
    config = SACConfig().training(tau=0.25)  # target_network_update_freq=0: every step
    spec = config.get_multi_rl_module_spec(spaces={DEFAULT_MODULE_ID: (BOX, BOX)})
    learner = SACLearner(config=config, module_spec=spec)
    learner.build()
    assert learner.module is not None
    module = learner.module[DEFAULT_MODULE_ID]
    with torch.no_grad():
        for target in (module.qf_target, module.qf_twin_target):
            for p in target.parameters():
                p.zero_()
    for step in (1, 1):  # no env step in between: still updated (freq 0)
        learner.after_gradient_based_update(timesteps={"num_env_steps_sampled_lifetime": step})
    for target, online in module.target_network_pairs():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            torch.testing.assert_close(t, (1 - 0.75**2) * o)


def test_frozen_critics_pass_gradients_to_actions_only() -> None:
    critic = torch.nn.Linear(3, 1)
    actions = torch.randn(4, 3, requires_grad=True)
    with frozen([critic]):
        critic(actions).sum().backward()
    assert critic.weight.grad is None and actions.grad is not None
    assert critic.weight.requires_grad  # restored


def test_auto_target_entropy() -> None:
    assert auto_target_entropy(BOX) == -3.0
    assert auto_target_entropy(gym.spaces.Discrete(4)) == pytest.approx(0.98 * math.log(4))


def test_discrete_sac_trains_on_cartpole_briefly() -> None:
    config = (
        SACConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("CartPole-v1")
        .debugging(seed=0)
        .training(
            num_steps_sampled_before_learning_starts=8,
            train_batch_size=8,
            replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 100},
        )
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .env_runners(rollout_fragment_length=4)
    )
    algo = config.build_algo()
    try:
        for _ in range(4):
            result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        assert learner["entropy"] > 0  # a distribution over 2 actions
        assert all(math.isfinite(learner[k]) for k in ("qf_loss", "policy_loss"))
    finally:
        algo.stop()


def test_target_entropy_must_be_auto_or_a_number() -> None:
    with pytest.raises(ValueError, match="target_entropy"):
        SACConfig().training(target_entropy="high")


def test_twin_q_and_initial_alpha_reach_the_module() -> None:
    spaces = {DEFAULT_MODULE_ID: (BOX, BOX)}
    config = SACConfig().training(twin_q=False, initial_alpha=0.2)
    module = config.get_multi_rl_module_spec(spaces=spaces).build()[DEFAULT_MODULE_ID]
    assert not hasattr(module, "qf_twin") and len(module.critics()) == 1
    assert float(module.alpha.log_alpha.detach().exp()) == pytest.approx(0.2)


def _small_pendulum() -> SACConfig:
    return (
        SACConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("Pendulum-v1")
        .debugging(seed=0)
        .env_runners(rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .training(
            num_steps_sampled_before_learning_starts=16,
            train_batch_size=8,
            replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 1000},
        )
    )


def test_a_learner_only_curiosity_module_beside_the_sac_module() -> None:
    """A learner-only ICM (Box actions) trains beside SAC; EnvRunners and the replay
    buffer know the SAC module only."""
    from rlmod.core import MultiRLModuleSpec, RLModuleSpec
    from rlmod.curiosity import IntrinsicCuriosityModel, IntrinsicCuriosityModelConnector

    config = (
        _small_pendulum()
        .training(learner_connector=IntrinsicCuriosityModelConnector)
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    DEFAULT_MODULE_ID: RLModuleSpec(),
                    "icm": RLModuleSpec(module_class=IntrinsicCuriosityModel, learner_only=True),
                }
            )
        )
    )
    algo = config.build_algo()
    try:
        icm_before = {
            k: v.copy() for k, v in algo.learner_group.get_weights(["icm"])["icm"].items()
        }
        for _ in range(8):
            result = algo.train()
        assert algo.env_runner.module_ids == [DEFAULT_MODULE_ID]  # no ICM on EnvRunners
        assert set(algo.replay_buffer.buffers) == {DEFAULT_MODULE_ID}
        assert {"qf_loss", "alpha_value"} <= set(result["learners"][DEFAULT_MODULE_ID])
        assert "icm" in result["learners"]
        icm_after = algo.learner_group.get_weights(["icm"])["icm"]
        assert any(not np.array_equal(icm_before[k], icm_after[k]) for k in icm_after)
    finally:
        algo.stop()


def test_multi_agent_sac_trains_one_module_and_buffer_per_policy() -> None:
    """Two policies on MultiAgentCartPole (discrete SAC): independent modules, buffers and
    updates, each EnvRunner module the actor alone."""
    from rlmod.testing import MultiAgentCartPole

    config = (
        SACConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .debugging(seed=0)
        .env_runners(rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .training(
            num_steps_sampled_before_learning_starts=16,
            train_batch_size=8,
            replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 1000},
        )
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
    )
    algo = config.build_algo()
    try:
        before = algo.learner_group.get_weights()
        for _ in range(10):
            result = algo.train()
        assert set(algo.replay_buffer.buffers) == {"p0", "p1"}
        assert {"p0", "p1"} <= set(result["learners"])
        after = algo.learner_group.get_weights()
        for mid in ("p0", "p1"):
            assert result["learners"][mid]["entropy"] > 0
            assert not np.array_equal(before[mid]["qf.0.weight"], after[mid]["qf.0.weight"])
            runner_keys = set(algo.env_runner.module[mid].state_dict())
            assert runner_keys and all(k.startswith(("pi_encoder.", "pi.")) for k in runner_keys)
    finally:
        algo.stop()
