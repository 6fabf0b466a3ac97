"""Dict and Tuple observations in offline data: one numpy structured array per column in
memory, one Parquet struct column on disk, each part (leaf) keeping its dtype and shape.

Used by the EpisodeWriter (EnvRunners, `record_episodes`, `rlmod record`) and the
OfflineReader. A recorded Dict observation `{"image": uint8 (10, 10, 1), "flip":
Discrete(2)}` is the Parquet column `obs` of type `struct<image: fixed_size_list<uint8>[100],
flip: int64>`, so `pyarrow.parquet.read_table(file)["obs"]` shows the parts by name, images
stay 1 byte a pixel, and each part is its own column chunk (`obs.image`, `obs.flip`) as
for any struct in Parquet. RLlib's recording EnvRunner also writes a Dict observation as a
struct column (through `space.to_jsonable`, as lists of Python numbers: dtypes are lost);
rlmod keeps them. A Tuple's parts are named "0", "1", ...; nested Dicts and Tuples nest.

In memory, between the Parquet file and the env-to-module connectors, a batch of such
observations is a structured array `[N]` whose fields are the parts (`rows["image"]` is
`[N, 10, 10, 1]` uint8): every row operation the reader and writer use (slicing, `np.take`,
`np.concatenate`, masks) works on it as on any other column. `to_tree` turns it into the
dict/tuple of arrays that a vector env returns, for the connectors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

NESTED_SPACES = (gym.spaces.Dict, gym.spaces.Tuple)
LEAF_SPACES = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
)
"""The spaces a stored column (or a part of a struct column) may have."""


def is_nested(space: Any) -> bool:
    """Whether `space` is a Dict or Tuple space (stored as a struct column)."""
    return isinstance(space, NESTED_SPACES)


def parts(space: gym.Space) -> list[tuple[str, gym.Space]]:
    """The named parts of a Dict/Tuple space, in its order (a Tuple's named "0", "1", ...)."""
    if isinstance(space, gym.spaces.Dict):
        return [(str(k), s) for k, s in space.spaces.items()]
    assert isinstance(space, gym.spaces.Tuple)
    return [(str(i), s) for i, s in enumerate(space.spaces)]


def leaves(space: gym.Space, prefix: str = "") -> list[tuple[str, gym.Space]]:
    """`(dotted path, leaf space)` of every leaf of a Dict/Tuple space, e.g.
    `("image", Box(...))`, `("inner.0", Discrete(3))`."""
    out: list[tuple[str, gym.Space]] = []
    for name, sub in parts(space):
        path = f"{prefix}{name}"
        out += leaves(sub, f"{path}.") if is_nested(sub) else [(path, sub)]
    return out


def get_leaf(rows: np.ndarray, path: str) -> np.ndarray:
    """The field at dotted `path` of a structured array (a view)."""
    for name in path.split("."):
        rows = rows[name]
    return rows


def unstorable_part(space: gym.Space) -> str | None:
    """Why a Dict/Tuple `space` cannot be stored as a struct column (a part of another
    kind, a key that is not a string, no parts), in words; None if it can."""
    if isinstance(space, gym.spaces.Dict) and not all(isinstance(k, str) for k in space.spaces):
        return f"its keys {list(space.spaces)} are not all strings"
    if not parts(space):
        return "it has no parts"
    for path, leaf in leaves(space):
        if not isinstance(leaf, LEAF_SPACES):
            return f"its part {path!r} is a {type(leaf).__name__}"
    for _, sub in parts(space):
        if is_nested(sub):
            problem = unstorable_part(sub)
            if problem is not None:
                return problem
    return None


def _leaf_shape(space: gym.Space) -> tuple[int, ...]:
    return tuple(getattr(space, "shape", None) or ())


def row_dtype(space: gym.Space) -> np.dtype:
    """The structured dtype of one observation of a Dict/Tuple `space` (each leaf's dtype
    and shape; a Discrete leaf one scalar)."""
    fields: list[tuple[Any, ...]] = []
    for name, sub in parts(space):
        if is_nested(sub):
            fields.append((name, row_dtype(sub)))
        else:
            fields.append((name, np.dtype(sub.dtype), _leaf_shape(sub)))
    return np.dtype(fields)


def to_rows(space: gym.Space, obs: Any) -> np.ndarray:
    """A batch of Dict/Tuple observations as a vector env returns them (a dict/tuple of
    arrays `[N, ...]`) -> a structured array `[N]` (a copy).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8),
        ...                          "flip": gym.spaces.Discrete(2)})
        >>> rows = to_rows(space, {"image": np.full((3, 2, 2, 1), 7, np.uint8),
        ...                        "flip": np.array([0, 1, 1])})
        >>> rows.shape, rows["image"].dtype, rows["image"].shape
        ((3,), dtype('uint8'), (3, 2, 2, 1))
        >>> to_arrow(rows).type
        StructType(struct<flip: int64, image: fixed_size_list<item: uint8>[4]>)
        >>> to_tree(space, rows)["flip"].tolist()
        [0, 1, 1]
    """
    first = np.asarray(get_leaf_of_tree(space, obs, leaves(space)[0][0]))
    out = np.empty(len(first), row_dtype(space))
    _fill(out, space, obs)
    return out


def get_leaf_of_tree(space: gym.Space, obs: Any, path: str) -> Any:
    """The leaf at dotted `path` of an observation tree (dicts and tuples)."""
    for name in path.split("."):
        obs = obs[name] if isinstance(space, gym.spaces.Dict) else obs[int(name)]
        space = dict(parts(space))[name]
    return obs


def _fill(out: np.ndarray, space: gym.Space, obs: Any) -> None:
    for (name, sub), key in zip(parts(space), _keys(space), strict=True):
        if is_nested(sub):
            _fill(out[name], sub, obs[key])
        else:
            out[name] = np.asarray(obs[key]).reshape(len(out), *_leaf_shape(sub))


def _keys(space: gym.Space) -> list[Any]:
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces)
    return list(range(len(space.spaces)))  # type: ignore[attr-defined]


