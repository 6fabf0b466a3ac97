"""Remote EnvRunners on a local Ray cluster (rlmod/env/env_runner_group.py,
rlmod/utils/ray_utils.py): the same classes as actors, same episodes as in-process,
spaces from a remote runner, weights and connector states synced, failures survived.

One Ray session (2 CPUs) per module; each test stops what it builds.
"""

from __future__ import annotations

import os
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.ppo import PPO, PPOConfig
from rlmod.connectors.env_to_module import MeanStdFilter
from rlmod.env import EnvRunnerGroup, SingleAgentEnvRunner
from rlmod.errors import EnvRunnerError
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import TUNED

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def ray_session(ray_local):
    """The shared local Ray cluster (conftest.py), able to unpickle this module's env
    factories, which Ray's workers cannot import."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield


def small(**env_runners) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=4, **env_runners)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=2)
        .debugging(seed=0)
    )


def multi_agent(**env_runners) -> PPOConfig:
    return (
        small(**env_runners)
        .environment(MultiAgentCartPole, env_config={"num_agents": 3})
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
    )


def learner_weights(algo) -> dict[str, torch.Tensor]:
    return {
        f"{mid}/{k}": v
        for mid, sd in algo.learner_group.get_weights().items()
        for k, v in sd.items()
    }


# ---------------------------------------------------------------------- same results
@pytest.mark.parametrize("make_config", [small, multi_agent], ids=["single", "multi"])
def test_one_remote_env_runner_gives_the_local_runs_episodes_and_weights(make_config):
    runs = []
    for num_env_runners in (0, 1):
        algo = make_config(num_env_runners=num_env_runners).build_algo()
        results = [algo.train() for _ in range(2)]
        runs.append(
            (
                [r["env_runners"]["episode_return_mean"] for r in results],
                [r["env_runners"]["num_env_steps_sampled"] for r in results],
                learner_weights(algo),
            )
        )
        algo.stop()
    (returns0, steps0, weights0), (returns1, steps1, weights1) = runs
    assert returns0 == returns1 and steps0 == steps1
    assert weights0.keys() == weights1.keys()
    for k in weights0:  # exactly equal: same seeds, same batches, same order of updates
        np.testing.assert_array_equal(weights0[k], weights1[k], err_msg=k)


def test_a_remote_runners_rewards_are_clipped_on_arrival_and_its_returns_stay_raw():
    """clip_rewards on batches that arrive read-only from an actor; CartPole's rewards
    are 1, so an episode's return is its length."""
    group = EnvRunnerGroup(config=small(num_env_runners=1).environment(clip_rewards=0.5))
    (result,) = group.sample(num_episodes=2)
    np.testing.assert_array_equal(result["default_policy"]["rewards"], 0.5)
    (metrics,) = group.get_metrics()
    assert metrics["episode_returns"] == [float(n) for n in metrics["episode_lens"]]
    group.stop()


def test_two_remote_runners_sample_in_parallel_with_their_own_seeds():
    group = EnvRunnerGroup(config=small(num_env_runners=2))
    assert group.local_env_runner is None  # create_env_on_local_worker=False by default
    assert group.foreach_env_runner(lambda r: r.worker_index) == [1, 2]
    batches = group.sample(num_timesteps=40)
    assert len(batches) == 2
    obs = [b["default_policy"]["obs"] for b in batches]
    assert all(len(o) >= 40 for o in obs) and not np.array_equal(obs[0][:40], obs[1][:40])
    metrics = group.get_metrics()
    assert [m["num_env_steps"] for m in metrics] == [len(o) for o in obs]
    group.stop()


def test_foreach_env_runner_with_and_without_the_local_one():
    group = EnvRunnerGroup(config=small(num_env_runners=2, create_env_on_local_worker=True))
    assert group.foreach_env_runner("get_spaces")[0] == group.local_env_runner.get_spaces()
    assert group.foreach_env_runner(lambda r, k: r.worker_index * k, kwargs={"k": 10}) == [
        0,
        10,
        20,
    ]
    assert group.foreach_env_runner(lambda r: r.worker_index, local_env_runner=False) == [1, 2]
    assert group.foreach_env_runner(
        lambda r: r.worker_index, local_env_runner=False, remote_worker_ids=[2]
    ) == [2]
    assert group.num_healthy_env_runners() == 3 and group.num_remote_env_runners() == 2
    group.stop()


