"""Agent observations, stacked and checked, for both multi-agent EnvRunners:
`stack_observations` (per-agent values into one batch) and ObservationIntake (the
vectorized runner's per-step stacking; its checks name the agent, the reference runner
uses them too).

Stacking runs per env while the env's arrays are hot in the cache, then once per step over
all envs; checks run once per step on the stacked arrays (shape and dtype with
`check_agent_observations`; finiteness, and Discrete / MultiDiscrete / MultiBinary values
inside their space, always), and name the agent where one fails.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import chain
from typing import NamedTuple, NoReturn, cast

import gymnasium as gym
import numpy as np

from rlmod.core.types import Array, ArrayTree
from rlmod.env.guards import bad_observation, non_finite_rows
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import AgentID
from rlmod.errors import EnvError
from rlmod.utils.space_checks import out_of_space_rows, outside_space_problem


class AgentPlace(NamedTuple):
    """Where an agent's data came from, for error messages."""

    env: int
    agent: AgentID
    episode_step: int  # step of the env's current episode
    runner_step: int  # steps of all envs together in this EnvRunner
    obs_space: gym.Space  # the raw observation space of the agent's module


class ObservationIntake:
    """Stacks and checks agent observations; raises EnvErrors that name the agent.

    Args:
        env_name: The config's `env`, named in errors.
        spaces: The runner's ModuleSpaces (raw spaces per module).
        check_obs: `config.check_agent_observations`: shapes and dtypes checked.
        locate: Slot -> AgentPlace.
    """

    def __init__(
        self,
        *,
        env_name: object,
        spaces: ModuleSpaces,
        check_obs: bool,
        locate: Callable[[int], AgentPlace],
    ) -> None:
        self.env_name = env_name
        self.spaces = spaces
        self.check_obs = check_obs
        self.check_finite = True  # benchmarks/guard_overhead.py turns it off to compare
        self.check_in_space = True  # Discrete / MultiDiscrete / MultiBinary values; likewise
        self.locate = locate

    def chunk(self, values: Collection) -> Array | list:
        """One env's observations: stacked at once while they are hot in the cache (the
        env's arrays are then freed) where all modules share one Box space, else a list.

        Stacking here rather than in one join per step took the freeing of those arrays
        (5.5% of the runner's time at 64 envs of 1,000 agents, py-spy) off the step; the
        join itself (`join_box_values`) is ~6x faster than np.asarray on small arrays."""
        shared = self.spaces.shared_obs_space()
        stacked = None if shared is None else join_box_values(shared, values)
        return list(values) if stacked is None else stacked

    def stack_shared(self, slots: Array, chunks: list) -> Array | None:
        """Where all modules see one Box space (the common case), all observations of the
        step stacked (the chunks are stacked per env already) and checked; else None."""
        shared = self.spaces.shared_obs_space()
        filled = [c for c in chunks if len(c)]
        if shared is None or not filled:
            return None
        try:
            stacked = np.concatenate(
                [c if isinstance(c, np.ndarray) else stack_observations(shared, c) for c in filled]
            )
        except ValueError:  # ragged shapes: name the agent below
            stacked = None
        if stacked is None or (
            self.check_obs and (stacked.shape[1:] != shared.shape or stacked.dtype != shared.dtype)
        ):
            self.raise_bad_observation(
                slots,
                list(chain.from_iterable(c if isinstance(c, list) else list(c) for c in chunks)),
            )
        found = non_finite_rows(stacked, len(stacked), "obs") if self.check_finite else None
        if found is not None:
            self.raise_non_finite(slots[found[0]], found[1])
        return stacked

    def stack_checked(self, space: gym.Space, picked: Sequence[object], slots: Array) -> ArrayTree:
        """Observations of `space` (one module's, or one stack group's) stacked and checked,
        with the agent named where one does not fit."""
        try:
            raw = stack_observations(space, picked)
        except ValueError:
            self.raise_bad_observation(slots, list(picked), space)
        if (
            self.check_obs
            and isinstance(space, gym.spaces.Box)
            and (cast(Array, raw).shape[1:] != space.shape or cast(Array, raw).dtype != space.dtype)
        ):
            self.raise_bad_observation(slots, list(picked), space)
        found = non_finite_rows(raw, len(slots), "obs") if self.check_finite else None
        if found is not None:
            self.raise_non_finite(slots[found[0]], found[1])
        # Before the connectors one-hot them (-1 would encode as the last value).
        outside = out_of_space_rows(space, raw, len(slots), "obs") if self.check_in_space else None
        if outside is not None:
            self.raise_outside_space(space, raw, slots, outside[0])
        return raw

    def raise_outside_space(
        self, space: gym.Space, raw: ArrayTree, slots: Array, rows: Array
    ) -> NoReturn:
        """Names the first of `slots` whose observation (row of `raw`) has a Discrete /
        MultiDiscrete part outside `space`."""
        row = int(np.flatnonzero(rows)[0])
        place = self.locate(int(slots[row]))
        raise EnvError(
            f"env={self.env_name!r} returned an observation outside its observation space "
            f"for agent {place.agent!r} in env {place.env} at step {place.episode_step} of "
            f"its episode (step {place.runner_step} of this EnvRunner): "
            f"{outside_space_problem(space, raw, row, 'obs')}. Nothing of this sample() call "
            "reaches a Learner; fix the env or the agent's declared observation space "
            "(rlmod.env.env_checker.check_multi_agent_env finds such values)."
        )

    def raise_non_finite(self, slots: Array, key: str) -> NoReturn:
        """Names the first of `slots` (whose `key` is not finite)."""
        place = self.locate(int(slots[0]))
        raise EnvError(
            f"env={self.env_name!r} returned a non-finite (NaN or inf) {key} for agent "
            f"{place.agent!r} in env {place.env} at step {place.episode_step} of its episode "
            f"(step {place.runner_step} of this EnvRunner). Nothing of this sample() call "
            "reaches a Learner; fix the env (rlmod.env.env_checker.check_multi_agent_env "
            "finds such values)."
        )

    def raise_bad_observation(
        self, slots: Array, values: list, space: gym.Space | None = None
    ) -> NoReturn:
        """Names the first agent whose observation does not fit its module's space."""
        for slot, value in zip(slots.tolist(), values, strict=False):
            place = self.locate(slot)
            problem = bad_observation(space or place.obs_space, value)
            if problem is not None:
                raise EnvError(
                    f"env={self.env_name!r}: the observation of agent {place.agent!r} in env "
                    f"{place.env} at step {place.episode_step} of its episode {problem}. "
                    "Return numpy arrays of the declared shape and dtype (config.env_runners("
                    "check_agent_observations=False) skips this check)."
                )
        raise EnvError(
            f"env={self.env_name!r}: observations of this step do not stack "
            "into their spaces' shapes."
        )


