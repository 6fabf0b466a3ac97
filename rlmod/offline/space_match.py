"""Which spaces an offline module is built from: the config's, the recorded ones, and how
strictly the two must agree.

Used by OfflineData (single-agent data). The rule, in README.md and docs/offline.md:

- Spaces set in `config.environment(observation_space=..., action_space=...)` build the
  module; those in the data's `spaces.json` are used for what the config leaves unset.
- Where both exist they must be of the same kind and shape, and Discrete, MultiDiscrete
  and MultiBinary ones of the same size (`n`, `start`, `nvec`; the dtype may differ):
  these decide what the module's inputs and outputs mean; Dict and Tuple ones of the same
  parts (keys, length), each part by these rules. An
  action Box must have the same bounds (they map the recorded actions to the module's
  [-1, 1] scale). An observation Box may have other bounds and dtype: only its shape
  reaches the module (RLlib's docs configure CartPole as `Box(-inf, inf, (4,))`, the
  recorded space has CartPole's finite bounds).
- Every value read is then checked against the spaces used (rlmod.offline.checks).

A `spaces.json` written by rlmod between commits 3d715d9 and the fix of issue 30 holds the
vector env's batched spaces (`Box(.., (N, 4))`, `MultiDiscrete([2] * N)`) although its rows
are single steps; configured spaces whose batched form it holds are taken (with a warning),
so such recordings stay readable.
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np

from rlmod.errors import OfflineDataError
from rlmod.offline import struct_obs

logger = logging.getLogger(__name__)

Spaces = tuple[gym.Space, gym.Space]


def space_mismatch(given: gym.Space, recorded: gym.Space, *, action: bool) -> str | None:
    """Why `given` (configured) cannot stand for `recorded`, in words; None if it can."""
    if type(given) is not type(recorded):
        return f"it is a {type(given).__name__}, the recorded one a {type(recorded).__name__}"
    if isinstance(given, gym.spaces.Dict | gym.spaces.Tuple):
        return _parts_mismatch(given, recorded, action=action)
    if isinstance(given, gym.spaces.Box) and isinstance(recorded, gym.spaces.Box):
        if given.shape != recorded.shape:
            return f"its shape is {given.shape}, the recorded one's {recorded.shape}"
        if action and not (
            np.array_equal(given.low, recorded.low) and np.array_equal(given.high, recorded.high)
        ):
            return (
                "its bounds differ; an action Box's bounds map the recorded actions to "
                "the module's scale, so they must be the recorded ones"
            )
        return None
    if isinstance(given, gym.spaces.Discrete) and isinstance(recorded, gym.spaces.Discrete):
        same = given.n == recorded.n and given.start == recorded.start
    elif isinstance(given, gym.spaces.MultiDiscrete) and isinstance(
        recorded, gym.spaces.MultiDiscrete
    ):
        same = (
            given.shape == recorded.shape
            and bool((given.nvec == recorded.nvec).all())
            and bool((given.start == recorded.start).all())
        )
    else:  # MultiBinary (n): equal or not
        same = given == recorded
    return None if same else "its size differs (n, start or nvec)"


def _parts_mismatch(given: gym.Space, recorded: gym.Space, *, action: bool) -> str | None:
    """Dict/Tuple spaces: the same parts (a Dict's keys, a Tuple's length), each fitting
    by `space_mismatch`'s rules; the first misfit named by its part's path."""
    mine, theirs = struct_obs.parts(given), struct_obs.parts(recorded)
    if [name for name, _ in mine] != [name for name, _ in theirs]:
        return (
            f"its parts are {[name for name, _ in mine]}, the recorded one's "
            f"{[name for name, _ in theirs]}"
        )
    for (name, sub), (_, recorded_sub) in zip(mine, theirs, strict=True):
        problem = space_mismatch(sub, recorded_sub, action=action)
        if problem is not None:
            return f"in its part {name!r}, {problem}"
    return None


def _batched(given: Spaces, recorded: Spaces) -> bool:
    """Whether `recorded` is the batched form of `given` (a vector env's spaces, as rlmod
    wrongly stored them before the fix of issue 30): obs `(N, *shape)`, actions of N."""
    (obs, act), (rec_obs, rec_act) = given, recorded
    if not (
        isinstance(obs, gym.spaces.Box)
        and isinstance(rec_obs, gym.spaces.Box)
        and len(rec_obs.shape) == len(obs.shape) + 1
        and rec_obs.shape[1:] == obs.shape
    ):
        return False
    n = rec_obs.shape[0]
    if isinstance(act, gym.spaces.Discrete):
        return rec_act == gym.spaces.MultiDiscrete([int(act.n)] * n, start=[int(act.start)] * n)
    if isinstance(act, gym.spaces.Box) and isinstance(rec_act, gym.spaces.Box):
        return rec_act.shape == (n, *act.shape) and bool(
            (rec_act.low == act.low).all() and (rec_act.high == act.high).all()
        )
    return False


def choose_spaces(
    given: tuple[gym.Space | None, gym.Space | None], recorded: Spaces | None, where: str, algo: str
) -> tuple[Spaces, str]:
    """The (observation, action) spaces to build the module from, and where they come from
    (for messages); an OfflineDataError where configured and recorded ones disagree, or
    neither says one."""
    if (
        recorded is not None
        and given[0] is not None
        and given[1] is not None
        and _batched((given[0], given[1]), recorded)
    ):
        logger.warning(
            "%s holds a vector env's batched spaces (%s, %s), as rlmod recorded them before "
            "issue 30's fix; its rows are single steps, read with the configured %s, %s.",
            where,
            recorded[0],
            recorded[1],
            given[0],
            given[1],
        )
        return (given[0], given[1]), "config.environment(...)"
    chosen: list[gym.Space] = []
    for i, (name, space) in enumerate(
        (("observation_space", given[0]), ("action_space", given[1]))
    ):
        if space is None:
            if recorded is None:
                unset = (
                    "observation_space=..., action_space=..."
                    if given[1 - i] is None
                    else f"{name}=..."
                )
                raise OfflineDataError(
                    f"{algo} has no {name} to build its module from: the config sets no "
                    f"config.environment({unset}) and the data has no {where} (rlmod's "
                    "writers store one). Set the spaces in the config, or record the data "
                    "with config.offline_data(output=...), `rlmod record` or "
                    "rlmod.offline.record_episodes."
                )
            chosen.append(recorded[i])
            continue
        if recorded is not None:
            problem = space_mismatch(space, recorded[i], action=i == 1)
            if problem is not None:
                raise OfflineDataError(
                    f"config.environment({name}={space}) does not fit the recorded "
                    f"{name} {recorded[i]} in {where}: {problem}. Configured spaces must "
                    "be of the recorded kind and shape (Discrete/MultiDiscrete/MultiBinary: "
                    "the same size; an action Box: the same bounds; an observation Box may "
                    "have other bounds). Set the recorded space, leave it unset (the "
                    "recorded one is used), or read data recorded from this env."
                )
        chosen.append(space)
    given_any = given[0] is not None or given[1] is not None
    origin = (
        "config.environment(...)"
        if given[0] is not None and given[1] is not None
        else f"config.environment(...) and {where}"
        if given_any
        else where
    )
    return (chosen[0], chosen[1]), origin


__all__ = ["choose_spaces", "space_mismatch"]