# ---------------------------------------------------------------------- spaces
def refuse_in_driver(env_config):
    """An env that cannot be built in the driver process (whose pid is in env_config)."""
    if os.getpid() == env_config["driver_pid"]:
        raise RuntimeError("the driver built an env")
    return gym.make("CartPole-v1")


def test_get_spaces_comes_from_a_remote_runner_when_the_driver_has_no_env():
    config = small(num_env_runners=1).environment(
        refuse_in_driver, env_config={"driver_pid": os.getpid()}
    )
    algo = config.build_algo()  # builds no env here, or refuse_in_driver raises
    assert algo.env_runner is None
    spaces = algo.env_runner_group.get_spaces()
    expected = SingleAgentEnvRunner(config=small()).get_spaces()
    assert spaces == expected
    assert (
        algo.learner_group.learner.module["default_policy"].observation_space
        == (expected["default_policy"][0])
    )
    algo.train()
    algo.stop()


# ---------------------------------------------------------------------- state sync
def test_sync_weights_sends_one_version_that_every_runner_applies():
    algo = small(num_env_runners=2).build_algo()
    algo.train()
    group = algo.env_runner_group
    seq = group.foreach_env_runner(lambda r: r.weights_seq_no)
    assert seq == [group._weights_seq_no] * 2 and seq[0] == 2  # set-up, then one train()
    learner = algo.learner_group.get_weights(inference_only=True)["default_policy"]
    for held in group.foreach_env_runner(
        lambda r: {k: v.numpy() for k, v in r.module.get_state(inference_only=True).items()}
    ):
        assert held.keys() == learner.keys()
        for k in held:
            np.testing.assert_array_equal(held[k], learner[k])
    algo.stop()


def mean_std_filter(env, *args):
    return MeanStdFilter()


def test_mean_std_filter_states_are_merged_across_runners_and_broadcast(tmp_path):
    config = small(num_env_runners=2).env_runners(env_to_module_connector=mean_std_filter)
    algo = config.build_algo()
    algo.train()
    states = algo.env_runner_group.foreach_env_runner(
        lambda r: r.get_state(not_components="rl_module")["env_to_module"]["0:MeanStdFilter"]
    )
    assert len(states) == 2
    for key in ("n", "mean", "m2"):
        np.testing.assert_array_equal(states[0]["base"][key], states[1]["base"][key])
    assert states[0]["delta"]["n"] == 0
    # Both runners' observations are in the base: more than either one saw (>= 128 each).
    assert states[0]["base"]["n"] >= 256
    # The driver has no EnvRunner: checkpoints take the merged state from a remote one.
    path = algo.save_to_path(tmp_path / "checkpoint")
    algo.stop()
    local = PPO.from_checkpoint(path, num_env_runners=0, env_to_module_connector=mean_std_filter)
    restored = local.env_runner.get_state()["env_to_module"]["0:MeanStdFilter"]
    np.testing.assert_array_equal(restored["base"]["mean"], states[0]["base"]["mean"])
    local.stop()


# ---------------------------------------------------------------------- fault tolerance
def test_a_killed_runner_is_restarted_with_the_current_weights_and_counted():
    algo = small(num_env_runners=2).build_algo()
    algo.train()
    group = algo.env_runner_group
    ray.kill(group._actors[1])
    result = algo.train()  # runner 1's sample is lost; runner 2's reaches the Learner
    assert result["env_runners"]["num_env_runner_restarts"] == 1
    assert result["env_runners"]["num_healthy_env_runners"] == 2
    assert 128 <= result["env_runners"]["num_env_steps_sampled"] < 200  # one runner's
    result = algo.train()
    assert result["env_runners"]["num_env_steps_sampled"] >= 256
    assert group.foreach_env_runner(lambda r: r.weights_seq_no) == [4, 4]
    algo.stop()


class FailOnceAtStep(gym.Wrapper):
    """CartPole whose `step` raises (or, with `hang_s`, sleeps that long) at step `at` of
    one sub-env, once over all processes (the first to create `marker` fails; a restarted
    runner or sub-env then steps normally)."""

    def __init__(self, env_config):
        super().__init__(gym.make("CartPole-v1"))
        self.at, self.marker, self.num_steps = env_config["at"], env_config["marker"], 0
        self.hang_s = env_config.get("hang_s")

    def step(self, action):
        self.num_steps += 1
        if self.num_steps == self.at:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                if self.hang_s:
                    time.sleep(self.hang_s)
                else:
                    raise RuntimeError(f"env failed at step {self.at}")
        return self.env.step(action)


