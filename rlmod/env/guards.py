"""Guards of the EnvRunners: non-finite env data, Discrete / MultiDiscrete / MultiBinary
observations outside their space (rlmod.utils.space_checks, shared with the offline
reader), and sub-envs that raise.

Used by SingleAgentEnvRunner and MultiAgentEnvRunner. Checks run on whole step batches
(numpy over `[T, N, ...]` or `[N, ...]` arrays), never per sub-env in Python. Both data
checks share one setting, `on_non_finite_env_data`: raise an EnvError, or (single-agent)
end the episode as truncated.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from typing import SupportsFloat, cast

import gymnasium as gym
import numpy as np

from rlmod.core.types import Array, BoolArray
from rlmod.errors import EnvError


def _leaves(x: object, key: str) -> list[tuple[str, Array]]:
    """The float arrays of a (possibly nested dict/tuple) batch, with their key paths."""
    if isinstance(x, dict):
        return [leaf for k, v in x.items() for leaf in _leaves(v, f"{key}[{k!r}]")]
    if isinstance(x, tuple):
        return [leaf for i, v in enumerate(x) for leaf in _leaves(v, f"{key}[{i}]")]
    if isinstance(x, np.ndarray) and x.dtype.kind in "fc":
        return [(key, x)]
    return []


def non_finite_rows(x: object, num_rows: int, key: str) -> tuple[BoolArray, str] | None:
    """None if every float in `x` (leading axis: `num_rows` rows) is finite; else which
    rows are not, `[num_rows]` bool, and the key path of the first leaf where one is not.

    One `isfinite(...).all()` per float leaf: the fast path when all is well."""
    bad_key = None
    bad = None
    for path, arr in _leaves(x, key):
        if np.isfinite(arr).all():
            continue
        rows = ~np.isfinite(arr.reshape(num_rows, -1)).all(axis=1)
        bad = rows if bad is None else bad | rows
        bad_key = bad_key or path
    return None if bad is None or bad_key is None else (cast(BoolArray, bad), bad_key)


def bad_observation(space: gym.Space, value: object) -> str | None:
    """What is wrong with one agent's observation for `space` (shape, dtype, kind), or
    None; for error messages, on the slow path only."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, dict):
            return f"is a {type(value).__name__}, not a dict for {space}"
        for k, sub in space.spaces.items():
            problem = bad_observation(sub, value.get(k)) if k in value else "misses it"
            if problem is not None:
                return f"[{k!r}] {problem}"
        return None
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, tuple) or len(value) != len(space.spaces):
            return f"is a {type(value).__name__}, not a tuple of {len(space.spaces)} parts"
        for i, (sub, v) in enumerate(zip(space.spaces, value, strict=True)):
            problem = bad_observation(sub, v)
            if problem is not None:
                return f"[{i}] {problem}"
        return None
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary | gym.spaces.MultiDiscrete):
        if not isinstance(value, np.ndarray):
            return (
                f"is a {type(value).__name__}, not a numpy array of shape {space.shape} "
                f"and dtype {space.dtype}"
            )
        if value.shape != space.shape or value.dtype != space.dtype:
            return (
                f"has shape {value.shape} and dtype {value.dtype}, but the space "
                f"declares shape {space.shape} and dtype {space.dtype}"
            )
        return None
    if isinstance(space, gym.spaces.Discrete) and not _is_integer(value):
        return f"is a {type(value).__name__}, not an int for {space}"
    return None


def _is_integer(value: object) -> bool:
    """An int, a numpy integer, or a 0-d integer array (what gymnasium's Discrete accepts;
    PettingZoo's bundled envs, e.g. rps_v2, return those)."""
    if isinstance(value, np.ndarray):
        return value.shape == () and np.issubdtype(value.dtype, np.integer)
    return isinstance(value, int | np.integer)


def failing_sub_env(err: BaseException) -> int | None:
    """The index of the sub-env whose step()/reset() raised inside a gymnasium
    SyncVectorEnv, read from the traceback (its loop variable `i`); None if unknown.

    Costs nothing until an env raises, unlike a wrapper around every sub-env."""
    tb: types.TracebackType | None = err.__traceback__
    index = None
    while tb is not None:
        frame = tb.tb_frame
        if isinstance(frame.f_locals.get("self"), gym.vector.SyncVectorEnv):
            i = frame.f_locals.get("i")
            index = i if isinstance(i, int) else index
        tb = tb.tb_next
    return index


class SubEnvGuard(gym.Wrapper[object, object, object, object]):
    """Wraps one sub-env of a SyncVectorEnv so that an exception in it does not abort the
    vector env's step for all: the failure is recorded in `failures` (sub-env index,
    exception), the env is recreated with `make_env`, and the step returns a stand-in
    transition (the last observation, reward 0, truncated) that the EnvRunner drops with
    the rest of the unfinished episode. The vector env then resets the new env at its next
    step (next-step autoreset), as after any truncation.

    Used only with `restart_failed_sub_environments=True`; one Python call per sub-env
    step is its cost.
    """

    def __init__(
        self,
        env: gym.Env[object, object],
        *,
        index: int,
        make_env: Callable[[], gym.Env[object, object]],
        failures: list[tuple[int, BaseException]],
    ) -> None:
        super().__init__(env)
        self.index = index
        self._make_env = make_env
        self._failures = failures
        self._last_obs: object = None

    def step(self, action: object) -> tuple[object, SupportsFloat, bool, bool, dict[str, object]]:
        try:
            out = self.env.step(action)
        except Exception as err:  # noqa: BLE001 - any env error: restart and report
            self._restart(err)
            return self._stand_in_obs(), 0.0, False, True, {}
        self._last_obs = out[0]
        return out

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[object, dict[str, object]]:
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except Exception as err:  # noqa: BLE001 - a fresh env gets one more try
            self._restart(err)
            obs, info = self.env.reset(seed=seed, options=options)
        self._last_obs = obs
        return obs, info

    def _restart(self, err: BaseException) -> None:
        self._failures.append((self.index, err))
        with contextlib.suppress(Exception):  # a broken env may fail to close too
            self.env.close()
        self.env = self._make_env()

    def _stand_in_obs(self) -> object:
        if self._last_obs is not None:
            return self._last_obs
        return self.observation_space.sample()


def step_failed_error(
    env: object, e: int, episode_step: int, runner_step: int, err: BaseException
) -> EnvError:
    """The EnvError of a multi-agent sub-env whose `step()` raised (without restart mode):
    `episode_step` and `runner_step` count the failed step."""
    return EnvError(
        f"env={env!r} (env {e} of this EnvRunner) raised in step() at step {episode_step} "
        f"of its episode (step {runner_step} of this EnvRunner): {err!r}. This sample() "
        "call's rows are dropped (episodes finished earlier are kept in the metrics) and "
        "the next sample() starts every env afresh; "
        "config.fault_tolerance(restart_failed_sub_environments=True) recreates a failing "
        "env instead and goes on."
    )