def stack(space: gym.Space, observations: Sequence[Any]) -> np.ndarray:
    """Single Dict/Tuple observations (as `env.step` returns them) -> a structured array."""
    return to_rows(space, _stacked(space, observations))


def _stacked(space: gym.Space, observations: Sequence[Any]) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _stacked(s, [o[k] for o in observations]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_stacked(s, [o[i] for o in observations]) for i, s in enumerate(space.spaces))
    return np.stack([np.asarray(o) for o in observations])


def to_tree(space: gym.Space, rows: np.ndarray) -> Any:
    """A structured array `[N]` -> the dict/tuple of arrays `[N, ...]` (views) a vector env
    returns for `space`: what the env-to-module connectors take."""
    if isinstance(space, gym.spaces.Dict):
        return {k: to_tree(s, rows[str(k)]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(to_tree(s, rows[str(i)]) for i, s in enumerate(space.spaces))
    return rows


def to_arrow(values: np.ndarray) -> Any:
    """A column as Arrow: a structured array as a struct of its fields (recursively), rows
    of a fixed shape as fixed-size lists of their flattened values (the reader restores the
    shape from the stored space), scalars as they are; dtypes kept."""
    import pyarrow as pa

    if values.dtype.names:
        fields = [to_arrow(np.ascontiguousarray(values[name])) for name in values.dtype.names]
        return pa.StructArray.from_arrays(fields, names=list(values.dtype.names))
    if values.ndim == 1:
        return pa.array(values)
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))


def from_arrow(
    column: Any, space: gym.Space, leaf: Callable[[Any, tuple[int, ...], str], np.ndarray]
) -> np.ndarray:
    """An Arrow struct column of Dict/Tuple `space` -> a structured array `[N]` whose leaves
    keep their stored dtypes; `leaf(arrow_leaf, shape, path)` converts one leaf (the
    Parquet reader's conversion, rlmod.offline.parquet_chunks, with its size checks). The
    column's parts must be the space's (`ColumnCheck.schema` says so, with the fix, before
    any row is read)."""
    arrays = {
        path: leaf(_arrow_leaf(column, path), _leaf_shape(s), path) for path, s in leaves(space)
    }
    out = np.empty(len(column), _stored_dtype(space, arrays))
    for path, arr in arrays.items():
        target = out
        *outer, last = path.split(".")
        for name in outer:
            target = target[name]
        target[last] = arr
    return out


def _arrow_leaf(column: Any, path: str) -> Any:
    for name in path.split("."):
        column = column.field(name)
    return column


def _stored_dtype(space: gym.Space, arrays: dict[str, np.ndarray], prefix: str = "") -> np.dtype:
    fields: list[tuple[Any, ...]] = []
    for name, sub in parts(space):
        path = f"{prefix}{name}"
        if is_nested(sub):
            fields.append((name, _stored_dtype(sub, arrays, f"{path}.")))
        else:
            arr = arrays[path]
            fields.append((name, arr.dtype, arr.shape[1:]))
    return np.dtype(fields)


__all__ = [
    "from_arrow",
    "is_nested",
    "leaves",
    "row_dtype",
    "stack",
    "to_arrow",
    "to_rows",
    "to_tree",
    "unstorable_part",
]
