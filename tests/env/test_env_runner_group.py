"""EnvRunnerGroup without Ray (rlmod/env/env_runner_group.py): the local path that remote
EnvRunners share; weight versions, connector-state merging, the runner's own RNG."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rlmod.connectors.env_to_module import MeanStdFilter, merge_env_to_module_states
from rlmod.env import EnvRunnerGroup, SingleAgentEnvRunner
from rlmod.env.env_runner import WEIGHTS_SEQ_NO


def test_foreach_env_runner_runs_on_the_local_runner(cartpole_config):
    group = EnvRunnerGroup(config=cartpole_config)
    assert group.foreach_env_runner(lambda r, k: (r.worker_index, k), kwargs={"k": 3}) == [(0, 3)]
    assert group.foreach_env_runner("get_spaces") == [group.local_env_runner.get_spaces()]
    assert group.foreach_env_runner(lambda r: 1, local_env_runner=False) == []
    assert group.num_healthy_env_runners() == 1 and group.num_remote_env_runners() == 0
    group.stop()


def test_a_runner_applies_only_weights_newer_than_its_own(cartpole_config):
    runner = SingleAgentEnvRunner(config=cartpole_config)
    weights = {
        mid: {k: v.copy() for k, v in w.items()}  # get_state gives views
        for mid, w in runner.get_state()["rl_module"].items()
    }
    zeros = {mid: {k: np.zeros_like(v) for k, v in w.items()} for mid, w in weights.items()}
    runner.set_state({"rl_module": zeros, WEIGHTS_SEQ_NO: 2})
    assert runner.weights_seq_no == 2
    runner.set_state({"rl_module": weights, WEIGHTS_SEQ_NO: 1})  # older: ignored
    held = runner.get_state()["rl_module"]["default_policy"]
    assert all((v == 0).all() for v in held.values())
    runner.set_state({"rl_module": weights})  # no version (a checkpoint): always applied
    held = runner.get_state()["rl_module"]["default_policy"]
    assert any((v != 0).any() for v in held.values())
    runner.stop()


def test_merged_mean_std_state_equals_statistics_of_all_observations():
    rng = np.random.default_rng(0)
    seen = [
        rng.normal(size=(50, 3)),
        rng.normal(2.0, 3.0, size=(70, 3)),
        rng.normal(-1.0, 0.5, size=(30, 3)),
    ]
    filters = []
    for x in seen[1:]:  # two runners, each with the shared base of seen[0]
        f = MeanStdFilter()
        f.set_input_spaces(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
        f(seen[0], episode_starts=np.zeros(50, bool))
        f.set_state(merge_env_to_module_states([f.get_state()]))  # seen[0] is now the base
        f(x, episode_starts=np.zeros(len(x), bool))
        filters.append(f)
    merged = merge_env_to_module_states([f.get_state() for f in filters])
    everything = np.concatenate(seen)
    assert merged["delta"]["n"] == 0 and merged["base"]["n"] == len(everything)
    np.testing.assert_allclose(merged["base"]["mean"], everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(
        merged["base"]["m2"] / len(everything), everything.var(0), rtol=1e-12
    )


def test_sampling_does_not_touch_the_process_rng(cartpole_config):
    """Action sampling draws from the runner's own torch RNG, so a run is the same whether
    the runner lives in this process or in a Ray actor."""
    runner = SingleAgentEnvRunner(config=cartpole_config)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = runner.sample(num_timesteps=32)["default_policy"]["actions"]
    assert torch.equal(torch.get_rng_state(), before)
    again = SingleAgentEnvRunner(config=cartpole_config)
    torch.manual_seed(999)  # another process state: same actions
    np.testing.assert_array_equal(again.sample(num_timesteps=32)["default_policy"]["actions"], a)
    runner.stop()
    again.stop()
