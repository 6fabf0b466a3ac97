"""How much one train() call does: RLlib's min_sample_timesteps_per_iteration,
min_train_timesteps_per_iteration and min_time_s_per_iteration (rlmod/algorithms/iteration.py)."""

from __future__ import annotations

from typing import Any

import pytest

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.iteration import merge_learner_results
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.core.columns import ALL_MODULES, DEFAULT_MODULE_ID

SMALL_NET = {"fcnet_hiddens": [16]}


@pytest.mark.parametrize(
    ("config_cls", "min_sample", "min_time", "min_train"),
    [
        (DQNConfig, 1000, None, 0),  # RLlib's DQNConfig
        (SACConfig, 100, 1, 0),  # RLlib's SACConfig
        (PPOConfig, 0, None, 0),  # RLlib's AlgorithmConfig defaults
        (MARWILConfig, 0, None, 0),
        (BCConfig, 0, None, 0),
    ],
)
def test_defaults_are_rllibs(
    config_cls: Any, min_sample: int, min_time: Any, min_train: int
) -> None:
    config = config_cls()
    assert config.min_sample_timesteps_per_iteration == min_sample
    assert config.min_time_s_per_iteration == min_time
    assert config.min_train_timesteps_per_iteration == min_train
    config.reporting(min_sample_timesteps_per_iteration=7, min_time_s_per_iteration=0.5)
    assert config.min_sample_timesteps_per_iteration == 7
    assert config.to_dict()["min_time_s_per_iteration"] == 0.5


def _dqn() -> DQNConfig:
    return (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(rollout_fragment_length=8)
        .training(train_batch_size=16, num_steps_sampled_before_learning_starts=32)
        .rl_module(model_config=SMALL_NET)
        .debugging(seed=0)
    )


def test_dqn_samples_1000_env_steps_per_train_call_as_rllib() -> None:
    """RLlib's `for _ in range(N): algo.train()` loop: each call samples >= 1000 env steps
    (was: one fragment, here 8 steps, so N calls did 125x less work)."""
    algo = _dqn().build_algo()
    try:
        first = algo.train()
        assert first["num_env_steps_sampled_lifetime"] == 1000  # 125 fragments of 8
        assert first["num_training_step_calls_per_iteration"] == 125
        assert first["env_runners"]["num_env_steps_sampled"] == 1000
        # 125 steps, the first 3 before learning starts (32 env steps): 122 gradient steps
        assert first["learners"][ALL_MODULES]["num_gradient_steps"] == 122
        assert first["learners"][ALL_MODULES]["num_module_steps_trained"] == 122 * 16
        second = algo.train()
        assert second["num_env_steps_sampled_lifetime"] == 2000
        assert second["env_runners"]["num_env_steps_sampled"] == 1000
        assert second["training_iteration"] == 2
    finally:
        algo.stop()


def test_zero_minimums_run_one_training_step_per_call() -> None:
    config = _dqn().reporting(min_sample_timesteps_per_iteration=0)
    algo = config.build_algo()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled_lifetime"] == 8
        assert result["num_training_step_calls_per_iteration"] == 1
    finally:
        algo.stop()


def test_min_train_timesteps_counts_rows_trained() -> None:
    """PPO trains its batch once per epoch: 2 epochs of 64 rows are 128 rows trained, so a
    minimum of 300 needs 3 training steps (3 x 64 env steps sampled)."""
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=32, num_epochs=2)
        .rl_module(model_config=SMALL_NET)
        .reporting(min_train_timesteps_per_iteration=300)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        assert result["num_training_step_calls_per_iteration"] == 3
        assert result["num_env_steps_sampled_lifetime"] == 192
        assert result["learners"][ALL_MODULES]["num_module_steps_trained"] == 3 * 128
    finally:
        algo.stop()


def test_min_time_s_repeats_training_steps_until_it_passed() -> None:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1)
        .rl_module(model_config=SMALL_NET)
        .reporting(min_time_s_per_iteration=0.3)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        assert result["time_this_iter_s"] >= 0.3
        assert result["num_training_step_calls_per_iteration"] > 1
        steps = result["num_training_step_calls_per_iteration"]
        assert result["num_env_steps_sampled_lifetime"] == 64 * steps
    finally:
        algo.stop()


def test_evaluation_runs_once_per_iteration_not_per_training_step() -> None:
    calls: list[int] = []
    config = (
        _dqn()
        .reporting(min_sample_timesteps_per_iteration=64)
        .evaluation(evaluation_interval=1, evaluation_duration=2)
        .callbacks(on_evaluate_start=lambda **kw: calls.append(kw["algorithm"].iteration))
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        algo.train()
        assert result["num_training_step_calls_per_iteration"] == 8
        assert calls == [1, 2]
        assert result["evaluation"]["env_runners"]["num_episodes"] == 2
    finally:
        algo.stop()


def test_offline_algorithms_refuse_a_sampling_minimum(tmp_path: Any) -> None:
    config = (
        BCConfig()
        .offline_data(input_=str(tmp_path))
        .reporting(min_sample_timesteps_per_iteration=100)
    )
    with pytest.raises(ValueError, match="samples no env steps, so train\\(\\) would never"):
        config.validate()


def test_merged_learner_results_sum_counters_and_average_the_rest() -> None:
    steps = [
        {},  # a step before learning started
        {
            DEFAULT_MODULE_ID: {"qf_loss": 1.0, "num_module_steps_trained": 16},
            ALL_MODULES: {"num_trainable_parameters": 100, "num_env_steps_trained_lifetime": 16},
        },
        {
            DEFAULT_MODULE_ID: {"qf_loss": 3.0, "num_module_steps_trained": 16},
            ALL_MODULES: {"num_trainable_parameters": 100, "num_env_steps_trained_lifetime": 32},
        },
    ]
    merged = merge_learner_results(steps)
    assert merged[DEFAULT_MODULE_ID] == {"qf_loss": 2.0, "num_module_steps_trained": 32}
    assert merged[ALL_MODULES] == {
        "num_trainable_parameters": 100,
        "num_env_steps_trained_lifetime": 32,
    }
    assert merge_learner_results([{}, steps[1]]) is steps[1]
    assert merge_learner_results([{}]) == {}
