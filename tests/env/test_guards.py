"""EnvRunner guards (rlmod.env.guards) called directly: `non_finite_rows` over nested
batches (int leaves ignored, rows OR-ed, the first bad key named), `bad_observation`'s
words for each way one observation misfits its space, `failing_sub_env` read from a real
SyncVectorEnv's traceback, and SubEnvGuard's restart, stand-in transition and failure log.

The guards inside the EnvRunners (the settings, the truncation, the errors a user sees)
are tested in tests/env/test_env_runner_guards.py and
tests/env/test_observation_space_guard.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.env.guards import SubEnvGuard, bad_observation, failing_sub_env, non_finite_rows

Box, Discrete = gym.spaces.Box, gym.spaces.Discrete


def test_non_finite_rows_over_a_nested_batch():
    batch = {
        "pos": np.array([[0.0, 1.0], [np.nan, 0.0], [0.0, 0.0]]),
        "count": np.array([1, 2, 3]),  # ints are always finite
        "pair": (np.zeros(3, np.float32), np.array([0.0, 0.0, -np.inf])),
    }
    rows, key = non_finite_rows(batch, 3, "obs")
    assert rows.tolist() == [False, True, True]
    assert key == "obs['pos']"
    assert non_finite_rows({"count": np.array([1, 2])}, 2, "obs") is None
    assert non_finite_rows(np.array([1.0, np.inf]), 2, "rewards")[1] == "rewards"
    assert non_finite_rows([np.nan], 1, "x") is None  # lists are not looked into


@pytest.mark.parametrize(
    ("space", "value", "problem"),
    [
        (
            Box(0, 1, (2,)),
            [0.5, 0.5],
            "is a list, not a numpy array of shape (2,) and dtype float32",
        ),
        (
            Box(0, 1, (2,)),
            np.zeros(2, np.float64),
            "has shape (2,) and dtype float64, but the space declares shape (2,) and dtype float32",
        ),
        (gym.spaces.MultiBinary(3), np.zeros(2, np.int8), "has shape (2,) and dtype int8"),
        (Discrete(3), 1.0, "is a float, not an int for Discrete(3)"),
        (
            gym.spaces.Dict({"a": Discrete(2)}),
            [1],
            "is a list, not a dict for Dict('a': Discrete(2))",
        ),
        (gym.spaces.Dict({"a": Discrete(2), "b": Discrete(2)}), {"a": 1}, "['b'] misses it"),
        (gym.spaces.Dict({"a": Discrete(2)}), {"a": "x"}, "['a'] is a str, not an int"),
        (gym.spaces.Tuple([Discrete(2)] * 2), (1,), "is a tuple, not a tuple of 2 parts"),
        (gym.spaces.Tuple([Discrete(2), Box(0, 1, (1,))]), (1, 0.5), "[1] is a float, not a numpy"),
    ],
)
def test_bad_observation_says_what_misfits(space: gym.Space, value: object, problem: str):
    got = bad_observation(space, value)
    assert got is not None and got.startswith(problem)


def test_bad_observation_accepts_fitting_values_even_outside_bounds():
    assert bad_observation(Discrete(3), np.int64(7)) is None  # the range has its own check
    assert bad_observation(Box(0, 1, (2,)), np.full(2, 9.0, np.float32)) is None
    nested = gym.spaces.Dict({"a": gym.spaces.Tuple([Discrete(2)]), "b": Box(0, 1, (1,))})
    assert bad_observation(nested, {"a": (1,), "b": np.zeros(1, np.float32), "extra": 0}) is None


class _Flaky(gym.Env):
    """Counts its steps and raises on the `fail_at`-th step (or on every reset)."""

    observation_space = Box(-1.0, 1.0, (1,), np.float32)
    action_space = Discrete(2)

    def __init__(self, fail_at: int | None = None, fail_reset: bool = False) -> None:
        self.fail_at, self.fail_reset, self.t = fail_at, fail_reset, 0

    def reset(self, *, seed=None, options=None):
        if self.fail_reset:
            raise RuntimeError("reset broke")
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError(f"step {self.t} broke")
        return np.full(1, self.t / 10, np.float32), 1.0, False, False, {"t": self.t}


def test_failing_sub_env_is_read_from_the_vector_envs_traceback():
    envs = gym.vector.SyncVectorEnv([lambda: _Flaky(), lambda: _Flaky(), lambda: _Flaky(1)])
    envs.reset(seed=0)
    with pytest.raises(RuntimeError, match="step 1 broke") as info:
        envs.step(np.zeros(3, np.int64))
    assert failing_sub_env(info.value) == 2
    try:
        raise ValueError("outside any vector env")
    except ValueError as err:
        assert failing_sub_env(err) is None


def test_sub_env_guard_restarts_a_failed_step_and_stands_in_with_the_last_obs():
    failures: list[tuple[int, BaseException]] = []
    guard = SubEnvGuard(_Flaky(fail_at=2), index=3, make_env=lambda: _Flaky(), failures=failures)
    guard.reset()
    obs, *_ = guard.step(0)
    first_env = guard.env
    stand_in = guard.step(0)
    assert stand_in[0] is obs and stand_in[1:] == (0.0, False, True, {})  # truncated
    assert len(failures) == 1 and failures[0][0] == 3
    assert str(failures[0][1]) == "step 2 broke"
    assert guard.env is not first_env  # recreated
    guard.reset()
    assert guard.step(0)[4] == {"t": 1}  # the new env runs from its own start


def test_sub_env_guard_gives_a_failed_reset_one_more_try_on_a_fresh_env():
    failures: list[tuple[int, BaseException]] = []
    guard = SubEnvGuard(
        _Flaky(fail_reset=True), index=0, make_env=lambda: _Flaky(), failures=failures
    )
    obs, info = guard.reset(seed=1)
    assert obs.tolist() == [0.0] and [i for i, _ in failures] == [0]
    broken_again = SubEnvGuard(
        _Flaky(fail_reset=True),
        index=1,
        make_env=lambda: _Flaky(fail_reset=True),
        failures=failures,
    )
    with pytest.raises(RuntimeError, match="reset broke"):
        broken_again.reset()


def test_a_step_failing_before_any_observation_stands_in_with_a_sample():
    failures: list[tuple[int, BaseException]] = []
    guard = SubEnvGuard(_Flaky(fail_at=1), index=0, make_env=lambda: _Flaky(), failures=failures)
    obs, reward, terminated, truncated, _ = guard.step(0)  # no reset first
    assert guard.observation_space.contains(obs)
    assert (reward, terminated, truncated) == (0.0, False, True)
