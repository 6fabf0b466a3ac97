"""Callbacks as RLlib's docs use them (custom metrics from episode hooks, per-hook
callables, Algorithm-side hooks), rewritten for rlmod."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.callbacks import Callbacks, RLlibCallback
from rlmod.env import SingleAgentEnvRunner
from rlmod.testing import MultiAgentCartPole


def small(config: PPOConfig) -> PPOConfig:
    return config.training(train_batch_size=256, minibatch_size=128, num_epochs=1).debugging(seed=0)


class PoleAngle(RLlibCallback):
    """RLlib's custom-metrics example: the mean |pole angle| of each episode."""

    def on_episode_start(self, *, episode, **kwargs):
        episode.custom_data["angles"] = []

    def on_episode_step(self, *, episode, **kwargs):
        episode.custom_data["angles"].append(abs(float(episode.get_observations(-1)[2])))

    def on_episode_end(self, *, episode, metrics_logger, **kwargs):
        angles = episode.custom_data["angles"]
        assert len(angles) == len(episode) == len(episode.get_rewards())
        metrics_logger.log_value("pole_angle", float(np.mean(angles)), reduce="mean")
        metrics_logger.log_value("max_return", episode.get_return(), reduce="max")


def test_a_callback_logging_a_custom_metric_appears_in_the_result():
    algo = (
        small(PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=4))
        .callbacks(PoleAngle)
        .build_algo()
    )
    result = algo.train()
    runners = result["env_runners"]
    assert 0.0 < runners["pole_angle"] < 0.21  # CartPole ends at 12 degrees
    # Every finished episode reached on_episode_end, with RLlib's get_return().
    assert runners["max_return"] == runners["episode_return_max"]
    algo.stop()


def test_episode_hooks_see_each_step_once_and_the_end_after_the_last_step():
    calls: list[tuple[str, int, int]] = []

    class Recorder(RLlibCallback):
        def on_episode_start(self, *, episode, env_index, **kwargs):
            calls.append(("start", episode.id_, len(episode)))

        def on_episode_step(self, *, episode, env_index, **kwargs):
            calls.append(("step", episode.id_, len(episode)))

        def on_episode_end(self, *, episode, env_index, prev_episode_chunks, **kwargs):
            assert episode.is_done and prev_episode_chunks == []
            calls.append(("end", episode.id_, len(episode)))

    config = small(
        PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=3)
    ).callbacks(Recorder)
    runner = SingleAgentEnvRunner(config=config)
    runner.sample(num_timesteps=300)
    metrics = runner.get_metrics()
    ends = [c for c in calls if c[0] == "end"]
    assert sorted(n for _, _, n in ends) == sorted(metrics["episode_lens"])
    for _, eid, n in ends:
        steps = [c for c in calls if c[0] == "step" and c[1] == eid]
        assert [s[2] for s in steps] == list(range(1, n + 1))  # one call per step, in order
        assert ("start", eid, 0) in calls


def test_per_hook_callables_run_after_the_class_and_lists_are_accepted():
    order: list[str] = []

    class First(RLlibCallback):
        def on_train_result(self, *, result, **kwargs):
            order.append("class")

    algo = (
        small(PPOConfig().environment("CartPole-v1"))
        .callbacks(
            [First],
            on_train_result=[lambda **kw: order.append("fn1"), lambda **kw: order.append("fn2")],
            on_algorithm_init=lambda *, algorithm, metrics_logger: order.append("init"),
        )
        .build_algo()
    )
    algo.train()
    assert order == ["init", "class", "fn1", "fn2"]
    algo.stop()


def test_algorithm_side_metrics_show_at_the_top_level_of_the_result():
    class Counter(RLlibCallback):
        def on_train_result(self, *, algorithm, metrics_logger, result, **kwargs):
            metrics_logger.log_value("num_results", 1, reduce="sum", clear_on_reduce=False)
            result["seen_by_callback"] = True

    algo = small(PPOConfig().environment("CartPole-v1")).callbacks(Counter).build_algo()
    first, second, third = algo.train(), algo.train(), algo.train()
    assert first["seen_by_callback"] and "num_results" not in first
    assert (second["num_results"], third["num_results"]) == (1.0, 2.0)  # lifetime sum
    algo.stop()


def test_unoverridden_hooks_build_no_episode_objects():
    class OnlyTrainResult(RLlibCallback):
        def on_train_result(self, **kwargs):
            pass

    config = small(PPOConfig().environment("CartPole-v1")).callbacks(OnlyTrainResult)
    runner = SingleAgentEnvRunner(config=config)
    assert not runner._track_episodes
    runner.sample(num_timesteps=50)
    assert runner._episodes == [None]
    assert Callbacks.from_config(config).has("on_train_result")
    assert not Callbacks.from_config(config).has("on_episode_step")


def test_multi_agent_episodes_reach_the_hooks_with_rllibs_attributes():
    seen = []

    class PerAgent(RLlibCallback):
        def on_episode_end(self, *, episode, metrics_logger, **kwargs):
            seen.append(episode)
            metrics_logger.log_value("ma_return", episode.get_return(), reduce="mean")

    algo = (
        small(
            PPOConfig()
            .environment(MultiAgentCartPole, env_config={"num_agents": 2})
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}")
        )
        .callbacks(PerAgent)
        .build_algo()
    )
    result = algo.train()
    assert seen and math.isclose(
        result["env_runners"]["ma_return"], float(np.mean([e.get_return() for e in seen]))
    )
    episode = seen[0]
    assert episode.module_for(0) == "p0" and episode.module_for(1) == "p1"
    assert len(episode) == len(episode.get_rewards()) and episode.is_done
    assert set(episode.get_observations(0)) == {0, 1}
    algo.stop()


def test_checkpoint_loaded_and_evaluate_hooks_are_called(tmp_path):
    called: list[str] = []

    class Hooks(RLlibCallback):
        def on_checkpoint_loaded(self, *, algorithm, **kwargs):
            called.append("loaded")

        def on_evaluate_start(self, *, algorithm, metrics_logger, **kwargs):
            called.append("eval_start")

        def on_evaluate_end(self, *, algorithm, metrics_logger, evaluation_metrics, **kwargs):
            called.append("eval_end")
            assert "env_runners" in evaluation_metrics

    algo = (
        small(PPOConfig().environment("CartPole-v1"))
        .callbacks(Hooks)
        .evaluation(evaluation_interval=1, evaluation_duration=2)
        .build_algo()
    )
    algo.train()
    algo.restore_from_path(algo.save_to_path(tmp_path / "ckpt"))
    assert called == ["eval_start", "eval_end", "loaded"]
    algo.stop()


def test_callbacks_setting_is_checked_and_round_trips_through_to_dict():
    with pytest.raises(TypeError, match="callbacks_class"):
        PPOConfig().callbacks(3)
    with pytest.raises(TypeError, match="on_episode_ennd"):
        PPOConfig().callbacks(on_episode_ennd=print)
    config = PPOConfig().callbacks(PoleAngle)
    assert config.callbacks_class is PoleAngle
    assert PPOConfig().callbacks(None).callbacks_class is RLlibCallback  # RLlib's default
    restored = PPOConfig.from_dict(config.to_dict(), trusted_modules=["tests"])
    assert restored.callbacks_class is PoleAngle