def failing(tmp_path, hang_s=None, **fault_tolerance) -> PPOConfig:
    return (
        small(num_env_runners=2)
        .environment(
            FailOnceAtStep, env_config={"at": 20, "marker": str(tmp_path / "m"), "hang_s": hang_s}
        )
        .fault_tolerance(**fault_tolerance)
    )


def test_a_raising_sub_env_is_recreated_in_place_without_restarting_its_runner(tmp_path):
    algo = failing(tmp_path, restart_failed_sub_environments=True).build_algo()
    result = algo.train()["env_runners"]
    assert result["num_sub_env_restarts"] == 1 and result["num_env_runner_restarts"] == 0
    # Both runners' batches arrived (less the failed sub-env's dropped episode).
    assert result["num_env_steps_sampled"] > 200 and result["num_healthy_env_runners"] == 2
    algo.stop()


def test_a_runner_slower_than_sample_timeout_s_is_restarted(tmp_path):
    algo = failing(tmp_path, hang_s=30).env_runners(sample_timeout_s=2).build_algo()
    start = time.perf_counter()
    result = algo.train()["env_runners"]
    assert time.perf_counter() - start < 20  # did not wait for the hanging runner
    assert result["num_env_runner_restarts"] == 1 and result["num_healthy_env_runners"] == 2
    algo.stop()


def test_an_env_that_raises_is_survived_by_restarting_its_runner(tmp_path):
    algo = failing(tmp_path).build_algo()
    result = algo.train()
    assert result["env_runners"]["num_env_runner_restarts"] == 1
    assert result["env_runners"]["num_healthy_env_runners"] == 2
    # The failed runner's fragment is dropped whole: the batch is the other runner's.
    assert 128 <= result["env_runners"]["num_env_steps_sampled"] < 200
    assert algo.train()["env_runners"]["num_env_steps_sampled"] >= 256
    algo.stop()


def test_ignore_env_runner_failures_goes_on_with_the_healthy_ones(tmp_path):
    algo = failing(
        tmp_path, restart_failed_env_runners=False, ignore_env_runner_failures=True
    ).build_algo()
    result = algo.train()
    assert result["env_runners"]["num_healthy_env_runners"] == 1
    assert result["env_runners"]["num_env_runner_restarts"] == 0
    assert 128 <= algo.train()["env_runners"]["num_env_steps_sampled"] < 200
    algo.stop()


def test_with_restart_and_ignore_off_the_error_names_the_runner_and_the_cause(tmp_path):
    algo = failing(tmp_path, restart_failed_env_runners=False).build_algo()
    with pytest.raises(
        EnvRunnerError,
        match=r"Remote EnvRunner [12] \(worker_index=[12]\) "
        r"failed in sample\(\): EnvError\(.*env failed at step 20",
    ) as info:
        algo.train()
    assert "restart_failed_env_runners=True" in str(info.value)
    algo.stop()


# ---------------------------------------------------------------------- off-policy
def test_dqn_fills_its_replay_buffer_from_two_remote_runners_one_window_each():
    algo = (
        DQNConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2, rollout_fragment_length=4)
        .training(num_steps_sampled_before_learning_starts=16, train_batch_size=8, n_step=3)
        .debugging(seed=0)
    ).build_algo()
    for _ in range(6):
        result = algo.train()
    assert algo.env_runner_group.last_sampled_worker_indices == [1, 2]
    assert {source for _, source in algo.replay_buffer._collectors} == {1, 2}
    assert result["learners"]["default_policy"]["num_module_steps_trained"] > 0
    algo.stop()


# ---------------------------------------------------------------------- learning
@pytest.mark.slow
def test_ppo_with_two_remote_runners_learns_cartpole_through_a_killed_runner():
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .update_from_dict(TUNED["CartPole-v1"])
        .env_runners(num_env_runners=2, num_envs_per_env_runner=8)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    first = algo.train()["env_runners"]["episode_return_mean"]
    best = first
    for i in range(39):  # up to 40 x 1,024 env steps (TUNED's batch, 8 epochs)
        if i == 3:
            ray.kill(algo.env_runner_group._actors[2])
        result = algo.train()
        best = max(best, result["env_runners"]["episode_return_mean"])
        if best >= 150:
            break
    assert result["env_runners"]["num_env_runner_restarts"] == 1
    assert best >= 150 > first
    algo.stop()
