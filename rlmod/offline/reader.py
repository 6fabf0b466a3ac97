"""OfflineReader: recorded episodes from Parquet files, as shuffled training batches.

Used by offline algorithms (BC, MARWIL) in place of EnvRunners. Files are read one at a
time in a shuffled order with pyarrow (streaming: memory is bounded by one file's rows
plus the shuffle buffer, not by the dataset); each episode's discounted returns are
computed when its file is read (episodes never span files), and rows then go through a
shuffle buffer, so a batch mixes rows of many episodes and files.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.connectors.learner import compute_gae
from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline.writer import MODULE_ID, SPACES_FILE, TIMESTEP
from rlmod.utils.spaces import space_from_dict
from rlmod.utils.state_files import read_json


def resolve_files(input_: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The Parquet files of a directory, a glob, a file, or a list of these (sorted);
    temporary files of unfinished writes are never taken."""
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
        if not found:
            raise OfflineDataError(
                f"offline_data(input_={str(item)!r}) matches no Parquet file; record some "
                "with config.offline_data(output=DIR) or `rlmod record`.")
        files += [f for f in found if not f.name.startswith(".")]
    return files


def read_spaces(files: Sequence[Path]) -> dict[str, tuple[gym.Space, gym.Space]]:
    """The spaces stored beside the files ({module_id or "__env__": (obs, act)}); all
    directories involved must agree."""
    found: dict[str, Any] | None = None
    source = None
    for directory in sorted({f.parent for f in files}):
        file = directory / SPACES_FILE
        if not file.exists():
            continue
        data = read_json(file)
        if found is not None and data != found:
            raise OfflineDataError(
                f"{file} and {source} describe different spaces; read data of one env and "
                "model at a time.")
        found, source = data, file
    if found is None:
        raise OfflineDataError(
            f"No {SPACES_FILE} beside {files[0]}: set "
            "config.environment(observation_space=..., action_space=...) instead.")
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


class OfflineReader:
    """Yields training batches of `batch_size` rows for one module, without end.

    Args:
        files: Parquet files written by EpisodeWriter (see `resolve_files`).
        batch_size: Rows per batch.
        gamma: Discount of the returns added as `value_targets` (MARWIL's regression
            target). A truncated episode's return is cut at the truncation (not
            bootstrapped: offline there is no value estimate of the next state to trust).
        shuffle_buffer_size: Rows held for shuffling (at least `batch_size`).
        module_id: Which module's rows to read (multi-agent data).
        seed: Seeds the file order and the shuffle.
    """

    def __init__(self, files: Sequence[Path], *, batch_size: int, gamma: float = 0.99,
                 shuffle_buffer_size: int = 10_000, module_id: str | None = None,
                 seed: int | None = None, shapes: dict[str, tuple[int, ...]] | None = None
                 ) -> None:
        self.files = list(files)
        self.batch_size = batch_size
        self.gamma = gamma
        self.buffer_size = max(shuffle_buffer_size, batch_size)
        self.module_id = module_id
        self.shapes = dict(shapes or {})
        self._rng = np.random.default_rng(seed)
        self._buffer: dict[str, np.ndarray] = {}
        self._files: Iterator[Path] = iter(())
        self.num_rows_read = 0

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        while True:
            yield self.next_batch()

    def next_batch(self) -> dict[str, np.ndarray]:
        """The next `batch_size` rows, drawn at random from the shuffle buffer."""
        while self._buffer_rows() < self.buffer_size:
            self._add(self._read_next_file())
        n = self._buffer_rows()
        take = self._rng.choice(n, size=self.batch_size, replace=False)
        keep = np.ones(n, dtype=bool)
        keep[take] = False
        batch = {k: v[take] for k, v in self._buffer.items()}
        self._buffer = {k: v[keep] for k, v in self._buffer.items()}
        return batch

    def _buffer_rows(self) -> int:
        return len(next(iter(self._buffer.values()))) if self._buffer else 0

    def _add(self, rows: dict[str, np.ndarray]) -> None:
        if not self._buffer:
            self._buffer = rows
        else:
            self._buffer = {k: np.concatenate([self._buffer[k], rows[k]]) for k in rows}

    def _read_next_file(self) -> dict[str, np.ndarray]:
        for _ in range(2):
            for file in self._files:
                rows = self.read_file(file)
                if len(rows[Columns.REWARDS]):
                    return rows
            order = self._rng.permutation(len(self.files))  # a new pass, a new order
            self._files = iter([self.files[i] for i in order])
        raise OfflineDataError(
            f"The offline data ({len(self.files)} files, e.g. {self.files[0]}) holds no rows"
            + (f" of module {self.module_id!r}." if self.module_id else "."))

    def read_file(self, file: Path) -> dict[str, np.ndarray]:
        """One file's rows (of `module_id`) as columns, with `value_targets` added."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(file)
        except (pa.ArrowException, OSError) as e:
            raise OfflineDataError(
                f"{file} is not a readable Parquet file ({e}); it is truncated or corrupt. "
                "Remove or re-record it: rlmod never skips a file silently.") from e
        if self.module_id is not None and MODULE_ID in table.column_names:
            table = table.filter(pa.compute.equal(table[MODULE_ID], self.module_id))
        missing = [c for c in (Columns.OBS, Columns.ACTIONS, Columns.REWARDS,
                               Columns.TERMINATEDS, Columns.TRUNCATEDS, Columns.EPS_ID)
                   if c not in table.column_names]
        if missing:
            raise OfflineDataError(f"{file} has no column {missing[0]!r}; it was not "
                                   "written by rlmod's EpisodeWriter.")
        cols = {c: _to_numpy(table[c], self.shapes.get(c)) for c in table.column_names
                if c not in (MODULE_ID, TIMESTEP)}
        cols[Columns.VALUE_TARGETS] = discounted_returns(
            cols[Columns.REWARDS], cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS],
            self.gamma)
        self.num_rows_read += len(cols[Columns.REWARDS])
        return cols


def _to_numpy(column: Any, shape: tuple[int, ...] | None) -> np.ndarray:
    import pyarrow as pa

    chunked = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_fixed_size_list(chunked.type):
        flat = chunked.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(chunked), *(shape or (chunked.type.list_size,)))
    return chunked.to_numpy(zero_copy_only=False)


def discounted_returns(rewards: np.ndarray, episode_ends: np.ndarray,
                       gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1} within each episode; rows of an episode are contiguous
    and `episode_ends` marks each episode's last row. [N] -> [N] float32. (GAE with
    lambda=1 and no values is exactly this recursion.)"""
    zeros = np.zeros(len(rewards), dtype=np.float64)
    ends = episode_ends.astype(np.float64)
    return compute_gae(rewards.astype(np.float64), zeros, zeros, ends, ends,
                       gamma=gamma, lambda_=1.0)[0]
