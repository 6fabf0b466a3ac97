"""OfflineReader: recorded episodes from Parquet files, as shuffled training batches.

Used by offline algorithms (BC, MARWIL) in place of EnvRunners. Files are streamed with
pyarrow in record batches, a new random file order each pass; rows are cut at episode
ends (an episode's discounted returns need all its rows; episodes never span files), the
env-to-module transform runs on whole episodes, and rows then go through a shuffle buffer
that mixes rows of many episodes and files. Reading, returns and transform of the next
chunk run in a background thread (rlmod.offline.prefetch) while the pool hands out
batches. Memory is bounded by the shuffle buffer, the batch, two read chunks and the
longest episode, not by the dataset.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from rlmod.core.columns import Columns
from rlmod.errors import CheckpointError, OfflineDataError
from rlmod.offline.checks import FLAG_COLUMNS, ColumnCheck, RowInFile
from rlmod.offline.episode_order import batch_stop, episode_ends, episode_order
from rlmod.offline.prefetch import Prefetch
from rlmod.offline.returns import (
    BOOTSTRAP_FINALS,
    BOOTSTRAP_INDEX,
    BOOTSTRAP_OBS,
    Columns_,
    add_return_columns,
)
from rlmod.offline.writer import MODULE_ID, SPACES_FILE
from rlmod.utils.spaces import space_from_dict
from rlmod.utils.state_files import read_json

Transform = Callable[[Columns_], Columns_]
"""Maps the columns of whole episodes (rows contiguous, in time order) to new columns."""


class ChunkSource(Protocol):
    """Anything besides a Parquet file that yields chunks of whole episodes (Minari)."""

    def chunks(
        self,
        *,
        columns: Sequence[str] | None,
        module_id: str | None,
        obs_shape: tuple[int, ...] | None,
        rows: int,
    ) -> Iterator[Columns_]: ...


READ_CHUNK_BYTES = 1 << 20
MAX_READ_ROWS = 65_536
"""Rows are read in chunks of about READ_CHUNK_BYTES (at most MAX_READ_ROWS rows): large
enough that per-chunk overheads (about 0.1 ms per Parquet batch) stay small per row, small
enough to bound memory for large rows (a prefetched chunk waits beside the pool; 2 MiB
chunks read CartPole's 100,000-row file 10% faster, but took the reader's RSS in
tests/offline/test_reader.py from 21 to 27 MiB)."""

DECODE_THREADS = False
"""Whether pyarrow decodes a batch's columns on its own thread pool. Off: the OfflineReader
decodes in its prefetching thread, beside the thread that runs the pool, and pyarrow's
pool on top cost CPU time (MARWIL's reader: 113-116 against 122 ns per row, BC's: 81-82
against 96-99; CartPole, 2 cores, Xeon host, session 22) without adding a core."""

FINALS_TABLE_MIN_ROWS = 1024
"""An OfflineReader's table of final observations (MARWIL) is compacted to what its pool
points to once it holds more than this many rows and more than half as many as the pool."""

REQUIRED_COLUMNS = (
    Columns.OBS,
    Columns.ACTIONS,
    Columns.REWARDS,
    Columns.TERMINATEDS,
    Columns.TRUNCATEDS,
)
"""What MARWIL and BC read; other recorded columns stay on disk (MARWIL also reads
`new_obs`, for the observation that bootstraps a truncated episode's returns)."""


def resolve_files(input_: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The Parquet files of a directory, a glob, a file, or a list of these (sorted);
    temporary files of unfinished writes (hidden names) are never taken."""
    items = [input_] if isinstance(input_, str | os.PathLike) else list(input_)
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = sorted(path.glob("*.parquet"))
        elif any(ch in str(item) for ch in "*?["):
            found = sorted(Path(p) for p in glob.glob(str(item)))
        else:
            found = [path] if path.exists() else []
        found = [f for f in found if not f.name.startswith(".")]
        if not found:
            raise OfflineDataError(
                f"offline_data(input_={str(item)!r}) matches no Parquet file; record some "
                "with config.offline_data(output=DIR), `rlmod record` or "
                "rlmod.offline.record_episodes."
            )
        files += found
    return files


def load_spaces_json(file: Path) -> dict[str, Any]:
    """The raw JSON of one `spaces.json`; OfflineDataError naming it if unreadable."""
    try:
        return dict(read_json(file))
    except CheckpointError as e:
        raise OfflineDataError(str(e)) from None


def read_spaces(files: Sequence[Path]) -> dict[str, tuple[gym.Space, gym.Space]] | None:
    """The spaces stored beside the files (`{"__env__" or module_id: (obs, act)}`), or
    None if no directory of theirs has a `spaces.json`; all that have one must agree."""
    found: dict[str, Any] | None = None
    source = None
    for directory in sorted({f.parent for f in files}):
        file = directory / SPACES_FILE
        if not file.exists():
            continue
        data = load_spaces_json(file)
        if found is not None and data != found:
            raise OfflineDataError(
                f"{file} and {source} describe different spaces; read data of one env at a time."
            )
        found, source = data, file
    if found is None:
        return None
    spaces: dict[str, tuple[gym.Space, gym.Space]] = {}
    try:
        for key, value in found.items():
            obs = space_from_dict(value["observation_space"])
            act = space_from_dict(value["action_space"])
            if obs is None or act is None:
                raise ValueError("a space is null")
            spaces[key] = (obs, act)
    except (KeyError, TypeError, ValueError) as e:
        raise OfflineDataError(f"{source}: a space is malformed ({e!r}).") from e
    return spaces


def check_files(files: Sequence[Path], columns: Sequence[str] = REQUIRED_COLUMNS) -> int:
    """Opens every file's footer (cheap) and checks its columns, before any training;
    returns the total number of rows. A truncated or corrupt file raises an
    OfflineDataError naming it: no file is ever skipped silently."""
    import pyarrow.parquet as pq

    total = 0
    for file in files:
        with _named_errors(file):
            parquet = pq.ParquetFile(file)
        names = set(parquet.schema_arrow.names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise OfflineDataError(
                f"{file} has no column {missing[0]!r}; it was not written by rlmod's EpisodeWriter."
            )
        total += parquet.metadata.num_rows
    return total


@contextlib.contextmanager
def _named_errors(file: Path) -> Iterator[None]:
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
    obs_shape: tuple[int, ...] | None = None,
) -> Columns_:
    """All rows of `files` in stored order, as numpy columns (observations reshaped to
    `obs_shape`); for inspection and tests, as it holds the whole dataset in memory."""
    parts = [
        part
        for file in files
        for part in _file_chunks(
            file, columns=columns, module_id=module_id, obs_shape=obs_shape, rows=1 << 20
        )
    ]
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _file_chunks(
    file: Path,
    *,
    columns: Sequence[str] | None,
    module_id: str | None,
    obs_shape: tuple[int, ...] | None,
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
    with _named_errors(file):
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
    column: Any, shape: tuple[int, ...] | None, *, name: str = "", file: object = ""
) -> np.ndarray:
    """An Arrow column as numpy: lists of a row's flattened values reshaped to `shape`
    (else to their size); rows of another size are an OfflineDataError naming `file` and
    the column `name`, not numpy's "cannot reshape"."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
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
    import pyarrow.compute as pc

    for name, column in zip(record_batch.schema.names, record_batch.columns, strict=True):
        if column.null_count:
            row = int(pc.index(pc.is_null(column), True).as_py())
            raise OfflineDataError(
                f"{file}: column {name!r} has a missing (null) value in row "
                f"{row_in_file(row)}. Re-record the data or drop its episode."
            )


FINALS_CACHE_BYTES = 64 << 20
"""What an OfflineReader keeps of FinalsCache at most (all sources together)."""


class FinalsCache:
    """What an OfflineReader learns about a source (file) on its first whole read: the
    observations after its truncated episodes' last steps, and that its pages' checksums
    held.

    MARWIL's returns need only those of the whole `new_obs` column, yet decoding it cost
    as much as decoding all other columns MARWIL reads (`obs` included), on every pass.
    An OfflineReader reads `new_obs` on a source's first pass and keeps its finals here
    (one observation per truncated episode: 1/episode-length of the observations read,
    and at most `max_bytes` in all; a source past the cap is read with `new_obs` each
    pass), so later passes skip the column. Sources are files written once and renamed
    complete, so what was read stays true.
    """

    def __init__(self, max_bytes: int = FINALS_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._finals: dict[Any, np.ndarray] = {}
        self.verified: set[Any] = set()
        """Sources read whole once, their pages' checksums verified."""

    def get(self, source: Any) -> np.ndarray | None:
        return self._finals.get(source)

    def put(self, source: Any, finals: np.ndarray) -> None:
        if source not in self._finals and self.nbytes + finals.nbytes <= self.max_bytes:
            self._finals[source] = finals
            self.nbytes += finals.nbytes


def episode_chunks(
    source: Path | ChunkSource,
    *,
    columns: Sequence[str] | None,
    module_id: str | None,
    obs_shape: tuple[int, ...] | None,
    rows: int,
    gamma: float | None,
    transform: Transform | None,
    finals_cache: FinalsCache | None = None,
    check: ColumnCheck | None = None,
) -> Iterator[Columns_]:
    """One file's (or source's) rows as training rows, in chunks of whole episodes: unless
    `gamma` is None, the discounted returns as `value_targets` and what bootstraps a
    truncated episode's (`add_return_columns`: `bootstrap_discount`, `bootstrap_index`
    and the chunk's table `bootstrap_finals`; `new_obs` is read for it, unless
    `finals_cache` holds this source's); then `transform` applied. Shared by
    OfflineReader and the Ray Data readers (`bootstrap_obs_per_row` turns the index and
    table into the per-row `bootstrap_obs` a Learner reads).

    Pages' checksums are verified, and the values checked against the module's spaces
    (`check`, rlmod.offline.checks), unless `finals_cache` has seen this source read
    whole (`FinalsCache.verified`): files are written once and renamed complete, so a
    file that checked out on one pass holds the same bytes on the next.
    """
    keep_next_obs = columns is None or Columns.NEXT_OBS in columns
    cached = None
    if gamma is not None and not keep_next_obs:
        cached = None if finals_cache is None else finals_cache.get(source)
        if cached is None:
            columns = [*columns, Columns.NEXT_OBS]  # type: ignore[misc]
    verified = finals_cache is not None and source in finals_cache.verified
    check = None if verified else check
    chunks = (
        _file_chunks(
            source,
            columns=columns,
            module_id=module_id,
            obs_shape=obs_shape,
            rows=rows,
            verify=not verified,
            check=check,
        )
        if isinstance(source, Path)
        else source.chunks(columns=columns, module_id=module_id, obs_shape=obs_shape, rows=rows)
    )
    found: list[np.ndarray] = []
    used = 0
    for cols in chunks:
        if check is not None and not isinstance(source, Path):  # Minari: checked here
            check.chunk(cols, source, _unknown_row)
        if gamma is not None:
            if cached is None:
                found.append(add_return_columns(cols, gamma, keep_next_obs=keep_next_obs))
            else:
                used += len(
                    add_return_columns(
                        cols, gamma, keep_next_obs=keep_next_obs, finals=cached[used:]
                    )
                )
        yield cols if transform is None else transform(cols)
    if finals_cache is not None:  # read whole: checked, and its finals known
        finals_cache.verified.add(source)
        if gamma is not None and cached is None and found:
            finals_cache.put(source, np.concatenate(found))


def _unknown_row(row: int) -> None:
    """A source's rows are not numbered in files (Minari): messages name the source."""
    return None


class ChunkStream:
    """Chunks of whole episodes of `files`, without end, in bundles of at least `read_rows`
    rows: `episode_chunks` of each file with a new file order every pass (from `rng`).
    An OfflineReader takes one bundle per refill of its pool (a record batch yields two
    chunks, the episode begun in the one before and the rest; bundled, one prefetch ahead
    is one refill ahead). It runs in the reader's prefetching thread and holds no
    reference to the reader, so a dropped reader ends that thread."""

    def __init__(
        self,
        files: Sequence[Path | ChunkSource],
        *,
        rng: np.random.Generator,
        read_rows: int,
        columns: Sequence[str],
        module_id: str | None,
        obs_shape: tuple[int, ...] | None,
        gamma: float | None,
        transform: Transform | None,
        check: ColumnCheck | None = None,
    ) -> None:
        self.files = list(files)
        self.rng = rng
        self.read_rows = read_rows
        """Rows per bundle and per Parquet batch; grown to about READ_CHUNK_BYTES after
        the first chunk."""
        self.columns = list(columns)
        self.module_id = module_id
        self.obs_shape = obs_shape
        self.gamma = gamma
        self.transform = transform
        self.check = check
        self.finals_cache = FinalsCache()

    def __iter__(self) -> Iterator[list[Columns_]]:
        first = self.read_rows
        bundle: list[Columns_] = []
        bundle_rows, bundle_size = 0, self.read_rows  # (the size when the bundle began)
        while True:
            rows_this_pass = 0
            for i in self.rng.permutation(len(self.files)).tolist():
                for cols in episode_chunks(
                    self.files[i],
                    columns=self.columns,
                    module_id=self.module_id,
                    obs_shape=self.obs_shape,
                    rows=self.read_rows,
                    gamma=self.gamma,
                    transform=self.transform,
                    finals_cache=self.finals_cache,
                    check=self.check,
                ):
                    n = len(cols[Columns.REWARDS])
                    if n and self.read_rows == first:
                        row_bytes = (
                            sum(v.nbytes for k, v in cols.items() if k != BOOTSTRAP_FINALS) / n
                        )
                        self.read_rows = int(
                            min(MAX_READ_ROWS, max(self.read_rows, READ_CHUNK_BYTES // row_bytes))
                        )
                    rows_this_pass += n
                    bundle.append(cols)
                    bundle_rows += n
                    if bundle_rows >= bundle_size:
                        yield bundle
                        bundle, bundle_rows, bundle_size = [], 0, self.read_rows
            if not rows_this_pass:
                raise OfflineDataError(
                    f"The offline data ({len(self.files)} files, e.g. {self.files[0]}) holds "
                    "no rows" + (f" of module {self.module_id!r}." if self.module_id else ".")
                )


class OfflineReader:
    """Yields training batches of `batch_size` rows for one module, without end.

    Args:
        files: Parquet files written by EpisodeWriter (see `resolve_files`), or other
            sources of whole-episode chunks (e.g. `minari_source.MinariSource`).
        batch_size: Rows per batch.
        gamma: Discount of the returns added as `value_targets` (MARWIL's regression
            target); None adds none (BC needs none). A truncated episode's rows also get
            `bootstrap_discount` and `bootstrap_obs`, with which MARWIL's Learner adds the
            value of the observation after the truncation, as RLlib does. (The pool holds
            an index per row into a table of those observations, one per truncated
            episode; each batch gathers its rows' `bootstrap_obs` from it.)
        shuffle_buffer_size: Rows kept back to mix with the next read chunk; each refill
            shuffles these, what is left of the last one and one new chunk of whole
            episodes together.
        module_id: Which module's rows to read (multi-agent data).
        seed: Seeds the file order and the shuffle (two streams of it, so the order of
            the chunks and the batches does not depend on the prefetching thread).
        obs_shape: Shape of one stored (raw) observation.
        transform: Applied to each chunk of whole episodes after reading (MARWIL passes
            the env-to-module connectors here).
        columns: Which stored columns to read.
        prefetch: Read, compute returns and transform the next chunk in a background
            thread while the caller (the pool, the Learner) works: the same chunks in the
            same order, on a second core where there is one. False reads in the caller's
            thread.
        check: Checks each source's values against the module's spaces on its first
            whole read (rlmod.offline.checks; OfflineData passes one); None checks none.
        whole_episodes: Shuffle whole episodes instead of rows, and hand out batches of
            whole episodes (rows contiguous, in time order): at least `batch_size` rows,
            at most one episode more. A recurrent module (`use_lstm`) trains on these:
            its Learner runs each episode from the initial state
            (rlmod.algorithms.marwil.offline_sequences).

    Example:
        >>> import gymnasium as gym, tempfile
        >>> from rlmod.offline import record_episodes
        >>> data = tempfile.mkdtemp()
        >>> rows = record_episodes(gym.make("CartPole-v1"), lambda obs: 0, num_episodes=5,
        ...                        output_dir=data, seed=0)
        >>> reader = OfflineReader(resolve_files(data), batch_size=8, obs_shape=(4,),
        ...                        shuffle_buffer_size=16, seed=0)
        >>> batch = reader.next_batch()
        >>> batch["obs"].shape, batch["value_targets"].shape
        ((8, 4), (8,))
    """

    def __init__(
        self,
        files: Sequence[Path | ChunkSource],
        *,
        batch_size: int,
        gamma: float | None = 0.99,
        shuffle_buffer_size: int = 10_000,
        module_id: str | None = None,
        seed: int | None = None,
        obs_shape: tuple[int, ...] | None = None,
        transform: Transform | None = None,
        columns: Sequence[str] = REQUIRED_COLUMNS,
        prefetch: bool = True,
        check: ColumnCheck | None = None,
        whole_episodes: bool = False,
    ) -> None:
        if not files:
            raise OfflineDataError("OfflineReader got no files to read.")
        self.whole_episodes = whole_episodes
        self.files = list(files)
        self.batch_size = batch_size
        self.gamma = gamma
        self.keep = shuffle_buffer_size
        self.module_id = module_id
        file_rng, self._rng = (
            np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2)
        )
        self._stream = ChunkStream(
            files,
            rng=file_rng,
            read_rows=max(batch_size, 1024),
            columns=columns,
            module_id=module_id,
            obs_shape=obs_shape,
            gamma=gamma,
            transform=transform,
            check=check,
        )
        self._chunks: Iterator[list[Columns_]] = (
            Prefetch(iter(self._stream)) if prefetch else iter(self._stream)
        )
        self._pool: Columns_ = {}
        self._pos = 0
        self._finals: np.ndarray | None = None  # what the pool's `bootstrap_index` points to
        self._num_finals = 0
        self.num_rows_read = 0
        """Rows taken into the shuffle pool so far."""

    def __iter__(self) -> Iterator[Columns_]:
        while True:
            yield self.next_batch()

    def close(self) -> None:
        """Ends the prefetching thread (also done when the reader is dropped)."""
        if isinstance(self._chunks, Prefetch):
            self._chunks.close()

    def next_batch(self) -> Columns_:
        """The next `batch_size` rows (whole episodes: up to the end of the episode that
        holds the `batch_size`-th row), from a shuffled pool that always keeps
        `shuffle_buffer_size` rows back to mix with the next chunk."""
        while self._left() < self.batch_size + self.keep:
            self._refill()
        stop = self._pos + self.batch_size
        if self.whole_episodes:  # the pool holds whole episodes: one ends at or after stop
            stop = self._pos + batch_stop(self._pool, self._pos, self.batch_size)
        pos, self._pos = self._pos, stop
        batch = {k: v[pos : self._pos] for k, v in self._pool.items()}
        if BOOTSTRAP_INDEX in batch:
            assert self._finals is not None  # set by the refill that took the index in
            batch[BOOTSTRAP_OBS] = np.take(self._finals, batch.pop(BOOTSTRAP_INDEX), axis=0)
        return batch

    def _left(self) -> int:
        return len(self._pool[Columns.REWARDS]) - self._pos if self._pool else 0

    def _refill(self) -> None:
        """Takes a bundle of chunks (at least `read_rows` rows) and shuffles it together
        with what is left of the pool into a new pool (a join and a gather per column)."""
        sources = [{k: v[self._pos :] for k, v in self._pool.items()}] if self._left() else []
        need = self.batch_size + self.keep - self._left()
        new_rows = 0
        tables = [] if self._finals is None else [self._finals]
        while new_rows < need:  # one bundle (of at least `read_rows` rows), mostly
            for chunk in next(self._chunks):
                table = chunk.pop(BOOTSTRAP_FINALS, None)
                if table is not None:  # the chunk's index, into the reader's table
                    chunk[BOOTSTRAP_INDEX] += np.int32(self._num_finals)
                    tables.append(table)
                    self._num_finals += len(table)
                sources.append(chunk)
                new_rows += len(chunk[Columns.REWARDS])
        self.num_rows_read += new_rows
        joined = (
            sources[0]
            if len(sources) == 1
            else {k: np.concatenate([src[k] for src in sources]) for k in sources[-1]}
        )
        # Peak memory: the old pool and the chunks go before the gather, each joined
        # column right after its own (batches handed out keep their rows alive).
        sources.clear()
        self._pool, self._pos = {}, 0
        # A gather (np.take) is twice as fast as a scatter into a new pool (measured).
        order = (
            episode_order(episode_ends(joined), self._rng)
            if self.whole_episodes
            else self._rng.permutation(len(joined[Columns.REWARDS]))
        )
        self._pool = {k: np.take(joined.pop(k), order, axis=0) for k in list(joined)}
        if len(tables) > (self._finals is not None):
            self._finals = tables[0] if len(tables) == 1 else np.concatenate(tables)
            if len(self._finals) > max(FINALS_TABLE_MIN_ROWS, len(order) // 2):
                self._compact_finals()

    def _compact_finals(self) -> None:
        """Drops the finals no row of the pool points to (those of episodes whose rows
        all left in batches), so the table stays bounded by the pool, not the data."""
        assert self._finals is not None
        index = self._pool[BOOTSTRAP_INDEX]
        used = np.zeros(len(self._finals), bool)
        used[index] = True
        new_position = (np.cumsum(used) - 1).astype(np.int32)
        self._finals = self._finals[used]
        self._pool[BOOTSTRAP_INDEX] = new_position[index]
        self._num_finals = len(self._finals)
