"""Reward clipping (rlmod/env/reward_clipping.py, `config.environment(clip_rewards=...)`):
the batches EnvRunnerGroup hands to Learners hold the clipped rewards (sign for True,
[-c, c] for a bound c, [low, high] for a pair), for every agent of a multi-agent env,
while episode returns in the metrics stay the env's (RLlib's old-stack semantics)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors.learner import LearnerConnector
from rlmod.core.columns import Columns
from rlmod.env import EnvRunnerGroup, MultiAgentEnv, MultiAgentEnvRunner
from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
from rlmod.env.reward_clipping import clip_rewards

RAW = np.array([-3.0, -0.5, 0.0, 0.2, 7.0], np.float32)
"""The reward of step t of every episode of RewardScheduleEnv (its return: 3.7)."""
SIGN = np.array([-1.0, -1.0, 0.0, 1.0, 1.0], np.float32)
CASES = [  # (clip_rewards, RAW clipped); a list, since True == 1.0 as a dict key
    (True, SIGN),
    (1.0, np.array([-1.0, -0.5, 0.0, 0.2, 1.0], np.float32)),
    ((-1.0, 2.0), np.array([-1.0, -0.5, 0.0, 0.2, 2.0], np.float32)),
    (None, RAW),
]


class RewardScheduleEnv(gym.Env[np.ndarray, int]):
    """Episodes of len(RAW) steps; the observation is the step index t, the reward of
    step t is RAW[t], whatever the action."""

    observation_space = gym.spaces.Box(0.0, len(RAW), (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action: int) -> Any:
        reward = float(RAW[self.t])
        self.t += 1
        return np.array([self.t], np.float32), reward, self.t == len(RAW), False, {}


def test_clip_rewards_gives_the_sign_a_bound_or_a_pair_in_the_same_dtype() -> None:
    for clip, expected in CASES:
        out = clip_rewards(RAW, clip)
        np.testing.assert_array_equal(out, expected)
        assert out.dtype == np.float32
    assert clip_rewards(RAW, False) is RAW and clip_rewards(RAW, None) is RAW


@pytest.mark.parametrize(("clip", "expected"), CASES, ids=["sign", "bound", "pair", "off"])
def test_sampled_batches_hold_clipped_rewards_and_metrics_the_envs(
    clip: Any, expected: np.ndarray
) -> None:
    config = PPOConfig().environment(RewardScheduleEnv, clip_rewards=clip)
    group = EnvRunnerGroup(config=config.env_runners(num_envs_per_env_runner=3))
    (result,) = group.sample(num_timesteps=60)
    batch = result["default_policy"]
    steps = batch[Columns.OBS][:, 0].astype(int)  # row t of an episode: its reward is RAW[t]
    np.testing.assert_array_equal(batch[Columns.REWARDS], expected[steps])
    (metrics,) = group.get_metrics()
    assert len(metrics["episode_returns"]) >= 9
    np.testing.assert_allclose(metrics["episode_returns"], RAW.sum(), rtol=1e-6)
    group.stop()


def test_recorded_episodes_keep_the_envs_rewards(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    config = (
        PPOConfig()
        .environment(RewardScheduleEnv, clip_rewards=True)
        .offline_data(output=str(tmp_path))
    )
    group = EnvRunnerGroup(config=config)
    (result,) = group.sample(num_episodes=2)
    group.stop()  # writes what is pending
    recorded = np.concatenate(
        [
            pq.read_table(f, columns=["rewards"])["rewards"].to_numpy()
            for f in sorted(tmp_path.glob("*.parquet"))
        ]
    )
    np.testing.assert_array_equal(recorded, np.tile(RAW, 2))
    np.testing.assert_array_equal(result["default_policy"][Columns.REWARDS], np.tile(SIGN, 2))


class _RecordRewards(LearnerConnector):
    """Records the (observation, reward) rows a Learner's batch holds before GAE."""

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, batch: Any, *, rl_module: Any, **kwargs: Any) -> Any:
        cols = batch["default_policy"]
        self.seen.append((cols[Columns.OBS][:, 0].clone(), cols[Columns.REWARDS].clone()))
        return batch


def _record_rewards(observation_space: Any, action_space: Any) -> LearnerConnector:
    return _RecordRewards()


def test_ppo_learner_trains_on_sign_clipped_rewards_while_returns_stay_raw() -> None:
    _RecordRewards.seen.clear()
    config = (
        PPOConfig()
        .environment(RewardScheduleEnv, clip_rewards=True)
        .env_runners(num_envs_per_env_runner=2)
        .training(
            train_batch_size=40, minibatch_size=20, num_epochs=1, learner_connector=_record_rewards
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()
    result = algo.train()
    algo.stop()
    ((steps, rewards),) = _RecordRewards.seen
    np.testing.assert_array_equal(rewards.numpy(), SIGN[steps.long().numpy()])
    assert result["env_runners"]["episode_return_mean"] == pytest.approx(RAW.sum())


class TwoAgentRewardEnv(MultiAgentEnv):
    """Agents "x" (reward +3 a step) and "y" (-0.25 a step) act every step; episodes of 4
    steps, so an episode returns 12 - 1 = 11."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.possible_agents = ["x", "y"]
        self.agents = list(self.possible_agents)
        box = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
        self.observation_spaces = dict.fromkeys(self.possible_agents, box)
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.array([self.t], np.float32) for a in self.possible_agents}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict: dict[str, int]) -> Any:
        self.t += 1
        done = self.t == 4
        return (
            self._obs(),
            {"x": 3.0, "y": -0.25},
            {"__all__": done},
            {"__all__": False},
            {},
        )


@pytest.mark.parametrize(
    "runner_cls", [MultiAgentEnvRunner, ReferenceMultiAgentEnvRunner], ids=["vectorized", "ref"]
)
def test_multi_agent_rows_are_clipped_per_agent_and_returns_stay_raw(runner_cls: type) -> None:
    config = (
        PPOConfig()
        .environment(TwoAgentRewardEnv, clip_rewards=True)
        .env_runners(env_runner_cls=runner_cls, num_envs_per_env_runner=2)
        .multi_agent(policies={"px", "py"}, policy_mapping_fn=_module_of)
    )
    group = EnvRunnerGroup(config=config)
    (result,) = group.sample(num_episodes=2)
    np.testing.assert_array_equal(result["px"][Columns.REWARDS], 1.0)
    np.testing.assert_array_equal(result["py"][Columns.REWARDS], -1.0)
    (metrics,) = group.get_metrics()
    assert metrics["episode_returns"] and set(metrics["episode_returns"]) == {11.0}
    assert set(metrics["agent_episode_returns"]["x"]) == {12.0}
    assert set(metrics["agent_episode_returns"]["y"]) == {-1.0}
    group.stop()


def test_a_modules_config_override_sets_its_own_clipping() -> None:
    config = (
        PPOConfig()
        .environment(TwoAgentRewardEnv, clip_rewards=True)
        .multi_agent(policies={"px", "py"}, policy_mapping_fn=_module_of)
        .rl_module(algorithm_config_overrides_per_module={"py": {"clip_rewards": False}})
    )
    group = EnvRunnerGroup(config=config)
    (result,) = group.sample(num_episodes=1)
    np.testing.assert_array_equal(result["px"][Columns.REWARDS], 1.0)
    np.testing.assert_array_equal(result["py"][Columns.REWARDS], -0.25)
    group.stop()


def _module_of(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    return f"p{agent_id}"
