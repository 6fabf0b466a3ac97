"""The check of a stored replay buffer state, before any of it is loaded.

Used by `ReplayBuffer.set_state` and `PrioritizedReplayBuffer.set_state`: a state read
from a checkpoint is checked field by field against the buffer that loads it, and only a
state that passes is loaded, so a bad one changes nothing. Without it an insertion pointer
of 500 in a buffer of 3 rows made the next `add` write at row 500 while `sample` drew from
rows 0..3, one of them never written (uninitialized memory trained on), and NaN or
negative priorities broke the sum tree's sampling.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlmod.errors import CheckpointError

CORRUPT = "the checkpoint is corrupt or was edited"


@dataclasses.dataclass
class BufferState:
    """A stored buffer state that passed `check_buffer_state`, ready to load."""

    size: int
    next_index: int
    columns: dict[str, np.ndarray]
    rng: dict[str, Any] | None
    priorities: np.ndarray | None = None
    """Prioritized buffers: the leaves `p_i ** alpha` of the stored rows (float64)."""
    max_priority: float | None = None


def check_buffer_state(
    state: object, *, kind: str, capacity: int, rng: np.random.Generator
) -> BufferState:
    """`state` (a `ReplayBuffer.get_state()`) checked against a buffer of type `kind`,
    `capacity` rows and sampling generator `rng` (left unchanged).

    Raises:
        CheckpointError: naming the field and, for settings, the one to change: the type or
            capacity differs from the buffer's; `size` is not in [0, capacity];
            `next_index` is not in [0, capacity), or differs from `size` while the buffer
            is not full (the next row would be written past the filled ones); a column is
            not a numeric array of `size` rows, or a filled buffer has none; the RNG state
            does not fit the buffer's generator.
    """
    if not isinstance(state, Mapping):
        raise CheckpointError(
            f"The saved replay buffer is a {type(state).__name__}, not a dict; {CORRUPT}."
        )
    saved_kind = state.get("type", kind)
    if saved_kind != kind:
        config_type = (
            "PrioritizedEpisodeReplayBuffer"
            if saved_kind == "PrioritizedReplayBuffer"
            else "EpisodeReplayBuffer"
        )
        raise CheckpointError(
            f"The saved replay buffer is a {saved_kind}, this one a {kind}; set "
            f"replay_buffer_config['type'] to {config_type!r} to load it."
        )
    saved_capacity = _int(state, "capacity", low=1)
    if saved_capacity != capacity:
        raise CheckpointError(
            f"The saved replay buffer has capacity {saved_capacity}, this one {capacity}; set "
            "replay_buffer_config['capacity'] to match."
        )
    size = _int(state, "size", low=0, high=capacity)
    next_index = _int(state, "next_index", low=0, high=capacity - 1)
    if size < capacity and next_index != size:
        raise CheckpointError(
            f"The saved replay buffer's next_index={next_index} differs from its size={size}: "
            "until a buffer is full, rows are written in order, so the next one goes at "
            f"row {size} (a later sample would draw a row never written); {CORRUPT}."
        )
    return BufferState(size, next_index, _columns(state, size), _rng(state, rng))


def check_priorities(
    state: Mapping[str, Any], size: int, *, alpha: float
) -> tuple[np.ndarray, float]:
    """The leaves and largest priority of a stored prioritized buffer with `size` rows,
    checked: `alpha` must equal the buffer's (the leaves are `p ** alpha` of the saving
    buffer), `priorities` must be `size` finite values > 0 (`p = |td_error| + epsilon` is;
    one leaf of 0 made the smallest leaf 0, which the importance weights divide by: every
    weight came out 0, silently), and `max_priority` a finite number > 0 (new rows get it)."""
    saved_alpha = state.get("alpha", alpha)
    if (
        isinstance(saved_alpha, bool)
        or not isinstance(saved_alpha, int | float)
        or not math.isfinite(saved_alpha)
    ):
        raise CheckpointError(
            f"The saved prioritized replay buffer's alpha={saved_alpha!r} "
            f"is not a finite number; {CORRUPT}."
        )
    if float(saved_alpha) != alpha:
        raise CheckpointError(
            f"The saved prioritized replay buffer has alpha={saved_alpha}, this one "
            f"alpha={alpha}; set replay_buffer_config['alpha'] to {saved_alpha}."
        )
    for key in ("priorities", "max_priority"):
        if key not in state:
            raise CheckpointError(f"The saved prioritized replay buffer lacks {key!r}; {CORRUPT}.")
    priorities = state["priorities"]
    if not _numeric_array(priorities) or np.ndim(priorities) != 1 or len(priorities) != size:
        raise CheckpointError(
            f"The saved prioritized replay buffer's priorities must be a numeric array of its "
            f"{size} rows, got {_describe(priorities)}; {CORRUPT}."
        )
    leaves = np.asarray(priorities, np.float64)
    if not (np.isfinite(leaves) & (leaves > 0)).all():
        raise CheckpointError(
            "The saved prioritized replay buffer's priorities must be finite and > 0 "
            "(importance weights divide by the smallest; with a 0 every weight is 0); "
            f"{CORRUPT}."
        )
    max_priority = state["max_priority"]
    if (
        isinstance(max_priority, bool)
        or not isinstance(max_priority, int | float)
        or not math.isfinite(max_priority)
        or max_priority <= 0
    ):
        raise CheckpointError(
            f"The saved prioritized replay buffer's max_priority={max_priority!r} must be a "
            f"finite number > 0 (new rows get it); {CORRUPT}."
        )
    return leaves, float(max_priority)


def _int(state: Mapping[str, Any], key: str, *, low: int, high: int | None = None) -> int:
    """`state[key]`, if an int in [low, high]; CheckpointError naming it otherwise."""
    if key not in state:
        raise CheckpointError(f"The saved replay buffer lacks {key!r}; {CORRUPT}.")
    value = state[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"an int >= {low}" + ("" if high is None else f" and <= {high}")
        raise CheckpointError(
            f"The saved replay buffer's {key}={value!r} must be {bound}; {CORRUPT}."
        )
    return int(value)


def _columns(state: Mapping[str, Any], size: int) -> dict[str, np.ndarray]:
    """The stored columns: numeric arrays of `size` rows each, at least one if size > 0."""
    columns = state.get("columns", {})
    if not isinstance(columns, Mapping):
        raise CheckpointError(
            f"The saved replay buffer's columns are a "
            f"{type(columns).__name__}, not a dict; {CORRUPT}."
        )
    if size and not columns:
        raise CheckpointError(f"The saved replay buffer has size={size} but no columns; {CORRUPT}.")
    out = {}
    for name, value in columns.items():
        if not _numeric_array(value) or np.ndim(value) < 1:
            raise CheckpointError(
                f"The saved replay buffer's column {name!r} is "
                f"{_describe(value)}, not a numeric array; {CORRUPT}."
            )
        array = np.asarray(value)
        if len(array) != size:
            raise CheckpointError(
                f"The saved replay buffer says size {size} but its columns have "
                f"{ {c: len(v) for c, v in columns.items()} } rows; {CORRUPT}."
            )
        out[name] = array
    return out


def _rng(state: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any] | None:
    """The stored sampling RNG state, if it loads into a generator like `rng`."""
    saved = state.get("rng")
    if saved is None:
        return None
    probe = type(rng.bit_generator)()
    try:
        probe.state = saved
    except (TypeError, ValueError, KeyError, OverflowError) as e:
        raise CheckpointError(
            f"The saved replay buffer's rng does not fit its {type(probe).__name__} generator "
            f"({type(e).__name__}: {e}); {CORRUPT}."
        ) from None
    return dict(saved)


def _numeric_array(value: object) -> bool:
    """Whether `value` is a numpy array of bools or numbers (what a column holds)."""
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    return f"a {type(value).__name__}"
