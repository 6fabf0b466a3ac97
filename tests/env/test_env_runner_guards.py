"""EnvRunner guards (rlmod/env/guards.py): non-finite env data and sub-envs that raise,
caught where the data enters, named, and survived or refused."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import SingleAgentEnvRunner
from rlmod.errors import EnvError


class _Faulty(gym.Env):
    """Counts its steps; on step `bad_at` of episode `bad_episode` it returns NaN in the
    observation or reward, or raises. Episodes last 5 steps; reward 1 per step."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict) -> None:
        self.config = config
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        cfg = self.config
        trigger = cfg.get("armed", [True])[0] and self.t == cfg.get("bad_at", 3)
        obs = np.full(3, 0.1 * self.t, np.float32)
        reward = 1.0
        if trigger:
            kind = cfg["kind"]
            cfg.get("armed", [True])[0] = cfg.get("repeat", False)
            if kind == "raise":
                raise RuntimeError("sensor unplugged")
            if kind == "nan_obs":
                obs[1] = np.nan
            if kind == "inf_reward":
                reward = np.inf
        return obs, reward, False, self.t >= 5, {}


def _config(env_config: dict, *, num_envs: int = 1, **settings) -> PPOConfig:
    config = (
        PPOConfig()
        .environment(_Faulty, env_config=env_config)
        .env_runners(num_envs_per_env_runner=num_envs)
        .training(train_batch_size=40, minibatch_size=20, num_epochs=1)
        .debugging(seed=0)
    )
    for name, value in settings.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize(("kind", "key"), [("nan_obs", "obs"), ("inf_reward", "rewards")])
def test_non_finite_env_data_raises_naming_env_sub_env_step_and_key(kind, key):
    runner = SingleAgentEnvRunner(config=_config({"kind": kind, "bad_at": 3}))
    with pytest.raises(
        EnvError,
        match=rf"returned a non-finite \(NaN or inf\) {key} in sub-env "
        r"0 at step 3 of this EnvRunner.*on_non_finite_env_data=",
    ):
        runner.sample(num_timesteps=8)
    runner.stop()


def test_truncate_mode_ends_the_episode_counts_it_and_keeps_the_batch_finite():
    env_config = {"kind": "nan_obs", "bad_at": 3, "armed": [True]}
    runner = SingleAgentEnvRunner(
        config=_config(env_config, num_envs=2, on_non_finite_env_data="truncate_episode")
    )
    batch = runner.sample(num_timesteps=20)["default_policy"]
    for col in ("obs", "new_obs", "rewards"):
        assert np.isfinite(batch[col]).all(), col
    metrics = runner.get_metrics()
    assert metrics["num_episodes_truncated_non_finite"] == 1
    # The truncated episode: 3 steps, its NaN step's reward counted as 0.
    assert 2.0 in metrics["episode_returns"]
    assert 3 in metrics["episode_lens"]
    ends = np.flatnonzero(batch["truncateds"])
    bad_end = [i for i in ends if batch["rewards"][i] == 0.0]
    assert len(bad_end) == 1
    # The final observation stands in as the last finite one the agent acted on.
    np.testing.assert_array_equal(batch["new_obs"][bad_end[0]], batch["obs"][bad_end[0]])
    runner.stop()


def test_truncate_mode_trains_on(tmp_path):
    env_config = {"kind": "inf_reward", "bad_at": 2, "armed": [True], "repeat": True}
    algo = _config(env_config, num_envs=2, on_non_finite_env_data="truncate_episode").build_algo()
    result = algo.train()
    assert result["env_runners"]["num_episodes_truncated_non_finite"] > 0
    assert np.isfinite(result["env_runners"]["episode_return_mean"])
    assert result["learners"]["default_policy"]["num_non_finite_updates"] == 0
    algo.stop()


def test_a_raising_sub_env_is_named_and_the_algorithm_stays_usable():
    env_config = {"kind": "raise", "bad_at": 3, "armed": [True]}
    algo = _config(env_config, num_envs=2).build_algo()
    with pytest.raises(
        EnvError,
        match=r"raised in step\(\) of sub-env 0 at step 3 of this "
        r"EnvRunner: RuntimeError\('sensor unplugged'\)",
    ):
        algo.train()
    result = algo.train()  # the next train() works (fresh episodes on every sub-env)
    # Counters count exactly the rows that reached the batch: none of the failed call's.
    assert (
        result["num_env_steps_sampled_lifetime"]
        == result["env_runners"]["num_env_steps_sampled"]
        == 40
    )
    # Every episode recorded has the right return (1 per step, 5 steps).
    assert result["env_runners"]["episode_return_min"] == 5.0
    assert result["env_runners"]["episode_return_max"] == 5.0
    algo.stop()


