"""One recorded Parquet file as numpy columns, in chunks of whole episodes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline import struct_obs
from rlmod.offline.checks import FLAG_COLUMNS, ColumnCheck, RowInFile
from rlmod.offline.returns import Columns_
from rlmod.offline.writer import MODULE_ID

ObsShape = tuple[int, ...] | gym.spaces.Dict | gym.spaces.Tuple
"""Shape of one stored observation; for Dict/Tuple observations (struct columns) the
space itself, whose parts give each field's shape (rlmod.offline.struct_obs)."""

DECODE_THREADS = False
"""Whether pyarrow decodes a batch's columns on its own thread pool. Off: the OfflineReader
decodes in its prefetching thread, beside the thread that runs the pool, and pyarrow's
pool on top cost CPU time (MARWIL's reader: 113-116 against 122 ns per row, BC's: 81-82
against 96-99; CartPole, 2 cores, Xeon host, session 22) without adding a core."""


@contextlib.contextmanager
def named_errors(file: Path) -> Iterator[None]:
    """Turns pyarrow's and the OS's errors while reading `file` into OfflineDataErrors."""
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError) as e:
        raise OfflineDataError(
            f"{file} is not a readable Parquet file ({e}); it is truncated or corrupt. "
            "Remove or re-record it: rlmod never skips a file silently."
        ) from e


