"""Env creation (rlmod.env.registry): names registered with rlmod win over gymnasium IDs,
each env gets its own copy of env_config, creators that cannot take env_config are
refused with the fix, a typo gets a suggestion, and `make_vector_env` picks a native
vector env or a SyncVectorEnv in next-step autoreset mode (the probe env reused as
sub-env 0, `wrap` applied per sub-env), refusing envs that are not gymnasium Envs or lack
spaces.

Envs built through configs and EnvRunners are tested in
tests/env/test_single_agent_env_runner.py and tests/algorithms/test_bad_input.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.env import registry
from rlmod.env.registry import is_gym_id, make_env, make_vector_env, register_env


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", {})


class _Tiny(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config: dict | None = None) -> None:
        self.env_config = env_config

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_a_registered_name_wins_over_a_gymnasium_id_and_gets_a_copy_of_env_config():
    seen: list[dict] = []

    def creator(env_config: dict) -> _Tiny:
        seen.append(env_config)
        env_config["touched"] = True
        return _Tiny(env_config)

    assert is_gym_id("CartPole-v1")
    register_env("CartPole-v1", creator)
    assert not is_gym_id("CartPole-v1")
    config = {"size": 3}
    env = make_env("CartPole-v1", config)
    assert isinstance(env, _Tiny) and seen == [{"size": 3, "touched": True}]
    assert config == {"size": 3}  # the caller's dict is left alone
    assert make_env("CartPole-v1").env_config == {"touched": True}  # None -> {}


def test_gymnasium_ids_get_env_config_as_keyword_arguments():
    env = make_env("CartPole-v1", {"max_episode_steps": 7})
    assert env.spec.max_episode_steps == 7


@pytest.mark.parametrize(
    ("env", "error", "message"),
    [
        (None, ValueError, r"No env is set: call config.environment\(env=\.\.\.\)"),
        ("CartPol-v1", ValueError, r"neither registered .* nor a gymnasium ID.*CartPole-v1"),
        (42, TypeError, r"env=42 must be a gymnasium ID, a registered name or a callable"),
    ],
)
def test_what_is_not_an_env_is_named(env: object, error: type, message: str):
    with pytest.raises(error, match=message):
        make_env(env)


def test_register_env_checks_its_arguments():
    with pytest.raises(TypeError, match=r"register_env\(name: str, env_creator: callable"):
        register_env("x", "not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="register_env"):
        register_env(3, lambda cfg: _Tiny())  # type: ignore[arg-type]


class _NoConfig(_Tiny):
    def __init__(self) -> None:
        super().__init__(None)


def _no_param() -> _Tiny:
    return _Tiny()


def test_creators_without_env_config_are_refused_with_the_fix():
    with pytest.raises(
        TypeError, match=r"takes no such argument\. Give it one .*lambda env_config: _NoConfig\(\)"
    ):
        make_env(_NoConfig)
    with pytest.raises(TypeError, match=r"Give it that parameter: def make\(env_config\)"):
        make_env(_no_param)
    assert isinstance(make_env(_Tiny, {"a": 1}), _Tiny)
    assert make_env(lambda cfg, extra=0: _Tiny(cfg), {"a": 1}).env_config == {"a": 1}


def test_a_native_vector_env_for_two_or_more_cartpoles_else_a_sync_one():
    native = make_vector_env("CartPole-v1", None, 3)
    assert not isinstance(native, gym.vector.SyncVectorEnv) and native.num_envs == 3
    for vec in (
        make_vector_env("CartPole-v1", None, 1),
        make_vector_env("CartPole-v1", None, 2, per_sub_env=True),
    ):
        assert isinstance(vec, gym.vector.SyncVectorEnv)
        assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP


def test_the_probe_env_is_sub_env_0_and_wrap_sees_each_index():
    made: list[_Tiny] = []
    wrapped: list[int] = []

    def creator(env_config: dict) -> _Tiny:
        made.append(_Tiny(env_config))
        return made[-1]

    def wrap(env: gym.Env, i: int) -> gym.Env:
        wrapped.append(i)
        return gym.wrappers.TimeLimit(env, 5)

    register_env("tiny", creator)
    vec = make_vector_env("tiny", {"k": 1}, 3, wrap=wrap)
    assert len(made) == 3 and wrapped == [0, 1, 2]  # no extra env for the probe
    assert vec.envs[0].env is made[0]
    assert all(e.env_config == {"k": 1} for e in made)


def test_envs_that_are_not_gymnasium_envs_or_lack_spaces_are_refused():
    register_env("not_gym", lambda cfg: object())
    with pytest.raises(TypeError, match=r"made a object, not a gymnasium.Env\. For multi-agent"):
        make_vector_env("not_gym", None, 1)

    class NoSpace(_Tiny):
        observation_space = None

    register_env("no_space", lambda cfg: NoSpace())
    with pytest.raises(
        TypeError, match=r"whose observation_space is a NoneType, not a gymnasium Space; set self"
    ):
        make_vector_env("no_space", None, 2)
