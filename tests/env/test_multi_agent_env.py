"""Tests of the MultiAgentEnv base class and the ParallelPettingZooEnv adapter."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmod.env.env_checker import check_multi_agent_env
from rlmod.env.multi_agent_env import MultiAgentEnv
from rlmod.env.pettingzoo_env import ParallelPettingZooEnv

needs_pettingzoo = pytest.mark.skipif(
    importlib.util.find_spec("pettingzoo") is None, reason="pettingzoo is not installed"
)


class _TwoAgents(MultiAgentEnv):
    """A minimal subclass: two agents that are done after one step."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(3))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        self.agents = list(self.possible_agents)
        return dict.fromkeys(self.agents, 0), {}

    def step(self, action_dict: dict) -> tuple:
        done = dict.fromkeys(action_dict, True)
        self.agents = []
        return (
            dict.fromkeys(action_dict, 1),
            dict.fromkeys(action_dict, 0.0),
            {**done, "__all__": True},
            {**dict.fromkeys(action_dict, False), "__all__": False},
            {},
        )


class _Lifetimes:
    """A PettingZoo-style parallel env whose agents leave after fixed numbers of steps."""

    def __init__(self, lifetimes: dict[str, tuple[int, str]]) -> None:
        self.lifetimes = lifetimes
        self.possible_agents = list(lifetimes)
        self._space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)

    def observation_space(self, agent: str) -> gym.Space:
        return self._space

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        self.agents, self.t = list(self.possible_agents), 0
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple:
        self.t += 1
        ends = {a: self.lifetimes[a][0] == self.t for a in actions}
        term = {a: ends[a] and self.lifetimes[a][1] in ("term", "both") for a in actions}
        trunc = {a: ends[a] and self.lifetimes[a][1] in ("trunc", "both") for a in actions}
        obs = {a: np.full(1, self.t, np.float32) for a in actions}
        self.agents = [a for a in self.agents if not ends[a]]
        return obs, dict.fromkeys(actions, 1.0), term, trunc, {a: {} for a in actions}


# --- MultiAgentEnv --------------------------------------------------------------------------------


def test_base_class_is_abstract() -> None:
    with pytest.raises(TypeError, match="abstract"):
        MultiAgentEnv()  # type: ignore[abstract]


def test_space_getters_and_agent_counts() -> None:
    env = _TwoAgents()
    assert env.get_observation_space("a") == gym.spaces.Discrete(2)
    assert env.get_action_space("b") == gym.spaces.Discrete(3)
    assert (env.num_agents, env.max_num_agents) == (0, 2)
    env.reset()
    assert env.num_agents == 2
    env.close()  # the default close does nothing


def test_unknown_agent_space_names_agent_and_dict() -> None:
    env = _TwoAgents()
    with pytest.raises(KeyError, match=r"_TwoAgents.action_spaces has no entry for agent 'z'"):
        env.get_action_space("z")
    with pytest.raises(KeyError, match=r"observation_spaces.*\['a', 'b'\] \(2 in all\)"):
        env.get_observation_space("z")


# --- ParallelPettingZooEnv --------------------------------------------------------------------------


@pytest.fixture
def guessing_env_cls() -> type:
    """The TwoTeamGuessingEnv class (imported here: it needs pettingzoo)."""
    from rlmod.testing.pettingzoo_envs import TwoTeamGuessingEnv

    return TwoTeamGuessingEnv


@needs_pettingzoo
def test_adapter_reads_agents_and_spaces(guessing_env_cls: type) -> None:
    par_env = guessing_env_cls()
    env = ParallelPettingZooEnv(par_env)
    assert env.possible_agents == ["red_0", "red_1", "blue_0", "blue_1"]
    for aid in env.possible_agents:
        assert env.get_observation_space(aid) is par_env.observation_space(aid)
        assert env.get_action_space(aid) is par_env.action_space(aid)
    assert env.agents == []


@needs_pettingzoo
def test_adapter_passes_data_through_and_truncates_all_at_the_end(guessing_env_cls: type) -> None:
    env = ParallelPettingZooEnv(guessing_env_cls(max_cycles=3))
    obs, infos = env.reset(seed=0)
    assert set(obs) == set(infos) == set(env.agents) == set(env.possible_agents)
    for t in range(3):
        actions = {aid: int(o.argmax()) for aid, o in obs.items()}
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        assert rewards == dict.fromkeys(env.possible_agents, 1.5)
        assert truncateds["__all__"] is (t == 2)
        assert terminateds["__all__"] is False
    assert all(truncateds[aid] for aid in env.possible_agents)
    assert env.agents == []


@needs_pettingzoo
@pytest.mark.parametrize(
    ("last_end", "terminated_all", "truncated_all"),
    [("term", True, False), ("trunc", False, True), ("both", True, False)],
)
def test_adapter_all_flags_when_agents_leave_one_by_one(
    last_end: str, terminated_all: bool, truncated_all: bool
) -> None:
    env = ParallelPettingZooEnv(_Lifetimes({"a": (1, "term"), "b": (3, last_end)}))
    env.reset(seed=0)
    _, _, terminateds, truncateds, _ = env.step({"a": 0, "b": 0})
    assert terminateds == {"a": True, "b": False, "__all__": False}
    assert truncateds["__all__"] is False
    assert env.agents == ["b"]
    env.step({"b": 0})
    _, _, terminateds, truncateds, _ = env.step({"b": 1})
    assert terminateds["__all__"] is terminated_all
    assert truncateds["__all__"] is truncated_all
    assert env.agents == []


@needs_pettingzoo
def test_adapter_passes_the_env_checker(guessing_env_cls: type) -> None:
    check_multi_agent_env(ParallelPettingZooEnv(guessing_env_cls()), num_steps=60)
    lifetimes = {"a": (2, "term"), "b": (5, "trunc"), "c": (5, "term")}
    check_multi_agent_env(ParallelPettingZooEnv(_Lifetimes(lifetimes)), num_steps=20)


@needs_pettingzoo
def test_adapter_on_a_bundled_pettingzoo_env() -> None:
    try:
        from pettingzoo.classic import rps_v2
    except ImportError as e:  # bundled envs need extras such as pygame
        pytest.skip(f"no bundled PettingZoo env imports here: {e}")
    env = ParallelPettingZooEnv(rps_v2.parallel_env(max_cycles=5))
    check_multi_agent_env(env, num_steps=12)


@needs_pettingzoo
def test_adapter_rejects_aec_envs_and_non_envs(guessing_env_cls: type) -> None:
    from pettingzoo.utils.conversions import parallel_to_aec

    with pytest.raises(TypeError, match=r"AEC env.*aec_to_parallel\(env\)"):
        ParallelPettingZooEnv(parallel_to_aec(guessing_env_cls()))
    with pytest.raises(TypeError, match=r"needs a pettingzoo.ParallelEnv, but dict lacks"):
        ParallelPettingZooEnv({})


@needs_pettingzoo
def test_adapter_close_and_render_delegate(guessing_env_cls: type) -> None:
    class Recorder(guessing_env_cls):
        closed = False

        def close(self) -> None:
            self.closed = True

        def render(self) -> str:
            return "frame"

    par_env = Recorder()
    env = ParallelPettingZooEnv(par_env)
    assert env.render() == "frame"
    env.close()
    assert par_env.closed


def test_adapter_without_pettingzoo_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pettingzoo", None)
    with pytest.raises(ImportError, match=r"pip install 'rlmod\[pettingzoo\]'"):
        ParallelPettingZooEnv(object())