def stack_observations(space: gym.Space, values: Sequence[object]) -> ArrayTree:
    """Stacks per-agent observations of `space` into a batch (Dict/Tuple: per part)."""
    if isinstance(space, gym.spaces.Dict):  # then each value is a dict ...
        return {
            k: stack_observations(s, [cast("Mapping[str, object]", v)[k] for v in values])
            for k, s in space.spaces.items()
        }
    if isinstance(space, gym.spaces.Tuple):  # ... or a tuple
        return tuple(
            stack_observations(s, [cast("tuple[object, ...]", v)[i] for v in values])
            for i, s in enumerate(space.spaces)
        )
    if isinstance(space, gym.spaces.Box):
        stacked = join_box_values(space, values)
        if stacked is not None:
            return stacked
    return np.asarray(values)


def join_box_values(space: gym.spaces.Box, values: Collection) -> Array | None:
    """Stacks arrays of `space`'s dtype and shape by joining their bytes (~6x faster than
    np.asarray on a list of small arrays); None where that does not apply.

    It needs C-contiguous arrays (TypeError otherwise) and trusts the first one's dtype for
    all (the byte count catches other item sizes).
    """
    if not values:
        return None
    first = next(iter(values))
    if not (
        isinstance(first, np.ndarray) and first.dtype == space.dtype and first.shape == space.shape
    ):
        return None
    try:
        buf = bytearray().join(values)
    except TypeError:
        return None
    if len(buf) != first.nbytes * len(values):
        return None
    return np.frombuffer(buf, space.dtype).reshape(len(values), *space.shape)
