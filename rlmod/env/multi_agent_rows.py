"""The pieces MultiAgentEnvRunner builds on: the episode handle its mapping function
receives, the per-module row store of one `sample()` call, and fast readers of the dicts
a MultiAgentEnv returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.env.multi_agent_env import ALL_AGENTS


@dataclasses.dataclass(frozen=True)
class EpisodeInfo:
    """What `policy_mapping_fn(agent_id, episode)` receives as `episode`.

    The mapping function is called once per agent per episode, when the agent first
    appears; EnvRunners cache its answer for the rest of the episode. (When the config
    infers module spaces from an env, it calls the function with `episode=None`.)

    Attributes:
        id_: The env episode's ID, unique within one EnvRunner.
        env_index: Which of the EnvRunner's envs plays the episode.
        worker_index: The EnvRunner's index (0: the local one).
    """

    id_: int
    env_index: int
    worker_index: int


class ModuleRows:
    """One module's rows of the current `sample()` call and the observations they index.

    `obs` holds module-space observations (what the module acted on, plus final
    observations); rows refer to them by index (`obs_idx`), closings by `new_obs_idx`.
    """

    def __init__(self) -> None:
        self.obs: list[np.ndarray] = []
        self.num_obs = 0
        self.rows: dict[str, list[np.ndarray]] = {}
        self.num_rows = 0

    def add_obs(self, obs: np.ndarray) -> int:
        base = self.num_obs
        self.obs.append(obs)
        self.num_obs += len(obs)
        return base

    def add_rows(self, **cols: np.ndarray) -> np.ndarray:
        k = len(cols["slot"])
        for key, value in cols.items():
            self.rows.setdefault(key, []).append(value)
        ids = np.arange(self.num_rows, self.num_rows + k)
        self.num_rows += k
        return ids

    def concat_rows(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) for k, v in self.rows.items()}


def read_flags(flags: dict, keys: tuple) -> tuple[np.ndarray, bool, tuple]:
    """Per-agent flags for `keys` (False where missing), the "__all__" flag, and the
    agents flagged True that are not in `keys`."""
    n = len(keys)
    if not any(flags.values()):  # nobody done (truncateds: almost always): no order check
        return np.zeros(n, bool), False, ()
    flag_all = bool(flags.get(ALL_AGENTS, False))
    if len(flags) == n + 1:
        fkeys = tuple(flags)
        if fkeys[-1] == ALL_AGENTS and fkeys[:n] == keys:  # the env's usual layout
            return np.fromiter(flags.values(), bool, n), flag_all, ()
    per_agent = np.fromiter((bool(flags.get(a, False)) for a in keys), bool, n)
    key_set = set(keys)
    extra = tuple(a for a, v in flags.items() if v and a != ALL_AGENTS and a not in key_set)
    return per_agent, flag_all, extra


def stack_observations(space: gym.Space, values: Any) -> Any:
    """Stacks per-agent observations of `space` into a batch (Dict/Tuple: per part)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: stack_observations(s, [v[k] for v in values])
                for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(stack_observations(s, [v[i] for v in values])
                     for i, s in enumerate(space.spaces))
    if isinstance(space, gym.spaces.Box):
        stacked = join_box_values(space, values)
        if stacked is not None:
            return stacked
    return np.asarray(values)


def join_box_values(space: gym.spaces.Box, values: Collection) -> np.ndarray | None:
    """Stacks arrays of `space`'s dtype and shape by joining their bytes (~6x faster than
    np.asarray on a list of small arrays); None where that does not apply.

    It needs C-contiguous arrays (TypeError otherwise) and trusts the first one's dtype for
    all (the byte count catches other item sizes).
    """
    if not values:
        return None
    first = next(iter(values))
    if not (isinstance(first, np.ndarray) and first.dtype == space.dtype
            and first.shape == space.shape):
        return None
    try:
        buf = bytearray().join(values)
    except TypeError:
        return None
    if len(buf) != first.nbytes * len(values):
        return None
    return np.frombuffer(buf, space.dtype).reshape(len(values), *space.shape)
