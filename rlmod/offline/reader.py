"""OfflineReader: recorded episodes from Parquet files, as shuffled training batches.

Used by offline algorithms (BC, MARWIL) in place of EnvRunners. Files are streamed with
pyarrow in record batches (rlmod.offline.parquet_chunks), a new random file order each
pass; rows are cut at episode ends (an episode's discounted returns need all its rows;
episodes never span files), the env-to-module transform runs on whole episodes, and rows
then go through a shuffle buffer that mixes rows of many episodes and files. Reading,
returns and transform of the next chunk run in a background thread
(rlmod.offline.prefetch) while the pool hands out batches. Memory is bounded by the
shuffle buffer, the batch, two read chunks and the longest episode, not by the dataset.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from rlmod.core.columns import Columns
from rlmod.errors import CheckpointError, OfflineDataError
from rlmod.offline.checks import ColumnCheck
from rlmod.offline.episode_order import batch_stop, episode_ends, episode_order
from rlmod.offline.parquet_chunks import ObsShape, file_chunks, named_errors
from rlmod.offline.prefetch import Prefetch
from rlmod.offline.returns import (
    BOOTSTRAP_FINALS,
    BOOTSTRAP_INDEX,
    BOOTSTRAP_OBS,
    Columns_,
    add_return_columns,
)
from rlmod.offline.writer import SPACES_FILE
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
        obs_shape: ObsShape | None,
        rows: int,
    ) -> Iterator[Columns_]: ...


READ_CHUNK_BYTES = 1 << 20
MAX_READ_ROWS = 65_536
"""Rows are read in chunks of about READ_CHUNK_BYTES (at most MAX_READ_ROWS rows): large
enough that per-chunk overheads (about 0.1 ms per Parquet batch) stay small per row, small
enough to bound memory for large rows (a prefetched chunk waits beside the pool; 2 MiB
chunks read CartPole's 100,000-row file 10% faster, but took the reader's RSS in
tests/offline/test_reader.py from 21 to 27 MiB)."""

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
        with named_errors(file):
            parquet = pq.ParquetFile(file)
        names = set(parquet.schema_arrow.names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise OfflineDataError(
                f"{file} has no column {missing[0]!r}; it was not written by rlmod's EpisodeWriter."
            )
        total += parquet.metadata.num_rows
    return total


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
    obs_shape: ObsShape | None,
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
        file_chunks(
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
        obs_shape: ObsShape | None,
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
        obs_shape: Shape of one stored (raw) observation (for Dict/Tuple observations,
            their space: see `ObsShape`).
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
        obs_shape: ObsShape | None = None,
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