def read_columns(
    files: Sequence[Path],
    *,
    columns: Sequence[str] | None = None,
    module_id: str | None = None,
    obs_shape: ObsShape | None = None,
) -> Columns_:
    """All rows of `files` in stored order, as numpy columns (observations reshaped to
    `obs_shape`; given a Dict/Tuple space, structured arrays whose fields are its parts:
    `cols["obs"]["image"]`); for inspection and tests, as it holds the whole dataset in
    memory."""
    parts = [
        part
        for file in files
        for part in file_chunks(
            file, columns=columns, module_id=module_id, obs_shape=obs_shape, rows=1 << 20
        )
    ]
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def file_chunks(
    file: Path,
    *,
    columns: Sequence[str] | None,
    module_id: str | None,
    obs_shape: ObsShape | None,
    rows: int,
    verify: bool = True,
    check: ColumnCheck | None = None,
) -> Iterator[Columns_]:
    """One file's rows in chunks of whole episodes (of `module_id`); `verify` checks each
    page's checksum (a corrupt page raises instead of decoding to wrong numbers), `check`
    the values against the module's spaces (an OfflineDataError naming file, column, row)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    carry: Columns_ = {Columns.REWARDS: np.zeros(0)}  # rows of an unfinished episode
    offset = 0  # rows of the file before this record batch
    with named_errors(file):
        parquet = pq.ParquetFile(file, page_checksum_verification=verify)
        names = parquet.schema_arrow.names
        wanted = [c for c in (columns or names) if c in names]
        if module_id is not None and MODULE_ID in names and MODULE_ID not in wanted:
            wanted.append(MODULE_ID)
        for record_batch in parquet.iter_batches(
            batch_size=rows, columns=wanted, use_threads=DECODE_THREADS
        ):
            mask = None
            if module_id is not None and MODULE_ID in names:
                mask = pc.equal(record_batch.column(MODULE_ID), pa.scalar(module_id))
                record_batch, num_read = record_batch.filter(mask), record_batch.num_rows
            else:
                num_read = record_batch.num_rows
            row_in_file = partial(_row_in_file, offset, mask)
            offset += num_read
            if check is not None:
                _check_nulls(record_batch, file, row_in_file)
            cols = {
                name: _to_numpy(
                    record_batch.column(name),
                    obs_shape if name in (Columns.OBS, Columns.NEXT_OBS) else None,
                    name=name,
                    file=file,
                )
                for name in record_batch.schema.names
                if not (name == MODULE_ID and columns is not None and MODULE_ID not in columns)
            }
            if check is not None:
                check.chunk(cols, file, row_in_file)
            for flag in FLAG_COLUMNS:  # 0/1 integers (checked) as booleans: `~` needs them
                if flag in cols and cols[flag].dtype != bool:
                    cols[flag] = cols[flag] != 0
            ends = np.flatnonzero(cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS])
            start = 0
            if len(carry[Columns.REWARDS]):  # an episode began in an earlier batch
                if not len(ends):
                    carry = {k: np.concatenate([carry[k], v]) for k, v in cols.items()}
                    continue
                start = int(ends[0]) + 1
                yield {k: np.concatenate([carry[k], v[:start]]) for k, v in cols.items()}
            cut = int(ends[-1]) + 1 if len(ends) else start
            if cut > start:
                yield {k: v[start:cut] for k, v in cols.items()}
            carry = {k: v[cut:] for k, v in cols.items()}
    if len(carry[Columns.REWARDS]):
        raise OfflineDataError(
            f"{file} ends in the middle of an episode (no row with terminated or truncated "
            "set after its last rows); it is truncated or not written by rlmod's "
            "EpisodeWriter. Remove or re-record it."
        )


def _to_numpy(
    column: Any, shape: ObsShape | None, *, name: str = "", file: object = ""
) -> np.ndarray:
    """An Arrow column as numpy: lists of a row's flattened values reshaped to `shape`
    (else to their size), a struct column of a Dict/Tuple space as a structured array
    (rlmod.offline.struct_obs); rows of another size are an OfflineDataError naming `file`
    and the column `name`, not numpy's "cannot reshape"."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if struct_obs.is_nested(shape):
        if not pa.types.is_struct(kind):
            raise OfflineDataError(
                f"{file}: column {name!r} holds {kind} values, but the observation space is "
                f"{shape}, stored as a struct column. Re-record the data, or set the "
                "observation space it was recorded with in config.environment(...)."
            )
        return struct_obs.from_arrow(
            column,
            shape,  # type: ignore[arg-type]
            lambda leaf, leaf_shape, path: _to_numpy(
                leaf, leaf_shape, name=f"{name}.{path}", file=file
            ),
        )
    assert not isinstance(shape, gym.Space)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):  # not rlmod's: check sizes
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        size = int(np.prod(shape)) if shape is not None else int(lengths[0]) if len(lengths) else 0
        if len(lengths) and not (lengths == size).all():
            row = int(np.flatnonzero(lengths != size)[0])
            expected = (
                f"the space's shape {shape} has {size}"
                if shape is not None
                else f"its first row has {size}"
            )
            raise OfflineDataError(
                f"{file}: column {name!r} holds rows of {int(lengths[row])} values (row "
                f"{row} of the chunk read), but {expected}. Re-record the data, or set "
                "the spaces it was recorded with in config.environment(...)."
            )
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(column), *(shape or (size,)))
    if pa.types.is_fixed_size_list(kind):
        flat = column.flatten().to_numpy(zero_copy_only=False)
        if shape is not None and int(np.prod(shape)) != kind.list_size:
            raise OfflineDataError(
                f"{file}: column {name!r} holds rows of {kind.list_size} values, but the "
                f"observation space has shape {shape} ({int(np.prod(shape))} values). "
                "Re-record the data, or set the observation space it was recorded with."
            )
        return flat.reshape(len(column), *(shape or (kind.list_size,)))
    out = column.to_numpy(zero_copy_only=False)
    if shape and int(np.prod(shape)) == 1:  # one value per row: a shape-(1,) space's
        return out.reshape(len(out), *shape)
    if shape:
        raise OfflineDataError(
            f"{file}: column {name!r} holds one number per row, but the observation space "
            f"has shape {shape}. Re-record the data, or set the observation space it was "
            "recorded with."
        )
    return out


def _row_in_file(offset: int, mask: Any, row: int) -> int:
    """Row `row` of a record batch (filtered by `mask`, if any) as a row of its file."""
    if mask is None:
        return offset + row
    kept = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    return offset + int(kept[row])


def _check_nulls(record_batch: Any, file: Path, row_in_file: RowInFile) -> None:
    """Missing (null) values are an OfflineDataError: numpy would read them as NaN, None
    or a shorter row. Free where there are none (Arrow counts them when writing)."""
    for name, column in zip(record_batch.schema.names, record_batch.columns, strict=True):
        found = _first_null(column, name)
        if found is not None:
            row, where = found
            raise OfflineDataError(
                f"{file}: column {where!r} has a missing (null) value in row "
                f"{row_in_file(row)}. Re-record the data or drop its episode."
            )


def _first_null(column: Any, name: str) -> tuple[int, str] | None:
    """The first row of `column` with a null, and the (dotted) name of the column or
    struct field that holds it; None if there is none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count:
        return int(pc.index(pc.is_null(column), True).as_py()), name
    if pa.types.is_struct(column.type):  # parts of a Dict/Tuple observation
        for i in range(column.type.num_fields):
            found = _first_null(column.field(i), f"{name}.{column.type.field(i).name}")
            if found is not None:
                return found
    return None
