"""Recorded columns against the spaces a module trains with: every misfit an
OfflineDataError naming the file, the column and (for values) the row.

Used by the OfflineReader (and the Ray Data readers, and OfflineData before training).
Without these checks a `Discrete(2)` action stored as 0.5 or 1.7 trained as 0 or 1 (cast),
an action of 5 or -1 ended in torch's "index out of bounds", observations of another size
in numpy's "cannot reshape array", and strings in a raw `TypeError`.

Two layers: `ColumnCheck.schema` on each file's footer before any training (column kinds
and row sizes: cheap, and a bad file fails at `build_algo()`, not after an hour of
training), and `ColumnCheck.chunk` on each chunk read (values: inside the Discrete /
MultiDiscrete / MultiBinary spaces, integral where integers belong, finite, flags 0/1).
The OfflineReader checks a source's values on its first whole read only (its
`FinalsCache.verified`): files are written once, so what was checked stays true.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline import struct_obs
from rlmod.utils.space_checks import INTEGER_SPACES, out_of_space_rows, outside_space_problem

FLAG_COLUMNS = (Columns.TERMINATEDS, Columns.TRUNCATEDS)
OBS_COLUMNS = (Columns.OBS, Columns.NEXT_OBS)

RowInFile = Callable[[int], int | None]
"""Maps a row of a chunk to its row in the file (None where unknown), for messages."""


def row_shape(space: gym.Space) -> tuple[int, ...]:
    """The shape of one value of `space` as stored (a Discrete one is a scalar)."""
    return tuple(getattr(space, "shape", None) or ())


@dataclass(frozen=True)
class ColumnCheck:
    """What one module's recorded columns must hold.

    Args:
        observation_space: The (raw) observation space the module is built from.
        action_space: Its action space (the env's, as recorded).
        origin: Where these spaces come from, for messages (the config, or a
            `spaces.json`).
    """

    observation_space: gym.Space
    action_space: gym.Space
    origin: str

    def _space(self, column: str) -> gym.Space | None:
        if column in OBS_COLUMNS:
            return self.observation_space
        return self.action_space if column == Columns.ACTIONS else None

    def _fix(self) -> str:
        return (
            f"(Spaces from {self.origin}.) Re-record the data, convert the column, or "
            "set the spaces it was recorded with in config.environment(observation_space="
            "..., action_space=...)."
        )

    # ------------------------------------------------------------------ footer
    def schema(self, schema: Any, file: Path, columns: Sequence[str]) -> None:
        """Checks the Arrow `schema` of `file` (its footer): each of `columns` holds
        numbers (flags: booleans or integers), and observations and actions hold rows of
        their space's size; Dict/Tuple observations a struct of the space's parts, each
        part checked so. Cheap: no data is read."""
        import pyarrow as pa

        for name in columns:
            if name not in schema.names:
                continue
            kind = schema.field(name).type
            space = self._space(name)
            if space is None:
                numeric = (
                    pa.types.is_boolean(kind) or pa.types.is_integer(kind)
                    if name in FLAG_COLUMNS
                    else pa.types.is_integer(kind) or pa.types.is_floating(kind)
                )
                if not numeric:
                    what = "booleans" if name in FLAG_COLUMNS else "numbers"
                    raise OfflineDataError(
                        f"{file}: column {name!r} holds {kind} values, not {what}. "
                        f"Re-record the data or convert the column to {what}."
                    )
                continue
            self._field(name, kind, space, file)

    def _field(self, name: str, kind: Any, space: gym.Space, file: Path) -> None:
        """Checks one column (or struct field, `name` dotted) against its space."""
        import pyarrow as pa

        if struct_obs.is_nested(space) or pa.types.is_struct(kind):
            self._struct(name, kind, space, file)
            return
        size = int(np.prod(row_shape(space)))
        is_list = (
            pa.types.is_fixed_size_list(kind)
            or pa.types.is_list(kind)
            or pa.types.is_large_list(kind)
        )
        values = kind.value_type if is_list else kind
        if not (
            pa.types.is_integer(values)
            or pa.types.is_floating(values)
            or pa.types.is_boolean(values)
        ):
            raise OfflineDataError(
                f"{file}: column {name!r} holds {kind} values, not numbers of {space}. "
                + self._fix()
            )
        if not row_shape(space) and is_list:
            raise OfflineDataError(
                f"{file}: column {name!r} holds lists ({kind}), but {space} has one "
                "number per row. " + self._fix()
            )
        if pa.types.is_fixed_size_list(kind) and kind.list_size != size:
            shape = row_shape(space)
            batched = (
                len(shape) > 1 and int(np.prod(shape[1:])) == kind.list_size and name in OBS_COLUMNS
            )
            raise OfflineDataError(
                f"{file}: column {name!r} holds rows of {kind.list_size} values, but "
                f"{space} has shape {shape} ({size} values). "
                + (
                    "That looks like a vector env's batched spaces, which rlmod wrote "
                    "into spaces.json before issue 30's fix: set the single env's spaces "
                    "in config.environment(observation_space=..., action_space=...). "
                    if batched
                    else ""
                )
                + self._fix()
            )
        if row_shape(space) and not is_list and size != 1:
            raise OfflineDataError(
                f"{file}: column {name!r} holds one number per row, but {space} has "
                f"shape {row_shape(space)}. " + self._fix()
            )

    def _struct(self, name: str, kind: Any, space: gym.Space, file: Path) -> None:
        """A Dict/Tuple observation's column: a struct with a field per part of `space`
        (by name; a Tuple's "0", "1", ...), each part checked against its space."""
        import pyarrow as pa

        if not struct_obs.is_nested(space):
            fields = [kind.field(i).name for i in range(kind.num_fields)]
            raise OfflineDataError(
                f"{file}: column {name!r} holds a struct of parts {fields} (a Dict/Tuple "
                f"observation), but the observation space is {space}. " + self._fix()
            )
        expected = [part for part, _ in struct_obs.parts(space)]
        if not pa.types.is_struct(kind):
            raise OfflineDataError(
                f"{file}: column {name!r} holds {kind} values, not the struct of parts "
                f"{expected} in which rlmod stores observations of {space}. " + self._fix()
            )
        found = [kind.field(i).name for i in range(kind.num_fields)]
        if sorted(found) != sorted(expected):
            missing = [p for p in expected if p not in found]
            extra = [p for p in found if p not in expected]
            raise OfflineDataError(
                f"{file}: column {name!r} holds the parts {found}, but the observation space "
                f"{space} has the parts {expected} (missing: {missing}, not in the space: "
                f"{extra}). " + self._fix()
            )
        for part, sub in struct_obs.parts(space):
            self._field(f"{name}.{part}", kind.field(part).type, sub, file)

    # ------------------------------------------------------------------ values
    def chunk(self, cols: dict[str, np.ndarray], file: object, row_in_file: RowInFile) -> None:
        """Checks the values of a chunk read from `file`: numbers where numbers belong,
        no NaN/inf, flags 0/1, observations and actions of their space's shape, and
        Discrete / MultiDiscrete / MultiBinary ones inside it (an integral float, 1.0,
        fits; 0.5 does not). One vectorized pass per column; messages on the slow path."""
        for name, arr in cols.items():
            space = self._space(name)
            if space is None and name not in FLAG_COLUMNS and name != Columns.REWARDS:
                continue
            if space is not None and struct_obs.is_nested(space) and arr.dtype.names:
                for path, leaf in struct_obs.leaves(space):  # each part as its own column
                    part = struct_obs.get_leaf(arr, path)
                    self._column(f"{name}.{path}", leaf, part, file, row_in_file, exact=True)
                continue
            self._column(name, space, arr, file, row_in_file, exact=name in OBS_COLUMNS)

    def _column(
        self,
        name: str,
        space: gym.Space | None,
        arr: np.ndarray,
        file: object,
        row_in_file: RowInFile,
        *,
        exact: bool,
    ) -> None:
        """One column's (or part's) values; `exact`: rows must have the space's shape, not
        only its size."""
        if arr.dtype.kind not in "biuf":
            shown = arr[0] if len(arr) else arr
            raise OfflineDataError(
                f"{file}: column {name!r} holds {arr.dtype} values (e.g. {shown!r}), not "
                "numbers. Re-record the data or convert the column."
            )
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            row = int(np.flatnonzero(~np.isfinite(arr.reshape(len(arr), -1)).all(1))[0])
            raise OfflineDataError(
                f"{file}: column {name!r} holds {arr[row].tolist()!r} in "
                f"{_where(row, row_in_file)}: NaN or inf, which would make every loss it "
                "enters NaN. Re-record the data or drop its episode."
            )
        if name in FLAG_COLUMNS:
            self._flags(name, arr, file, row_in_file)
        elif space is not None:
            self._values(name, space, arr, file, row_in_file, exact=exact)

    def _flags(self, name: str, arr: np.ndarray, file: object, row_in_file: RowInFile) -> None:
        if arr.dtype.kind == "b":
            return
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise OfflineDataError(
                f"{file}: column {name!r} holds {arr[row].tolist()!r} in "
                f"{_where(row, row_in_file)}; a flag is True/False (or 1/0). Re-record the "
                "data or convert the column to booleans."
            )

    def _values(
        self,
        name: str,
        space: gym.Space,
        arr: np.ndarray,
        file: object,
        row_in_file: RowInFile,
        *,
        exact: bool,
    ) -> None:
        n = len(arr)
        shape = row_shape(space)
        if arr.shape[1:] != shape if exact else int(np.prod(arr.shape[1:])) != int(np.prod(shape)):
            raise OfflineDataError(
                f"{file}: column {name!r} holds rows of shape {arr.shape[1:]}, but {space} "
                f"has shape {shape}. " + self._fix()
            )
        if not isinstance(space, INTEGER_SPACES):
            return  # Box: any finite number (envs step past their declared bounds)
        values = arr.reshape(n, *shape) if name == Columns.ACTIONS else arr
        found = out_of_space_rows(space, values, n, name)
        if found is not None:
            row = int(np.flatnonzero(found[0])[0])
            problem = outside_space_problem(space, values, row, name)
            raise OfflineDataError(
                f"{file}: in {_where(row, row_in_file)}, {problem}. " + self._fix()
            )


def _where(row: int, row_in_file: RowInFile) -> str:
    at = row_in_file(row)
    return "a row" if at is None else f"row {at}"


def check_schemas(files: Sequence[Path], check: ColumnCheck, columns: Sequence[str]) -> None:
    """`check.schema` on every file's footer, before any training."""
    import pyarrow.parquet as pq

    for file in files:
        check.schema(pq.read_schema(file), file, columns)


__all__ = ["ColumnCheck", "check_schemas", "row_shape"]
