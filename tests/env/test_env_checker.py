"""Tests of the env checker: good envs pass, each kind of broken env fails with a clear message."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.env.env_checker import check_env, check_multi_agent_env
from rlmod.env.multi_agent_env import MultiAgentEnv
from rlmod.testing import MultiAgentCartPole


class _ToyEnv(MultiAgentEnv):
    """Two agents with Box(-1, 1, (2,), float32) obs; `bug` breaks one thing on step 1."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.bug = bug
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {
            a: gym.spaces.Box(-1.0, 1.0, (2,), np.float32) for a in self.possible_agents
        }
        self.action_spaces = {a: gym.spaces.Discrete(3) for a in self.possible_agents}
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {}

    def step(self, action_dict: dict) -> tuple:
        for aid, action in action_dict.items():
            assert self.get_action_space(aid).contains(action)
        self.t += 1
        obs = {a: np.full(2, 0.5, np.float32) for a in action_dict}
        rewards = dict.fromkeys(action_dict, 1.0)
        terminateds = {**dict.fromkeys(action_dict, False), "__all__": False}
        truncateds = {**dict.fromkeys(action_dict, self.t == 3), "__all__": self.t == 3}
        infos: dict = {}
        if self.bug == "obs_outside":
            obs["b"] = np.array([0.5, 3.0], np.float32)
        elif self.bug == "obs_dtype":
            obs["a"] = np.zeros(2, np.float64)
        elif self.bug == "obs_shape":
            obs["a"] = np.zeros(3, np.float32)
        elif self.bug == "obs_not_array":
            obs["a"] = "up"
        elif self.bug == "no_all":
            del terminateds["__all__"]
        elif self.bug == "unknown_agent":
            obs["c"] = np.zeros(2, np.float32)
        elif self.bug == "unknown_agent_reward":
            rewards[7] = 1.0
        elif self.bug == "reward_str":
            rewards["a"] = "1.0"
        elif self.bug == "reward_nan":
            rewards["b"] = float("nan")
        elif self.bug == "flag_not_bool":
            truncateds["a"] = 0
        elif self.bug == "obs_not_dict":
            obs = [obs["a"], obs["b"]]
        elif self.bug == "four_tuple":
            return obs, rewards, terminateds, infos
        elif self.bug == "revive" and self.t == 2:
            terminateds["b"] = True  # "b" leaves, but is back on the next step
        elif self.bug == "revive" and self.t == 3:
            obs["b"] = np.zeros(2, np.float32)
        return obs, rewards, terminateds, truncateds, infos


def test_good_envs_pass() -> None:
    check_multi_agent_env(_ToyEnv(), num_steps=10)  # crosses two resets
    check_multi_agent_env(MultiAgentCartPole({"num_agents": 5}), num_steps=200)
    check_multi_agent_env(MultiAgentCartPole({"num_agents": 3, "max_episode_steps": 4}))


def test_checker_leaves_the_env_action_spaces_unseeded() -> None:
    env = MultiAgentCartPole({"num_agents": 2})
    state = env.get_action_space(0).np_random.bit_generator.state
    check_multi_agent_env(env, num_steps=5)
    assert env.get_action_space(0).np_random.bit_generator.state == state


