"""DQN: inference-only modules, weight sync, targets, epsilon, the loss's targets by hand."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.dqn import DQNConfig, DQNLearner
from rlmod.algorithms.dqn.dqn_learner import q_learning_targets
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.replay import PrioritizedReplayBuffer
from rlmod.testing import MultiAgentCartPole

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
TWO = gym.spaces.Discrete(2)


def _small(config: DQNConfig) -> DQNConfig:
    return (
        config.environment("CartPole-v1")
        .debugging(seed=0)
        .env_runners(rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [16], "fcnet_activation": "relu"})
        .training(num_steps_sampled_before_learning_starts=16, train_batch_size=8)
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
    )


def test_inference_only_module_has_no_target_network_and_sync_sends_the_online_head() -> None:
    algo = _small(DQNConfig()).build_algo()
    try:
        runner_module = algo.env_runner.module
        learner_module = algo.learner_group.learner.module[DEFAULT_MODULE_ID]
        assert not any(k.startswith("target_q.") for k in runner_module.state_dict())
        assert any(k.startswith("target_q.") for k in learner_module.state_dict())
        synced = algo.learner_group.get_weights(inference_only=True)[DEFAULT_MODULE_ID]
        assert set(synced) == set(runner_module.state_dict())
        assert all(k.startswith("q.") or k == "epsilon" for k in synced)
        for _ in range(8):  # past learning starts: epsilon moves and reaches the EnvRunner
            algo.train()
        eps = float(learner_module.get_buffer("epsilon"))
        assert eps < 1.0
        assert float(runner_module.get_buffer("epsilon")) == eps
        torch.testing.assert_close(runner_module.q.af[-1].weight, learner_module.q.af[-1].weight)
    finally:
        algo.stop()


def _learner(**training: object) -> DQNLearner:
    config = DQNConfig().training(**training)  # type: ignore[arg-type]
    spec = config.get_multi_rl_module_spec(spaces={DEFAULT_MODULE_ID: (BOX, TWO)})
    learner = DQNLearner(config=config, module_spec=spec)
    learner.build()
    return learner


@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_target_network_updates_as_tau_and_freq_say(tau: float) -> None:
    learner = _learner(tau=tau, target_network_update_freq=500)
    assert learner.module is not None
    module = learner.module[DEFAULT_MODULE_ID]
    online = [p.detach().clone() for p in module.q.parameters()]
    with torch.no_grad():
        for p in module.target_q.parameters():
            p.fill_(2.0)
    learner.after_gradient_based_update(timesteps={"num_env_steps_sampled_lifetime": 499})
    assert all(torch.all(p == 2.0) for p in module.target_q.parameters())  # too early
    learner.after_gradient_based_update(timesteps={"num_env_steps_sampled_lifetime": 500})
    for t, o in zip(module.target_q.parameters(), online, strict=True):
        torch.testing.assert_close(t, tau * o + (1 - tau) * 2.0)
    before = [p.clone() for p in module.target_q.parameters()]
    learner.after_gradient_based_update(timesteps={"num_env_steps_sampled_lifetime": 999})
    assert all(
        torch.equal(a, b) for a, b in zip(before, module.target_q.parameters(), strict=True)
    )  # 499 steps since the last


def test_q_learning_targets_by_hand() -> None:
    rewards = torch.tensor([1.0, 2.0, 3.0])
    term = torch.tensor([False, True, False])
    n_step = torch.tensor([1, 3, 2])
    q_target_next = torch.tensor([[1.0, 5.0], [7.0, 7.0], [4.0, 2.0]])
    q_online_next = torch.tensor([[3.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    g = 0.5
    plain = q_learning_targets(rewards, term, n_step, q_target_next, None, gamma=g)
    torch.testing.assert_close(plain, torch.tensor([1 + g * 5, 2.0, 3 + g**2 * 4]))
    double = q_learning_targets(rewards, term, n_step, q_target_next, q_online_next, gamma=g)
    torch.testing.assert_close(double, torch.tensor([1 + g * 1, 2.0, 3 + g**2 * 2]))


def test_epsilon_greedy_exploration() -> None:
    spec = DQNConfig().get_rl_module_spec(
        spaces={DEFAULT_MODULE_ID: (BOX, gym.spaces.Discrete(4))}, inference_only=True
    )
    module = spec.build()
    obs = {Columns.OBS: torch.zeros(4000, 4)}
    greedy = module.forward_inference(obs)[Columns.ACTION_DIST_INPUTS].argmax(-1)
    module.get_buffer("epsilon").fill_(0.0)
    assert torch.equal(module.forward_exploration(obs)[Columns.ACTIONS], greedy)
    module.get_buffer("epsilon").fill_(1.0)
    counts = np.bincount(module.forward_exploration(obs)[Columns.ACTIONS].numpy(), minlength=4)
    assert counts.min() > 850  # uniform: 1000 each


def test_prioritized_replay_gets_td_errors_and_result_keys() -> None:
    algo = _small(DQNConfig()).build_algo()
    try:
        for _ in range(20):
            result = algo.train()
        buf = algo.replay_buffer.buffers[DEFAULT_MODULE_ID]
        assert isinstance(buf, PrioritizedReplayBuffer)
        assert len(np.unique(buf.tree.leaves[: len(buf)])) > 2  # priorities moved
        learner = result["learners"][DEFAULT_MODULE_ID]
        assert {
            "qf_loss",
            "qf_mean",
            "qf_max",
            "qf_min",
            "td_error_mean",
            "epsilon",
            "default_optimizer_learning_rate",
        } <= set(learner)
        assert "td_error" not in learner
        assert result["num_env_steps_sampled_lifetime"] == 80
        assert result["learners"]["__all_modules__"]["num_gradient_steps"] == 1
    finally:
        algo.stop()


def test_multi_agent_dqn_keeps_one_buffer_per_module() -> None:
    config = (
        _small(DQNConfig())
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
    )
    algo = config.build_algo()
    try:
        for _ in range(12):
            result = algo.train()
        assert set(algo.replay_buffer.buffers) == {"p0", "p1"}
        assert {"p0", "p1"} <= set(result["learners"])
    finally:
        algo.stop()


def test_bad_settings_name_the_setting() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        DQNConfig().training(epsilon=[[0, 1.0], [100, 1.5]])
    with pytest.raises(ValueError, match="num_epochs=3"):
        DQNConfig().environment("CartPole-v1").training(num_epochs=3).validate()
    with pytest.raises(TypeError, match="DQN needs a Discrete action space"):
        DQNConfig().get_rl_module_spec(spaces={DEFAULT_MODULE_ID: (BOX, BOX)}).build()
    with pytest.raises(ValueError, match="replay_buffer_config"):
        DQNConfig().training(replay_buffer_config={"type": "Nope"})


def test_a_learner_only_curiosity_module_beside_the_q_module() -> None:
    from rlmod.core import MultiRLModuleSpec, RLModuleSpec
    from rlmod.curiosity import IntrinsicCuriosityModel, IntrinsicCuriosityModelConnector

    config = (
        _small(DQNConfig())
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
        for _ in range(8):
            result = algo.train()
        assert algo.env_runner.module_ids == [DEFAULT_MODULE_ID]  # no ICM on EnvRunners
        assert set(algo.replay_buffer.buffers) == {DEFAULT_MODULE_ID}
        assert {DEFAULT_MODULE_ID, "icm"} <= set(result["learners"])
        assert "epsilon" in result["learners"][DEFAULT_MODULE_ID]
    finally:
        algo.stop()


def test_dueling_setting_reaches_the_module() -> None:
    spaces = {DEFAULT_MODULE_ID: (BOX, TWO)}
    assert DQNConfig().get_rl_module_spec(spaces=spaces).build().q.vf is not None
    plain = DQNConfig().training(dueling=False).get_multi_rl_module_spec(spaces=spaces).build()
    assert plain[DEFAULT_MODULE_ID].q.vf is None


def test_epsilon_starts_where_its_schedule_starts() -> None:
    spaces = {DEFAULT_MODULE_ID: (BOX, TWO)}
    config = DQNConfig().training(epsilon=0.1)
    module = config.get_rl_module_spec(spaces=spaces, inference_only=True).build()
    assert float(module.get_buffer("epsilon")) == pytest.approx(0.1)
