"""OfflineReader: recorded episodes from Parquet files, as shuffled training batches.

Used by offline algorithms (BC, MARWIL) in place of EnvRunners. Files are streamed with
pyarrow in record batches, a new random file order each pass; rows are cut at episode
ends (an episode's discounted returns need all its rows; episodes never span files), the
env-to-module transform runs on whole episodes, and rows then go through a shuffle buffer
that mixes rows of many episodes and files. Memory is bounded by the shuffle buffer, the
batch, one read chunk and the longest episode, not by the dataset.
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from rlmod.core.columns import Columns
from rlmod.errors import CheckpointError, OfflineDataError
from rlmod.offline.writer import MODULE_ID, SPACES_FILE
from rlmod.utils.spaces import space_from_dict
from rlmod.utils.state_files import read_json

Columns_ = dict[str, np.ndarray]
Transform = Callable[[Columns_], Columns_]
"""Maps the columns of whole episodes (rows contiguous, in time order) to new columns."""


class ChunkSource(Protocol):
    """Anything besides a Parquet file that yields chunks of whole episodes (Minari)."""

    def chunks(self, *, columns: Sequence[str] | None, module_id: str | None,
               obs_shape: tuple[int, ...] | None, rows: int) -> Iterator[Columns_]: ...


READ_CHUNK_BYTES = 1 << 20
MAX_READ_ROWS = 65_536
"""Rows are read in chunks of about READ_CHUNK_BYTES (at most MAX_READ_ROWS rows): large
enough that per-chunk overheads vanish, small enough to bound memory for large rows (and
to keep the shuffle pool in a core's L2 cache at CartPole's row size: a pool twice as
large made its reshuffle half again as slow on this project's host)."""

REQUIRED_COLUMNS = (Columns.OBS, Columns.ACTIONS, Columns.REWARDS, Columns.TERMINATEDS,
                    Columns.TRUNCATEDS)
"""What MARWIL and BC read; other recorded columns stay on disk (MARWIL also reads
`new_obs`, for the observation that bootstraps a truncated episode's returns)."""

BOOTSTRAP_OBS = "bootstrap_obs"
"""Per row: the observation after the last step of the row's episode (s_T), as the module
sees it (through the same transform as `obs`), repeated for each row of the episode."""
BOOTSTRAP_DISCOUNT = "bootstrap_discount"
"""Per row t of an episode truncated (not terminated) after its step T - 1: gamma^(T - t);
0 for the rows of terminated episodes. MARWIL's Learner adds
`bootstrap_discount * V(bootstrap_obs)` to `value_targets`, with V at the time of the update:
RLlib 2.60's value targets for episodes (GAE with lambda=1 over episodes extended by one
step: `AddOneTsToEpisodesAndTruncate` + `GeneralAdvantageEstimation`)."""


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
                "rlmod.offline.record_episodes.")
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
                f"{file} and {source} describe different spaces; read data of one env at "
                "a time.")
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
            raise OfflineDataError(f"{file} has no column {missing[0]!r}; it was not written "
                                   "by rlmod's EpisodeWriter.")
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
            "Remove or re-record it: rlmod never skips a file silently.") from e