@pytest.mark.parametrize(
    ("bug", "error", "match"),
    [
        (
            "obs_outside",
            ValueError,
            (
                r"_ToyEnv.step\(\) \(step 0 of the check\) returned obs\['b'\] = array of shape "
                r"\(2,\) and dtype float32, which is not in the observation space of agent 'b', "
                r"Box.*values outside \[low, high\], e.g. at index \(1,\): 3.0 not in \[-1.0, 1.0\]"
            ),
        ),
        (
            "obs_dtype",
            ValueError,
            (
                r"obs\['a'\] = array of shape \(2,\) and dtype float64.*dtype float64 != "
                r"declared dtype float32; cast the obs with .astype\(np.float32\)"
            ),
        ),
        (
            "obs_shape",
            ValueError,
            r"obs\['a'\] = array of shape \(3,\).*shape \(3,\) != declared shape \(2,\)",
        ),
        ("obs_not_array", ValueError, r"obs\['a'\] = str 'up'.*expected a numpy array"),
        (
            "no_all",
            ValueError,
            r"returned terminateds without the key '__all__'. Add terminateds\['__all__'\]",
        ),
        (
            "unknown_agent",
            ValueError,
            (
                r"returned obs\['c'\] for unknown agent 'c': it is not in possible_agents "
                r"\['a', 'b'\]"
            ),
        ),
        ("unknown_agent_reward", ValueError, r"rewards\[7\] for unknown agent 7"),
        ("reward_str", TypeError, r"rewards\['a'\] = str '1.0', but a reward must be a number"),
        ("reward_nan", ValueError, r"rewards\['b'\] = nan; rewards must be finite"),
        ("flag_not_bool", TypeError, r"truncateds\['a'\] = int 0; it must be a bool"),
        ("obs_not_dict", TypeError, r"returned obs as list of length 2; it must be a dict"),
        ("four_tuple", TypeError, r"must return a tuple \(obs, rewards, terminateds"),
        ("revive", ValueError, r"returned obs\['b'\], but agent 'b' was terminated or truncated"),
    ],
)
@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array:UserWarning")
def test_broken_env_fails_with_a_message_naming_the_problem(
    bug: str, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        check_multi_agent_env(_ToyEnv(bug), num_steps=10)


def test_bad_reset_and_spaces_are_reported() -> None:
    class BadReset(_ToyEnv):
        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
            obs, _ = super().reset(seed=seed)
            return obs

    with pytest.raises(TypeError, match=r"BadReset.reset\(\) must return a tuple \(obs, infos\)"):
        check_multi_agent_env(BadReset())

    env = _ToyEnv()
    env.possible_agents = ["a", "b", "x"]
    with pytest.raises(KeyError, match="observation_spaces has no entry for agent 'x'"):
        check_multi_agent_env(env)

    env = _ToyEnv()
    env.action_spaces["b"] = 3
    with pytest.raises(TypeError, match=r"action_spaces\['b'\] is int 3, not a gymnasium Space"):
        check_multi_agent_env(env)

    env = _ToyEnv()
    env.possible_agents = []
    with pytest.raises(ValueError, match="possible_agents is empty"):
        check_multi_agent_env(env)


def test_non_multi_agent_env_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="needs a rlmod MultiAgentEnv, got CartPoleEnv"):
        check_multi_agent_env(gym.make("CartPole-v1").unwrapped)


@pytest.mark.filterwarnings("ignore:.*Box observation space m:UserWarning")
def test_check_env_delegates_by_kind_of_env() -> None:
    check_env(gym.make("CartPole-v1"))
    check_env(MultiAgentCartPole())
    with pytest.raises(ValueError, match="unknown agent 'c'"):
        check_env(_ToyEnv("unknown_agent"))
    with pytest.raises(TypeError, match="needs a gymnasium.Env or a rlmod MultiAgentEnv"):
        check_env(object())


def test_check_env_turns_gymnasium_assertions_into_value_errors() -> None:
    class NoInfoReset(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> np.ndarray:
            super().reset(seed=seed)
            return np.zeros(2, np.float32)

    with pytest.raises(
        ValueError, match=r"NoInfoReset breaks the gymnasium Env API: .*\(obs, info\)"
    ):
        check_env(NoInfoReset())


# ---------------------------------------------------------------------- lists, bounds
class _OneAgent(MultiAgentEnv):
    """Agent "x" observes `value` at every step (zeros at reset)."""

    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value
        self.possible_agents = ["x"]
        self.observation_spaces = {"x": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"x": gym.spaces.Discrete(2)}

    def reset(self, *, seed=None, options=None):
        return {"x": np.zeros(2, np.float32)}, {}

    def step(self, action_dict):
        return ({"x": self.value}, {"x": 1.0}, {"__all__": False}, {"__all__": False}, {})


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        (
            [0.1, 0.1],
            r"obs\['x'\], which is a list, not a numpy array of shape \(2,\) and dtype "
            r"float32",
        ),
        (np.full(2, 0.1), r"dtype float64 != declared dtype float32"),
        (
            np.full(2, 100.0, np.float32),
            r"values outside \[low, high\], e.g. at index \(0,\): "
            r"100.0 not in \[-1.0, 1.0\]",
        ),
    ],
)
@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array")
def test_lists_other_dtypes_and_out_of_bound_observations_are_caught(value, phrase):
    with pytest.raises(ValueError, match=phrase):
        check_multi_agent_env(_OneAgent(value), num_steps=3)
