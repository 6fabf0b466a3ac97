"""Tests of ModuleGroups (rlmod/env/module_groups.py) in MultiAgentEnvRunner: stacked
execution groups give the rows unstacked modules give.

Same config and seed, stacking on and off: the same weights, so the same rows (actions,
log-probs, observations, rewards, flags) — with all modules in one stack group, and with
mixed groups (two stack groups of different architectures beside a module run alone) on
an env where agents come and go (not every agent acts every step; some leave with and
some without a final observation). One forward pass per execution group per step.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import MultiRLModuleSpec, RLModuleSpec
from rlmod.core.columns import Columns
from rlmod.env import MultiAgentEnv, MultiAgentEnvRunner
from rlmod.env.multi_agent_env import ALL_AGENTS
from rlmod.testing import MultiAgentCartPole

pytestmark = pytest.mark.fast_path  # rlmod/fast_paths.py

OBS = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)


class FlickerEnv(MultiAgentEnv):
    """Seven agents that come and go: each step a random subset of the live agents observes
    (and acts next), every live agent is rewarded, an agent terminates with probability
    0.08 (half of them with a final observation), and "__all__" truncates at t=25."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.possible_agents = list(range(7))
        self.observation_spaces = dict.fromkeys(self.possible_agents, OBS)
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.rng = np.random.default_rng(0)

    def _obs(self, agents) -> dict:
        return {a: self.rng.normal(size=3).astype(np.float32) for a in sorted(agents)}

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.live = set(self.possible_agents)
        self.acting = {a for a in self.live if self.rng.random() < 0.6} or {0}
        return self._obs(self.acting), {}

    def step(self, action_dict):
        assert set(action_dict) == self.acting, (sorted(action_dict), sorted(self.acting))
        self.t += 1
        rewards = {a: float(action_dict.get(a, 0)) + 0.1 * a for a in sorted(self.live)}
        done = {a for a in sorted(self.live) if self.rng.random() < 0.08}
        final = {a for a in sorted(done) if self.rng.random() < 0.5}
        self.live -= done
        observers = {a for a in sorted(self.live) if self.rng.random() < 0.6} | final
        terminateds = {a: True for a in sorted(done)}
        terminateds[ALL_AGENTS] = not self.live
        truncateds = {ALL_AGENTS: self.t >= 25}
        self.acting = observers - done
        return self._obs(observers), rewards, terminateds, truncateds, {}


def _config(env, num_agents: int, specs: dict | None, *, stack: bool) -> PPOConfig:
    config = (
        PPOConfig()
        .environment(env, env_config={"num_agents": num_agents})
        .env_runners(num_envs_per_env_runner=3)
        .multi_agent(
            policies={f"p{i}" for i in range(num_agents)},
            policy_mapping_fn=lambda aid, episode: f"p{aid}",
            stack_modules=stack,
        )
        .rl_module(model_config={"fcnet_hiddens": [16, 16]})
        .debugging(seed=3)
    )
    if specs:
        config = config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
    return config


def _sample_both(
    env, num_agents: int, specs: dict | None, *, explore: bool, calls: int = 3
) -> tuple[MultiAgentEnvRunner, list[dict], list[dict]]:
    runners = [
        MultiAgentEnvRunner(config=_config(env, num_agents, specs, stack=stack))
        for stack in (True, False)
    ]
    for mid in runners[0].module_ids:  # same seed, same weights
        for a, b in zip(
            runners[0].module[mid].parameters(), runners[1].module[mid].parameters(), strict=True
        ):
            assert torch.equal(a, b)
    batches: list[list[dict]] = [[], []]
    for runner, out in zip(runners, batches, strict=True):
        for _ in range(calls):
            out.append(runner.sample(num_timesteps=3 * 20, explore=explore))
    return runners[0], batches[0], batches[1]


def _assert_same_rows(stacked: list[dict], unstacked: list[dict]) -> None:
    for a, b in zip(stacked, unstacked, strict=True):
        assert sorted(a) == sorted(b)
        for mid in a:
            assert sorted(a[mid]) == sorted(b[mid])
            for col in a[mid]:
                if col in (Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS):
                    np.testing.assert_allclose(
                        a[mid][col], b[mid][col], rtol=1e-5, atol=1e-6, err_msg=f"{mid} {col}"
                    )
                else:
                    np.testing.assert_array_equal(a[mid][col], b[mid][col], err_msg=f"{mid} {col}")


@pytest.mark.parametrize("explore", [True, False])
def test_one_stack_group_samples_what_unstacked_modules_sample(explore: bool) -> None:
    """Six modules of one architecture: one stack group; same seed, same actions (the
    group's rows sample in module order, as the modules would one after another)."""
    stacked, a, b = _sample_both(MultiAgentCartPole, 6, None, explore=explore)
    assert len(stacked._groups.groups) == 1 and stacked._groups.num_stacked == 6
    _assert_same_rows(a, b)
    assert sum(len(batch[Columns.OBS]) for batch in a[-1].values()) > 0