def read_columns(files: Sequence[Path], *, columns: Sequence[str] | None = None,
                 module_id: str | None = None,
                 obs_shape: tuple[int, ...] | None = None) -> Columns_:
    """All rows of `files` in stored order, as numpy columns (observations reshaped to
    `obs_shape`); for inspection and tests, as it holds the whole dataset in memory."""
    parts = [part for file in files for part in _file_chunks(
        file, columns=columns, module_id=module_id, obs_shape=obs_shape, rows=1 << 20)]
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _file_chunks(file: Path, *, columns: Sequence[str] | None, module_id: str | None,
                 obs_shape: tuple[int, ...] | None, rows: int,
                 verify: bool = True) -> Iterator[Columns_]:
    """One file's rows in chunks of whole episodes (of `module_id`); `verify` checks each
    page's checksum (a corrupt page raises instead of decoding to wrong numbers)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    carry: Columns_ = {Columns.REWARDS: np.zeros(0)}  # rows of an unfinished episode
    with _named_errors(file):
        parquet = pq.ParquetFile(file, page_checksum_verification=verify)
        names = parquet.schema_arrow.names
        wanted = [c for c in (columns or names) if c in names]
        if module_id is not None and MODULE_ID in names and MODULE_ID not in wanted:
            wanted.append(MODULE_ID)
        for record_batch in parquet.iter_batches(batch_size=rows, columns=wanted):
            if module_id is not None and MODULE_ID in names:
                record_batch = record_batch.filter(
                    pc.equal(record_batch.column(MODULE_ID), pa.scalar(module_id)))
            cols = {name: _to_numpy(record_batch.column(name), obs_shape
                                    if name in (Columns.OBS, Columns.NEXT_OBS) else None)
                    for name in record_batch.schema.names
                    if not (name == MODULE_ID and columns is not None
                            and MODULE_ID not in columns)}
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
            "EpisodeWriter. Remove or re-record it.")


def _to_numpy(column: Any, shape: tuple[int, ...] | None) -> np.ndarray:
    import pyarrow as pa

    if pa.types.is_fixed_size_list(column.type):
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(column), *(shape or (column.type.list_size,)))
    return column.to_numpy(zero_copy_only=False)


def discounted_returns(rewards: np.ndarray, episode_ends: np.ndarray,
                       gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1} within each episode, vectorized; `[N] -> [N]` float32.

    Rows of an episode are contiguous and `episode_ends` marks each episode's last row
    (rows after the last mark count as one more episode). Within a segment,
    G_t = sum_k gamma^(k-t) r_k is a reverse cumulative sum of r_k * gamma^(k-s) divided
    by gamma^(t-s) (s: the segment start; the powers come from one table of at most
    `max_len` entries); segments are the episodes, cut every `max_len` rows where
    gamma^max_len would fall below 1e-3 (bounding the rounding that the division
    amplifies), and the returns at such cuts are carried backwards in a short loop.
    About 13 ns per row (cProfile of the MARWIL reader: this was its largest own cost).
    """
    return _returns(rewards, episode_ends, gamma)[0]


