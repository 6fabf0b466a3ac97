"""Whether batches of values lie inside Discrete / MultiDiscrete / MultiBinary spaces (in Dict /
Tuple ones), checked on whole arrays: the fast yes/no, which rows do not, and what is wrong
in words.

Used by the EnvRunners' observation guard (rlmod.env.guards, every vector step) and by the
offline reader's checks of recorded observations and actions (rlmod.offline.checks).
Box parts are not checked: envs often step past their declared bounds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from rlmod.core.types import Array, BoolArray


def has_integer_parts(space: gym.Space) -> bool:
    """Whether `space` has Discrete / MultiDiscrete / MultiBinary parts (what
    `out_of_space_rows` checks); decided once per space, so Box-only envs pay nothing per
    step."""
    if isinstance(space, INTEGER_SPACES):
        return True
    if isinstance(space, gym.spaces.Dict):
        return any(has_integer_parts(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return any(has_integer_parts(s) for s in space.spaces)
    return False


INTEGER_SPACES = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
"""The spaces whose values are integers in a range (MultiBinary: 0..1 per entry)."""

IntegerSpace = gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary


def _outside(space: IntegerSpace, values: Array) -> BoolArray | None:
    """None if every one of `values` (a batch of `space`'s values) lies in `space`; else a
    bool array of `values`' shape, True where one does not.

    The fast path (integers): one subtraction (none where the space starts at 0) and one
    reduction over the offsets viewed as unsigned, so that a negative offset reads as a
    huge one: 2.1 us for a Discrete batch of 1-16 values, 4-4.5 us for MultiDiscrete([3, 3])
    (two compares and an `all` take 2.6 us; 2-core Xeon host, session 30)."""
    arr = cast("npt.NDArray[np.int64]", values)  # any numeric dtype: compared as numbers
    start: int | npt.NDArray[np.int64]
    size: int | npt.NDArray[np.int64]
    if isinstance(space, gym.spaces.Discrete):
        start, size = int(space.start), int(space.n)
    elif isinstance(space, gym.spaces.MultiBinary):
        start, size = 0, 2
    else:
        start, size = space.start, space.nvec
    if arr.dtype.kind in "iu":
        if arr.dtype.itemsize < 8:  # no overflow in the subtraction
            arr = arr.astype(np.int64)
        offset = arr - start if isinstance(start, np.ndarray) or start else arr
        unsigned = offset.view(np.uint64)
        if isinstance(size, int):
            if unsigned.max(initial=0) < size:
                return None
        elif (unsigned < size).all():
            return None
        return cast(BoolArray, unsigned >= size)
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
        return cast(
            BoolArray,
            None
            if ((arr >= start) & (arr < start + size)).all()
            else (arr < start) | (arr >= start + size),
        )
    if arr.dtype.kind == "f":  # a multi-agent env's floats: integral values only
        inside = (arr >= start) & (arr < start + size) & (np.floor(arr) == arr)
        return None if inside.all() else cast(BoolArray, ~inside)
    return np.ones(arr.shape, dtype=bool)  # strings, objects: no integer at all


def out_of_space_rows(
    space: gym.Space, x: object, num_rows: int, key: str
) -> tuple[BoolArray, str] | None:
    """None if every Discrete / MultiDiscrete / MultiBinary part of the batch `x` (leading axis:
    `num_rows` rows) lies inside `space`; else which rows do not, `[num_rows]` bool, and the
    key path of the first leaf where one does not. Box parts are not checked (envs often
    step past their declared bounds, and non-finite values have their own check).

    Without this check a Discrete(4) observation of -1 one-hot encodes as state 3 and one
    of 4 ends in numpy's IndexError far from the env; MultiDiscrete alike."""
    if isinstance(space, INTEGER_SPACES):
        outside = _outside(space, x if isinstance(x, np.ndarray) else np.asarray(x))
        if outside is None:
            return None
        return cast(BoolArray, outside.reshape(num_rows, -1).any(axis=1)), key
    if isinstance(space, gym.spaces.Dict):
        parts = [
            (sub, cast("dict[str, object]", x)[k], f"{key}[{k!r}]")
            for k, sub in space.spaces.items()
        ]
    elif isinstance(space, gym.spaces.Tuple):
        parts = [
            (sub, cast("tuple[object, ...]", x)[i], f"{key}[{i}]")
            for i, sub in enumerate(space.spaces)
        ]
    else:
        return None
    bad, bad_key = None, None
    for sub, value, path in parts:
        found = out_of_space_rows(sub, value, num_rows, path)
        if found is not None:
            bad = found[0] if bad is None else bad | found[0]
            bad_key = bad_key or found[1]
    return None if bad is None or bad_key is None else (bad, bad_key)


SMALL_DISCRETE_BATCH = 32
"""Up to this many values, `fits_space` checks a Discrete batch with the C builtins min and
max over its `tolist()` (0.5-1.2 us at 1-16 values) instead of a numpy reduction (about
2 us however few values: the cost of a ufunc call). With it the check costs 1.3 us of a
133 us vector step of FrozenLake sampling with 1 sub-env (timeit); benchmarks/guard_overhead.py
reads 2.2% (95% CI 1.4-4.1%; an A/A run reads 1.5%, -3.5..+4.2%) at 1 sub-env, 1.3% at 16
(2-core Xeon host, session 30). tests/env/test_observation_space_guard.py checks both paths
agree."""


def fits_space(space: gym.Space) -> Callable[[object, int], bool] | None:
    """A test `fits(batch, num_rows)`: whether every Discrete / MultiDiscrete / MultiBinary
    part of a batch of `space` lies inside it (what `out_of_space_rows` checks, without
    saying where: the per-step fast path); None if `space` has no such parts."""
    if not has_integer_parts(space):
        return None

    def plain(x: object, num_rows: int) -> bool:
        return out_of_space_rows(space, x, num_rows, "") is None

    if not isinstance(space, gym.spaces.Discrete):
        return plain
    low, high = int(space.start), int(space.start) + int(space.n)

    def fits(x: object, num_rows: int) -> bool:
        if isinstance(x, np.ndarray) and x.dtype.kind in "iu" and x.size <= SMALL_DISCRETE_BATCH:
            values = x.tolist()
            return not values or (min(values) >= low and max(values) < high)
        return plain(x, num_rows)

    return fits


def outside_space_problem(space: gym.Space, x: object, row: int, key: str) -> str | None:
    """What is wrong with row `row` of the batch `x` of `space` in words (e.g. "obs is -1,
    outside 0..3 of Discrete(4)"), or None if its integer parts fit; for error messages,
    on the slow path only."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        parts = (
            (
                (sub, cast("dict[str, object]", x)[k], f"{key}[{k!r}]")
                for k, sub in space.spaces.items()
            )
            if isinstance(space, gym.spaces.Dict)
            else (
                (sub, cast("tuple[object, ...]", x)[i], f"{key}[{i}]")
                for i, sub in enumerate(space.spaces)
            )
        )
        for sub, value, path in parts:
            problem = outside_space_problem(sub, value, row, path)
            if problem is not None:
                return problem
        return None
    if not isinstance(space, INTEGER_SPACES):
        return None
    value = np.asarray(x)[row]
    outside = _outside(space, np.asarray(value)[None])
    if outside is None:
        return None
    shown = value.tolist()
    if isinstance(space, gym.spaces.Discrete):
        low, high = int(space.start), int(space.start + space.n) - 1
        return f"{key} is {shown!r}, {_not_in(shown)} {low}..{high} of {space}"
    j = int(np.flatnonzero(outside)[0])
    if isinstance(space, gym.spaces.MultiBinary):
        low_j, high_j = 0, 1
    else:
        low_j = int(space.start.reshape(-1)[j])
        high_j = low_j + int(space.nvec.reshape(-1)[j]) - 1
    entry = np.asarray(value).reshape(-1)[j].tolist()
    return (
        f"{key} is {shown!r}: its entry {j} is {entry!r}, {_not_in(entry)} "
        f"{low_j}..{high_j} of {space}"
    )


def _not_in(value: object) -> str:
    """How a value misses its range: "outside" (5, -1), or "not an integer in" (0.5)."""
    if isinstance(value, float) and value == value and not value.is_integer():
        return "not an integer in"
    return "outside"