@pytest.mark.parametrize("explore", [True, False])
def test_mixed_groups_with_agents_that_come_and_go(explore: bool) -> None:
    """p0-p2 stack into one group, p3-p5 (another architecture) into another, p6 (a third)
    runs alone; agents act in some steps only and leave with or without a final obs."""
    eight = RLModuleSpec(model_config={"fcnet_hiddens": [8]})
    specs = {"p3": eight, "p4": eight, "p5": eight}
    specs["p6"] = RLModuleSpec(model_config={"fcnet_hiddens": [4]})
    stacked, a, b = _sample_both(FlickerEnv, 7, specs, explore=explore)
    groups = sorted(
        ([stacked.module_ids[m] for m in g.modules.tolist()], g.stacked is not None)
        for g in stacked._groups.groups
    )
    assert groups == [(["p0", "p1", "p2"], True), (["p3", "p4", "p5"], True), (["p6"], False)]
    _assert_same_rows(a, b)
    for batches in a:  # rows of every module came in (agents come and go: not all rows)
        assert set(batches) == {f"p{i}" for i in range(7)}


def test_one_forward_pass_per_execution_group_per_step() -> None:
    eight = RLModuleSpec(model_config={"fcnet_hiddens": [8]})
    specs = {"p3": eight, "p4": eight, "p5": eight}
    runner = MultiAgentEnvRunner(config=_config(MultiAgentCartPole, 6, specs, stack=True))
    runner.make_module()  # the modules are built on first need
    calls: list[tuple[int, int]] = []
    for g, group in enumerate(runner._groups.groups):
        assert group.stacked is not None
        original = group.stacked.forward_exploration

        def counting(obs, index, g=g, original=original):
            calls.append((g, len(index)))
            return original(obs, index)

        group.stacked.forward_exploration = counting
    runner.sample(num_timesteps=3 * 30)
    per_group = [sum(1 for g, _ in calls if g == k) for k in range(2)]
    assert 20 <= per_group[0] <= 30 and 20 <= per_group[1] <= 30  # one per step at most
    assert max(n for _, n in calls) > 3  # rows of several modules and envs in one pass


def test_weights_of_whole_stack_groups_load_in_one_copy_per_parameter() -> None:
    """set_state writes a whole group's weights into its stacked storage (the per-module
    path gets nothing); every module then holds exactly its own weights; a state that does
    not fit still raises set_state's error, naming the tensor."""
    runner = MultiAgentEnvRunner(config=_config(MultiAgentCartPole, 4, None, stack=True))
    rng = np.random.default_rng(0)
    state = runner.get_state()["rl_module"]
    new = {
        mid: {k: rng.normal(size=v.shape).astype(v.dtype) for k, v in s.items()}
        for mid, s in state.items()
    }
    per_module: list = []
    original = runner.module.set_state
    runner.module.set_state = lambda weights: (per_module.append(dict(weights)), original(weights))[
        1
    ]
    runner.set_state({"rl_module": new})
    assert per_module == [{}]  # all four through the stacked path
    for mid, s in runner.get_state()["rl_module"].items():
        for k, v in s.items():
            np.testing.assert_array_equal(v, new[mid][k])
    bad = {mid: dict(s) for mid, s in new.items()}
    name = next(iter(bad["p0"]))
    bad["p0"][name] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match=f"State does not fit.*{name}"):
        runner.set_state({"rl_module": bad})


def test_whole_group_weights_of_another_dtype_load_cast_as_set_state_casts() -> None:
    """float64 weights (e.g. a state saved by hand) go into the float32 stacked storage,
    cast as `Tensor.copy_` casts."""
    runner = MultiAgentEnvRunner(config=_config(MultiAgentCartPole, 4, None, stack=True))
    rng = np.random.default_rng(1)
    state = runner.get_state()["rl_module"]
    new = {mid: {k: rng.normal(size=v.shape) for k, v in s.items()} for mid, s in state.items()}
    runner.set_state({"rl_module": new})
    for mid, s in runner.get_state()["rl_module"].items():
        for k, v in s.items():
            assert v.dtype == np.float32
            np.testing.assert_array_equal(v, new[mid][k].astype(np.float32))


def test_whole_group_weights_that_are_rows_of_the_group_itself_load_unchanged() -> None:
    """`set_state` with the runner's own stacked rows, permuted (views of the storage it
    writes into), gives each module the row it was handed, not a half-overwritten one."""
    runner = MultiAgentEnvRunner(config=_config(MultiAgentCartPole, 4, None, stack=True))
    runner.sample()
    before = {
        m: {k: np.array(v) for k, v in s.items()}
        for m, s in runner.get_state()["rl_module"].items()
    }
    order = list(before)
    assert len(order) == 4 and runner._groups.num_stacked == 4  # one stacked group
    live = {
        mid: {k: t.detach().numpy() for k, t in runner.module[mid].get_state().items()}
        for mid in order
    }
    swapped = {mid: live[order[(i + 1) % 4]] for i, mid in enumerate(order)}
    runner.set_state({"rl_module": swapped})
    after = runner.get_state()["rl_module"]
    for i, mid in enumerate(order):
        for k, v in after[mid].items():
            np.testing.assert_array_equal(v, before[order[(i + 1) % 4]][k])