def _returns(rewards: np.ndarray, episode_ends: np.ndarray, gamma: float
             ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """`discounted_returns`, plus what `add_return_columns` reuses: gamma^k per row (k:
    the step within its episode; None where episodes were cut into segments or gamma is
    0), and each episode's last row and length."""
    n = len(rewards)
    r = rewards.astype(np.float64)
    ends = episode_ends.astype(bool, copy=False)
    lasts = np.flatnonzero(ends)
    if n and (not len(lasts) or lasts[-1] != n - 1):  # rows after the last end: one more
        lasts = np.r_[lasts, n - 1]
    lens = np.diff(lasts, prepend=-1)
    if n == 0 or gamma == 0.0:
        return r.astype(np.float32), None, lasts, lens
    rows = np.arange(n)
    k = rows - np.repeat(lasts + 1 - lens, lens)  # step within the episode
    log_gamma = math.log(gamma)
    max_len = n if gamma >= 1.0 else max(1, int(math.log(1e-3) / log_gamma))
    cut = bool(lens.max() > max_len)
    if cut:
        k %= max_len  # step within the segment
    w = np.exp(np.arange(int(k.max()) + 1) * log_gamma)[k]  # gamma^(t-s)
    # sums[j] = sum of (r * w) over the last j rows (sums[0] = 0): the suffix sum from row
    # t on is sums[n - t], so the one after row `last` is sums[n - last - 1]
    sums = np.zeros(n + 1)
    np.cumsum((r * w)[::-1], out=sums[1:])
    suffix = sums[n:0:-1]
    if cut:
        seg_last = np.minimum(np.repeat(lasts, lens), rows - k + max_len - 1)
        after = sums[n - seg_last - 1]
    else:  # one segment per episode: the suffix sum after it, gathered per episode
        after = np.repeat(sums[n - lasts - 1], lens)
    g = suffix - after
    g /= w
    if cut:  # segments cut inside an episode carry the next one's first return backwards
        inner = np.flatnonzero((k == max_len - 1) & (rows != np.repeat(lasts, lens)))
        for last in inner[::-1].tolist():
            first = last - max_len + 1
            g[first:last + 1] += g[last + 1] * np.exp(
                (last + 1 - np.arange(first, last + 1)) * log_gamma)
    return g.astype(np.float32), None if cut else w, lasts, lens


def add_return_columns(cols: Columns_, gamma: float, *, keep_next_obs: bool = True,
                       finals: np.ndarray | None = None) -> np.ndarray:
    """Adds `value_targets` (each row's discounted return to its episode's end),
    `bootstrap_discount` and `bootstrap_obs` (see their constants) to a chunk of whole
    episodes; `new_obs` is dropped unless `keep_next_obs`. The last row ends an episode
    (a chunk cut without an end flag counts as a terminated episode's end).

    The observation after each truncated episode comes from `finals` (one per truncated
    episode, in order: what an earlier call returned, see FinalsCache) or else from the
    chunk's `new_obs`; data without `new_obs` are refused only where an episode was
    truncated (nothing to bootstrap from). Returns the truncated episodes' finals used.
    """
    rewards = cols[Columns.REWARDS]
    terminated, truncated = cols[Columns.TERMINATEDS], cols[Columns.TRUNCATEDS]
    cols[Columns.VALUE_TARGETS], w, lasts, lens = _returns(rewards, terminated | truncated,
                                                           gamma)
    n = len(rewards)
    next_obs = cols.get(Columns.NEXT_OBS) if keep_next_obs else cols.pop(Columns.NEXT_OBS, None)
    bootstrapped = truncated[lasts] & ~terminated[lasts]  # [episodes]
    obs = cols[Columns.OBS]
    if finals is None:
        if next_obs is None and bootstrapped.any():
            raise OfflineDataError(
                f"MARWIL bootstraps truncated episodes' returns from the observation after "
                f"their last step, the {Columns.NEXT_OBS!r} column, which these data lack; "
                "record them with rlmod's writers (they store it), or train BC (beta=0), "
                "which needs no returns.")
        finals = (next_obs[lasts[bootstrapped]] if next_obs is not None  # a copy
                  else np.empty((0, *obs.shape[1:]), obs.dtype))  # (a view would pin obs)
    else:
        finals = finals[:int(bootstrapped.sum())]
    discount = np.zeros(n, np.float32)
    per_episode = np.zeros((len(lasts), *obs.shape[1:]), obs.dtype)
    if bootstrapped.any():
        per_episode[bootstrapped] = finals
        if w is not None:  # gamma^(T - t) = gamma^T / gamma^t (both >= 1e-3 * gamma here)
            discount = (np.repeat(np.where(bootstrapped, np.exp(lens * math.log(gamma)), 0.0),
                                  lens) / w).astype(np.float32)
        elif gamma > 0.0:
            steps_left = np.repeat(lasts + 1, lens) - np.arange(n)  # T - t: 1 at the last row
            discount = (np.exp(steps_left * math.log(gamma))
                        * np.repeat(bootstrapped, lens)).astype(np.float32)
    cols[BOOTSTRAP_DISCOUNT] = discount
    cols[BOOTSTRAP_OBS] = np.repeat(per_episode, lens, axis=0)
    return finals


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


def episode_chunks(source: Path | ChunkSource, *, columns: Sequence[str] | None,
                   module_id: str | None, obs_shape: tuple[int, ...] | None, rows: int,
                   gamma: float | None, transform: Transform | None,
                   finals_cache: FinalsCache | None = None) -> Iterator[Columns_]:
    """One file's (or source's) rows as training rows, in chunks of whole episodes: unless
    `gamma` is None, the discounted returns as `value_targets` and what bootstraps a
    truncated episode's (`add_return_columns`; `new_obs` is read for it, unless
    `finals_cache` holds this source's); then `transform` applied. Shared by
    OfflineReader and the Ray Data readers.

    Pages' checksums are verified unless `finals_cache` has seen this source read whole
    (`FinalsCache.verified`): files are written once and renamed complete, so a file
    that checked out on one pass holds the same bytes on the next.
    """
    keep_next_obs = columns is None or Columns.NEXT_OBS in columns
    cached = None
    if gamma is not None and not keep_next_obs:
        cached = None if finals_cache is None else finals_cache.get(source)
        if cached is None:
            columns = [*columns, Columns.NEXT_OBS]  # type: ignore[misc]
    verified = finals_cache is not None and source in finals_cache.verified
    chunks = (_file_chunks(source, columns=columns, module_id=module_id, obs_shape=obs_shape,
                           rows=rows, verify=not verified) if isinstance(source, Path)
              else source.chunks(columns=columns, module_id=module_id, obs_shape=obs_shape,
                                 rows=rows))
    found: list[np.ndarray] = []
    used = 0
    for cols in chunks:
        if gamma is not None:
            if cached is None:
                found.append(add_return_columns(cols, gamma, keep_next_obs=keep_next_obs))
            else:
                used += len(add_return_columns(cols, gamma, keep_next_obs=keep_next_obs,
                                               finals=cached[used:]))
        yield cols if transform is None else transform(cols)
    if finals_cache is not None:  # read whole: checked, and its finals known
        finals_cache.verified.add(source)
        if gamma is not None and cached is None and found:
            finals_cache.put(source, np.concatenate(found))


class OfflineReader:
    """Yields training batches of `batch_size` rows for one module, without end.

    Args:
        files: Parquet files written by EpisodeWriter (see `resolve_files`), or other
            sources of whole-episode chunks (e.g. `minari_source.MinariSource`).
        batch_size: Rows per batch.
        gamma: Discount of the returns added as `value_targets` (MARWIL's regression
            target); None adds none (BC needs none). A truncated episode's rows also get
            `bootstrap_discount` and `bootstrap_obs`, with which MARWIL's Learner adds the
            value of the observation after the truncation, as RLlib does.
        shuffle_buffer_size: Rows kept back to mix with the next read chunk; each refill
            shuffles these, what is left of the last one and one new chunk of whole
            episodes together.
        module_id: Which module's rows to read (multi-agent data).
        seed: Seeds the file order and the shuffle.
        obs_shape: Shape of one stored (raw) observation.
        transform: Applied to each chunk of whole episodes after reading (MARWIL passes
            the env-to-module connectors here).
        columns: Which stored columns to read.

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

    def __init__(self, files: Sequence[Path | ChunkSource], *, batch_size: int, gamma: float | None = 0.99,
                 shuffle_buffer_size: int = 10_000, module_id: str | None = None,
                 seed: int | None = None, obs_shape: tuple[int, ...] | None = None,
                 transform: Transform | None = None,
                 columns: Sequence[str] = REQUIRED_COLUMNS) -> None:
        if not files:
            raise OfflineDataError("OfflineReader got no files to read.")
        self.files = list(files)
        self.batch_size = batch_size
        self.gamma = gamma
        self.keep = shuffle_buffer_size
        self.read_rows = max(batch_size, 1024)  # grown to READ_CHUNK_BYTES after one chunk
        self.module_id = module_id
        self.obs_shape = obs_shape
        self.transform = transform
        self.columns = list(columns)
        self._rng = np.random.default_rng(seed)
        self._pool: Columns_ = {}
        self._pos = 0
        self._chunks = self._endless_chunks()
        self.num_rows_read = 0
        self.finals_cache = FinalsCache()

    def __iter__(self) -> Iterator[Columns_]:
        while True:
            yield self.next_batch()

    def next_batch(self) -> Columns_:
        """The next `batch_size` rows, from a shuffled pool that always keeps
        `shuffle_buffer_size` rows back to mix with the next chunk."""
        while self._left() < self.batch_size + self.keep:
            self._refill()
        pos, self._pos = self._pos, self._pos + self.batch_size
        return {k: v[pos:self._pos] for k, v in self._pool.items()}

    def _left(self) -> int:
        return len(self._pool[Columns.REWARDS]) - self._pos if self._pool else 0

    def _refill(self) -> None:
        """Reads chunks of at least `read_rows` rows and shuffles them together with what
        is left of the pool into a new pool (a join and a gather per column)."""
        sources = [{k: v[self._pos:] for k, v in self._pool.items()}] if self._left() else []
        need = max(self.read_rows, self.batch_size + self.keep - self._left())
        new_rows = 0
        while new_rows < need:
            chunk = next(self._chunks)
            sources.append(chunk)
            new_rows += len(chunk[Columns.REWARDS])
        joined = sources[0] if len(sources) == 1 else {
            k: np.concatenate([src[k] for src in sources]) for k in sources[-1]}
        # A gather (np.take) is twice as fast as a scatter into a new pool (measured).
        order = self._rng.permutation(len(joined[Columns.REWARDS]))
        self._pool = {k: np.take(v, order, axis=0) for k, v in joined.items()}
        self._pos = 0

    def _endless_chunks(self) -> Iterator[Columns_]:
        """Chunks of whole episodes with `value_targets`, a new file order every pass."""
        while True:
            rows_this_pass = 0
            for i in self._rng.permutation(len(self.files)).tolist():
                for cols in episode_chunks(
                        self.files[i], columns=self.columns, module_id=self.module_id,
                        obs_shape=self.obs_shape, rows=self.read_rows, gamma=self.gamma,
                        transform=self.transform, finals_cache=self.finals_cache):
                    n = len(cols[Columns.REWARDS])
                    if n and self.read_rows == max(self.batch_size, 1024):
                        row_bytes = sum(v.nbytes for v in cols.values()) / n
                        self.read_rows = int(min(MAX_READ_ROWS, max(
                            self.read_rows, READ_CHUNK_BYTES // row_bytes)))
                    rows_this_pass += n
                    self.num_rows_read += n
                    yield cols
            if not rows_this_pass:
                raise OfflineDataError(
                    f"The offline data ({len(self.files)} files, e.g. {self.files[0]}) holds "
                    "no rows" + (f" of module {self.module_id!r}." if self.module_id else "."))
