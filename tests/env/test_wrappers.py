"""Tests of rlmod/env/wrappers.py: a task's step limit reported as termination."""

from __future__ import annotations

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import Columns
from rlmod.env import SingleAgentEnvRunner
from rlmod.env.wrappers import make_with_terminal_time_limit

DESC = ["SFF", "FFF", "FFG"]


def test_the_limit_terminates_instead_of_truncating():
    env = make_with_terminal_time_limit(
        {"id": "FrozenLake-v1", "desc": DESC, "is_slippery": False, "max_episode_steps": 2}
    )
    env.reset(seed=0)
    assert env.step(0)[2:4] == (False, False)  # left, into the wall
    assert env.step(0)[2:4] == (True, False)


def test_env_runner_batches_end_the_episodes_as_terminated():
    config = (
        PPOConfig()
        .environment(
            make_with_terminal_time_limit,
            env_config={
                "id": "FrozenLake-v1",
                "desc": DESC,
                "is_slippery": False,
                "max_episode_steps": 2,
            },
        )
        .env_runners(num_envs_per_env_runner=2)
    )
    runner = SingleAgentEnvRunner(config=config)
    batch = runner.sample(num_episodes=4)["default_policy"]
    assert batch[Columns.TERMINATEDS].sum() >= 4 and not batch[Columns.TRUNCATEDS].any()
    runner.stop()


@pytest.mark.parametrize("env_config", [{"max_episode_steps": 5}, {"id": "CartPole-v1"}])
def test_missing_id_or_limit_is_a_clear_error(env_config):
    with pytest.raises(ValueError, match="'id' .* and 'max_episode_steps'"):
        make_with_terminal_time_limit(env_config)
