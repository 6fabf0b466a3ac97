"""ModuleSpaces (rlmod.env.module_spaces), built from a config and small multi-agent envs:
agents sharing space objects form one group, so a mapping is checked once per (module,
group); two agents with different spaces on one module are refused naming both; a module
no agent was mapped to at set-up adopts the spaces of the first agent mapped to it later
(refused if its module was built for other observations); a recreated env is grouped
anew; and `shared_obs_space` says whether every module has one Box space.

The MultiAgentEnvRunner using it (mappings that change per episode, thousands of agents)
is tested in tests/env/test_multi_agent_env_runner.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import MultiAgentEnv

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BIG = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
TWO = gym.spaces.Discrete(2)
AGENTS = ["a0", "a1", "b", "late"]


class _Env(MultiAgentEnv):
    """Agents a0, a1 and late share one space object pair; b has its own (equal) ones
    unless `b_space` says otherwise."""

    def __init__(self, b_space: gym.Space | None = None) -> None:
        super().__init__()
        self.possible_agents = list(AGENTS)
        shared = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        b = b_space if b_space is not None else gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.observation_spaces = {"a0": shared, "a1": shared, "b": b, "late": shared}
        act = gym.spaces.Discrete(2)
        self.action_spaces = {"a0": act, "a1": act, "b": gym.spaces.Discrete(2), "late": act}

    def reset(self, *, seed=None, options=None):  # never stepped here
        raise NotImplementedError

    def step(self, action_dict):
        raise NotImplementedError


def _mapping(agent_id, episode, **kwargs):
    """a* -> p0, b -> p1; "late" -> p2, but only after set-up (episode id_ -1)."""
    if agent_id == "late":
        return "p0" if episode.id_ == -1 else "p2"
    return "p0" if agent_id.startswith("a") else "p1"


def _spaces(*envs: _Env, policies=("p0", "p1", "p2")) -> tuple[ModuleSpaces, PPOConfig]:
    config = PPOConfig().multi_agent(policies=set(policies), policy_mapping_fn=_mapping)
    return ModuleSpaces(config, list(envs), list(AGENTS)), config


def _check(spaces: ModuleSpaces, e: int, env: _Env, agents: list[str], mids: list[str]) -> None:
    index = {m: i for i, m in enumerate(["p0", "p1", "p2"])}
    spaces.check_new_agents(
        e,
        env,
        agents,
        mids,
        np.array([index[m] for m in mids]),
        np.array([AGENTS.index(a) for a in agents]),
    )


def test_set_up_maps_each_module_to_its_first_agent_and_groups_shared_spaces():
    env = _Env()
    spaces, _ = _spaces(env)
    assert spaces.first_agent == {"p0": "a0", "p1": "b"}
    assert set(spaces.raw) == {"p0", "p1"}  # p2: no agent at set-up
    assert spaces._num_groups == [2]  # {a0, a1, late} and {b}
    assert spaces._groups[0].tolist() == [0, 0, 1, 0]
    assert spaces.env_to_module["p0"].observation_space == BOX


def test_each_module_and_group_pair_is_checked_once():
    env = _Env()
    spaces, _ = _spaces(env)
    _check(spaces, 0, env, ["a0", "a1", "b"], ["p0", "p0", "p1"])
    assert sorted(spaces._checked[0].tolist()) == [0 * 2 + 0, 1 * 2 + 1]
    # b on p0: b's space objects differ from a0's but are equal: accepted, remembered
    _check(spaces, 0, env, ["b"], ["p0"])
    assert len(spaces._equal) == 2  # the observation and the action space pairs


def test_two_agents_with_different_spaces_on_one_module_are_refused():
    env = _Env(b_space=BIG)
    spaces, _ = _spaces(env, policies=("p0", "p1", "p2"))
    with pytest.raises(
        ValueError,
        match=r"Agents 'a0' and 'b' are both mapped to module 'p0' but see different spaces",
    ):
        _check(spaces, 0, env, ["b"], ["p0"])


def test_a_module_without_agents_at_set_up_adopts_the_first_mapped_later():
    env = _Env()
    spaces, config = _spaces(env)
    module = config.get_multi_rl_module_spec(
        spaces={m: (BOX, TWO) for m in ("p0", "p1", "p2")}
    ).build()
    spaces.attach(module)
    _check(spaces, 0, env, ["late"], ["p2"])
    assert spaces.first_agent["p2"] == "late" and spaces.raw["p2"][0] == BOX
    assert spaces.shared_obs_space() == BOX  # every module: one Box


def test_a_late_agent_whose_observations_misfit_its_module_is_refused():
    env = _Env()
    spaces, config = _spaces(env)
    module = config.get_multi_rl_module_spec(
        spaces={"p0": (BOX, TWO), "p1": (BOX, TWO), "p2": (BIG, TWO)}
    ).build()
    spaces.attach(module)
    assert spaces.shared_obs_space() is None  # p2 has no raw space yet
    with pytest.raises(
        ValueError, match=r"mapped agent 'late' to module 'p2', built for observations Box"
    ):
        _check(spaces, 0, env, ["late"], ["p2"])


def test_a_recreated_env_is_grouped_anew():
    env = _Env()
    spaces, _ = _spaces(env, _Env())
    _check(spaces, 1, env, ["a0"], ["p0"])
    assert len(spaces._checked[1]) == 1
    spaces.replace_env(1, _Env(b_space=BIG))
    assert len(spaces._checked[1]) == 0 and spaces._num_groups[1] == 2