def test_restart_failed_sub_environments_recreates_it_and_drops_its_episode():
    env_config = {"kind": "raise", "bad_at": 3, "armed": [True]}
    config = _config(env_config, num_envs=2).fault_tolerance(restart_failed_sub_environments=True)
    runner = SingleAgentEnvRunner(config=config)
    batch = runner.sample(num_timesteps=30)["default_policy"]
    metrics = runner.get_metrics()
    assert metrics["num_sub_env_restarts"] == 1
    # Every recorded episode is whole: 5 steps, return 5; the dropped one is not there.
    assert set(metrics["episode_lens"]) == {5}
    assert set(metrics["episode_returns"]) == {5.0}
    # Counted steps are exactly the batch's rows, and no row of the dropped episode is in.
    assert metrics["num_env_steps"] == len(batch["obs"])
    for eps in np.unique(batch["eps_id"]):
        rows = batch["eps_id"] == eps
        if (batch["terminateds"][rows] | batch["truncateds"][rows]).any():
            assert rows.sum() == 5
    runner.stop()


class _FailsEveryOtherEpisode(_Faulty):
    """Raises at step 3 of every second episode (counted over all instances, which a
    restart recreates): a flaky env that still gives whole episodes."""

    def reset(self, *, seed=None, options=None):
        self.config["episodes"] = self.config.get("episodes", 0) + 1
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self.t == 2 and self.config["episodes"] % 2 == 0:
            self.t += 1
            raise RuntimeError("flaky link")
        return super().step(action)


@pytest.mark.parametrize(("num_envs", "batch"), [(1, 40), (8, 16)])
def test_a_sub_env_that_always_raises_stops_training_with_an_env_error(num_envs, batch):
    """Issue 30, item 11: was an IndexError in the learner connector (empty batch); with 8
    sub-envs and 16 rows each train() dropped every row before any bound was reached."""
    env_config = {"kind": "raise", "bad_at": 1, "armed": [True], "repeat": True}
    config = (
        _config(env_config, num_envs=num_envs)
        .fault_tolerance(restart_failed_sub_environments=True)
        .training(train_batch_size=batch, minibatch_size=8)
    )
    algo = config.build_algo()
    with pytest.raises(
        EnvError,
        match=r"env=<class '.*_Faulty'> \(sub-env \d of this "
        r"EnvRunner\) raised 10 times in a row with none of its steps kept .*"
        r"RuntimeError\('sensor unplugged'\).*"
        r"max_consecutive_sub_environment_failures=\.\.\.\) \(now 10\)",
    ):
        algo.train()
    algo.stop()


def test_the_bound_is_a_setting_and_a_flaky_sub_env_never_reaches_it():
    always = {"kind": "raise", "bad_at": 1, "armed": [True], "repeat": True}
    runner = SingleAgentEnvRunner(
        config=_config(always).fault_tolerance(
            restart_failed_sub_environments=True, max_consecutive_sub_environment_failures=3
        )
    )
    with pytest.raises(EnvError, match=r"raised 3 times in a row.*at step 5 of this EnvRunner"):
        runner.sample(num_timesteps=100)  # fails at steps 1, 3, 5 (2 and 4 reset it)
    runner.stop()
    with pytest.raises(ValueError, match="max_consecutive_sub_environment_failures"):
        PPOConfig().fault_tolerance(max_consecutive_sub_environment_failures=0)
    # Every second episode fails; the whole ones between reach the batch, so two failures
    # are never in a row.
    config = (
        PPOConfig()
        .environment(_FailsEveryOtherEpisode, env_config={"armed": [False]})
        .training(train_batch_size=40, minibatch_size=20, num_epochs=1)
        .fault_tolerance(
            restart_failed_sub_environments=True, max_consecutive_sub_environment_failures=2
        )
    )
    algo = config.build_algo()
    for _ in range(3):
        result = algo.train()
    assert result["env_runners"]["num_sub_env_restarts"] > 0
    assert result["env_runners"]["episode_return_min"] == 5.0
    algo.stop()


@pytest.mark.parametrize("mode", ["raise", "truncate_episode"])
def test_a_non_finite_observation_at_reset_names_the_env_not_the_module(mode):
    class _NanStart(_Faulty):
        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.full(3, np.nan, np.float32), {}

    config = _config({"kind": "none"}, on_non_finite_env_data=mode)
    config.env = _NanStart
    runner = SingleAgentEnvRunner(config=config)
    with pytest.raises(
        EnvError,
        match=r"returned a non-finite \(NaN or inf\) obs in sub-env 0 "
        r"at step 0 of this EnvRunner.*cannot be truncated before its first",
    ):
        runner.sample(num_timesteps=8)
    runner.stop()
