"""EpisodeWriter: finished episodes from EnvRunner batches (or any policy) to Parquet files.

Used by EnvRunnerGroup when `config.offline_data(output=DIR)` is set, by `rlmod record`,
and by `record_episodes` for any policy (a scripted one included). One row per timestep;
rows of an episode are written together once it has ended, into rolling files of at most
`max_rows_per_file` rows. Each file is written under a temporary name and renamed when
complete, so a crash never leaves a file a reader would take. The spaces are stored once,
as JSON, in `spaces.json` beside the files.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.core.columns import Columns
from rlmod.utils.spaces import space_to_dict
from rlmod.utils.state_files import read_json, write_json

SPACES_FILE = "spaces.json"
TIMESTEP = "t"
"""Column: the row's timestep within its episode (0 for the first action)."""
MODULE_ID = "module_id"
AGENT_ID = "agent_id"

RECORDED_COLUMNS = (Columns.EPS_ID, TIMESTEP, Columns.OBS, Columns.ACTIONS, Columns.REWARDS,
                    Columns.TERMINATEDS, Columns.TRUNCATEDS, Columns.NEXT_OBS,
                    Columns.ACTION_LOGP)


class EpisodeWriter:
    """Collects rows per episode and writes finished episodes to Parquet.

    Args:
        output_dir: Where the files go (created if missing).
        spaces: {module_id: (observation_space, action_space)} of what the modules see,
            plus "__env__" for the env's own spaces; stored in `spaces.json`.
        max_rows_per_file: Rows per file before a new one is started.
        file_prefix: Distinguishes writers (EnvRunners) that share `output_dir`.
    """

    def __init__(self, output_dir: str | os.PathLike, *,
                 spaces: Mapping[str, tuple[gym.Space, gym.Space]],
                 max_rows_per_file: int = 100_000, file_prefix: str = "") -> None:
        import pyarrow  # noqa: F401 - fail here, with the install hint, not mid-sampling

        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.max_rows_per_file = max_rows_per_file
        self.prefix = f"{file_prefix or 'episodes'}-{uuid.uuid4().hex[:8]}"
        self._write_spaces(spaces)
        self._pending: dict[tuple[str, int], list[dict[str, np.ndarray]]] = {}
        self._ready: list[dict[str, np.ndarray]] = []
        self._num_ready = 0
        self._num_files = 0
        self.num_episodes_written = 0

    def _write_spaces(self, spaces: Mapping[str, tuple[gym.Space, gym.Space]]) -> None:
        data = {key: {"observation_space": space_to_dict(obs),
                      "action_space": space_to_dict(act)} for key, (obs, act) in spaces.items()}
        file = self.output_dir / SPACES_FILE
        if file.exists():
            if read_json(file) != data:
                raise ValueError(
                    f"{file} describes other spaces than this writer's: {self.output_dir} "
                    "already holds episodes of another env or model; write to a new dir.")
            return
        write_json(file, data, indent=1)

    # ------------------------------------------------------------------ adding rows
    def add_batch(self, batch: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """Adds what an EnvRunner's `sample()` returned ({module_id: columns}); episodes
        that ended are queued for writing, the others wait for their next rows."""
        for module_id, cols in batch.items():
            eps_id = cols[Columns.EPS_ID]
            if not len(eps_id):
                continue
            done = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
            # Rows of one episode are contiguous in a batch: split where the ID changes.
            starts = np.flatnonzero(np.r_[True, eps_id[1:] != eps_id[:-1]])
            ends = np.r_[starts[1:], len(eps_id)]
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                rows = {k: v[s:e] for k, v in cols.items() if k in RECORDED_COLUMNS}
                key = (module_id, int(eps_id[s]))
                self._pending.setdefault(key, []).append(rows)
                if done[e - 1]:
                    self._finish(module_id, self._pending.pop(key))
        if self._num_ready >= self.max_rows_per_file:
            self.flush()

    def _finish(self, module_id: str, parts: list[dict[str, np.ndarray]]) -> None:
        episode = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        n = len(episode[Columns.EPS_ID])
        episode[TIMESTEP] = np.arange(n, dtype=np.int32)
        episode[MODULE_ID] = np.full(n, module_id, dtype=object)
        self._ready.append(episode)
        self._num_ready += n
        self.num_episodes_written += 1

    # ------------------------------------------------------------------ files
    def flush(self) -> None:
        """Writes the queued finished episodes (unfinished ones stay pending)."""
        while self._ready:
            take: list[dict[str, np.ndarray]] = []
            rows = 0
            while self._ready and (not take or rows + len(
                    self._ready[0][Columns.EPS_ID]) <= self.max_rows_per_file):
                ep = self._ready.pop(0)
                take.append(ep)
                rows += len(ep[Columns.EPS_ID])
            self._num_ready -= rows
            self._write_file(take)

    def _write_file(self, episodes: list[dict[str, np.ndarray]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = [c for c in (*RECORDED_COLUMNS, MODULE_ID) if c in episodes[0]]
        arrays = {}
        for c in columns:
            values = np.concatenate([ep[c] for ep in episodes])
            arrays[c] = _to_arrow(values)
        table = pa.table(arrays)
        name = f"{self.prefix}-{self._num_files:05d}.parquet"
        tmp = self.output_dir / f".{name}.tmp"
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.rename(tmp, self.output_dir / name)
        self._num_files += 1

    def close(self) -> None:
        """Writes what is queued; rows of unfinished episodes are dropped (never written
        half)."""
        self.flush()
        self._pending.clear()


def _to_arrow(values: np.ndarray) -> Any:
    """A column as Arrow: scalars as they are, fixed-shape rows as fixed-size lists."""
    import pyarrow as pa

    if values.dtype == object:
        return pa.array(values.tolist(), type=pa.string())
    if values.ndim == 1:
        return pa.array(values)
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))


def record_episodes(env: gym.Env, policy: Callable[[Any], Any], *, num_episodes: int,
                    output_dir: str | os.PathLike, seed: int | None = None,
                    max_rows_per_file: int = 100_000) -> int:
    """Runs `policy(observation) -> action` (any policy, e.g. a scripted controller) on
    `env` for `num_episodes` episodes and writes them as an EnvRunner would; returns the
    number of rows written. Observations are stored as the env returns them, so use this
    for envs whose observations are flat Boxes (what the default modules see unchanged).

    Example:
        >>> import gymnasium as gym, tempfile
        >>> env = gym.make("CartPole-v1")
        >>> record_episodes(env, lambda obs: int(obs[2] > 0), num_episodes=2,
        ...                 output_dir=tempfile.mkdtemp(), seed=0) > 0
        True
    """
    writer = EpisodeWriter(output_dir, max_rows_per_file=max_rows_per_file, spaces={
        "__env__": (env.observation_space, env.action_space),
        "default_policy": (env.observation_space, env.action_space)})
    total = 0
    for i in range(num_episodes):
        obs, _ = env.reset(seed=None if seed is None else seed + i)
        rows: dict[str, list[Any]] = {c: [] for c in RECORDED_COLUMNS if c != TIMESTEP}
        done = False
        while not done:
            action = policy(obs)
            new_obs, reward, terminated, truncated, _ = env.step(action)
            for c, v in ((Columns.OBS, obs), (Columns.ACTIONS, action),
                         (Columns.REWARDS, reward), (Columns.TERMINATEDS, terminated),
                         (Columns.TRUNCATEDS, truncated), (Columns.NEXT_OBS, new_obs)):
                rows[c].append(v)
            obs, done = new_obs, terminated or truncated
        n = len(rows[Columns.REWARDS])
        batch = {c: np.asarray(v) for c, v in rows.items() if v}
        batch[Columns.REWARDS] = batch[Columns.REWARDS].astype(np.float32)
        batch[Columns.EPS_ID] = np.full(n, i, dtype=np.int64)
        writer.add_batch({"default_policy": batch})
        total += n
    writer.close()
    return total
