"""EpisodeWriter: finished episodes from EnvRunner batches (or any policy) to Parquet files.

Used by the EnvRunners when `config.offline_data(output=DIR)` is set (MultiAgentEnvRunner
through RowRecorder), by `rlmod record`, and by `record_episodes` for any policy (a
scripted one included). One row per timestep; rows of an episode are written together once it has ended, into rolling
files of at most `max_rows_per_file` rows (an episode never spans two files). Each file is
written under a temporary name and renamed when complete, so a crash never leaves a file a
reader would take. The spaces are stored once, as JSON, in `spaces.json` beside the files.

Observations are stored raw, as the env returned them (not as the module saw them): the
reader runs the env-to-module connectors of the training config on them, so the data does
not depend on the connectors of the policy that recorded it. Dict and Tuple observations
are one struct column per observation column, a field per part in its own dtype and shape
(a uint8 image stays 1 byte a pixel; rlmod.offline.struct_obs).
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.errors import OfflineDataError
from rlmod.offline import struct_obs
from rlmod.utils.spaces import space_to_dict
from rlmod.utils.state_files import write_json

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig
    from rlmod.connectors.pipeline import ConnectorPipeline
    from rlmod.core.multi_rl_module import ModuleID
    from rlmod.env.module_spaces import ModuleSpaces
    from rlmod.env.multi_agent_env import AgentID

SPACES_FILE = "spaces.json"
ENV_KEY = "__env__"
"""Key of the raw env's spaces in `spaces.json` (as in `EnvRunner.get_spaces()`)."""
TIMESTEP = "t"
"""Column: the row's timestep within its episode (0 for the first action)."""
MODULE_ID = "module_id"
AGENT_ID = "agent_id"

RECORDED_COLUMNS = (
    Columns.EPS_ID,
    AGENT_ID,
    TIMESTEP,
    Columns.OBS,
    Columns.ACTIONS,
    Columns.REWARDS,
    Columns.TERMINATEDS,
    Columns.TRUNCATEDS,
    Columns.NEXT_OBS,
    Columns.ACTION_LOGP,
)
"""The columns of a file, in order (`agent_id` and `action_logp` only where known), plus
`module_id`."""

ROW_GROUP_ROWS = 8192
"""Rows per Parquet row group: a reader holds one row group's column chunks at a time, so
this bounds its memory however large the files are."""

STORABLE_SPACES = (*struct_obs.LEAF_SPACES, *struct_obs.NESTED_SPACES)
"""Observation spaces the writer stores: Box, Discrete, MultiDiscrete, MultiBinary, and
Dict/Tuple spaces of these (as struct columns)."""


def _unstorable(space: gym.Space) -> str | None:
    """Why raw observations of `space` cannot be stored, in words; None if they can."""
    if not isinstance(space, STORABLE_SPACES):
        return f"it is a {type(space).__name__}"
    return struct_obs.unstorable_part(space) if struct_obs.is_nested(space) else None


class EpisodeWriter:
    """Collects rows per episode and writes finished episodes to Parquet.

    Stored episode IDs are the given ones plus `episode_id_offset` (random per writer), so
    that episodes of writers sharing a directory keep apart.

    Args:
        output_dir: Where the files go (created if missing).
        spaces: `{"__env__": (obs, act)}` of the raw env, plus `{module_id: (obs, act)}`
            of what each module saw when recording; stored in `spaces.json`.
        max_rows_per_file: Rows per file before a new one is started (an episode longer
            than this gets a file of its own).
        file_prefix: Distinguishes writers (EnvRunners) that share `output_dir`.
        seed: Makes the file names and stored episode IDs a function of the seed (else
            random), so that a seeded recording is the same files, bit for bit, every
            time: the reader's file order (and so its batches) then repeat too.

    Example:
        >>> import gymnasium as gym, numpy as np, tempfile
        >>> space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        >>> writer = EpisodeWriter(tempfile.mkdtemp(), spaces={
        ...     "__env__": (space, gym.spaces.Discrete(2))})
        >>> writer.add_batch({"default_policy": {
        ...     "eps_id": np.array([7, 7]), "obs": np.zeros((2, 2), np.float32),
        ...     "actions": np.array([0, 1]), "rewards": np.array([1.0, 1.0], np.float32),
        ...     "terminateds": np.array([False, True]), "truncateds": np.array([False, False]),
        ...     "new_obs": np.zeros((2, 2), np.float32)}})
        >>> writer.close()
        >>> writer.num_episodes_written, writer.num_rows_written
        (1, 2)
    """

    def __init__(
        self,
        output_dir: str | os.PathLike,
        *,
        spaces: Mapping[str, tuple[gym.Space, gym.Space]],
        max_rows_per_file: int = 100_000,
        file_prefix: str = "",
        seed: int | None = None,
    ) -> None:
        import pyarrow  # noqa: F401 - fail here, with the install hint, not mid-sampling

        env_obs = spaces[ENV_KEY][0] if ENV_KEY in spaces else None
        problem = None if env_obs is None else _unstorable(env_obs)
        if problem is not None:
            raise OfflineDataError(
                f"offline_data(output=...) stores raw observations of Box, Discrete, "
                f"MultiDiscrete or MultiBinary spaces, and of Dict/Tuple spaces (with string "
                f"keys) of these; this env's {env_obs} cannot be stored: {problem}. Wrap the "
                "env in gymnasium.wrappers.FlattenObservation to record it."
            )
        self._obs_space = env_obs
        self.output_dir = Path(output_dir)
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as e:  # a file at or above the path
            raise OfflineDataError(
                f"offline_data(output={str(output_dir)!r}) cannot be a directory: {e.filename} "
                "is a file. Choose a directory path (an existing one keeps its files: "
                "rlmod only adds episode files and spaces.json)."
            ) from None
        self.max_rows_per_file = max_rows_per_file
        uid = (
            uuid.uuid4()
            if seed is None
            else uuid.UUID(int=random.Random(f"rlmod-writer-{seed}").getrandbits(128))
        )
        self.prefix = f"{file_prefix or 'episodes'}-{uid.hex[:8]}"
        # Episode IDs are unique per EnvRunner only: a random 31-bit high half makes the
        # stored IDs unique across the writers (runs, EnvRunners) that share a directory.
        self.episode_id_offset = (uid.int & 0x7FFF_FFFF) << 32
        self._write_spaces(spaces)
        self._pending: dict[tuple[str, int, str | None], list[dict[str, np.ndarray]]] = {}
        self._ready: list[dict[str, np.ndarray]] = []
        self._num_ready = 0
        self._num_files = 0
        self.num_episodes_written = 0
        self.num_rows_written = 0

    def _write_spaces(self, spaces: Mapping[str, tuple[gym.Space, gym.Space]]) -> None:
        data = {
            key: {"observation_space": space_to_dict(obs), "action_space": space_to_dict(act)}
            for key, (obs, act) in spaces.items()
        }
        file = self.output_dir / SPACES_FILE
        if file.exists():
            from rlmod.offline.reader import load_spaces_json

            if load_spaces_json(file) != data:
                raise OfflineDataError(
                    f"{file} describes other spaces than this writer's: {self.output_dir} "
                    "already holds episodes of another env or model; write to a new dir."
                )
            return
        tmp = file.with_name(f".{SPACES_FILE}.{uuid.uuid4().hex[:8]}.tmp")
        write_json(tmp, data, indent=1)
        os.replace(tmp, file)  # atomic: concurrent writers agree or one of them raises

    # ------------------------------------------------------------------ adding rows
    def add_batch(self, batch: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """Adds what an EnvRunner's `sample()` returned ({module_id: columns}); episodes
        that ended are queued for writing, the others wait for their next rows.

        Rows of one episode (and agent) must be contiguous and in time order, as
        EnvRunners return them; an episode may continue in a later batch.
        """
        for module_id, given in batch.items():
            # Copied: a Learner may change the batch in place (torch.from_numpy shares
            # memory) before the rows are written.
            cols = {k: self._column(k, v) for k, v in given.items() if k in RECORDED_COLUMNS}
            eps_id = cols[Columns.EPS_ID]
            if not len(eps_id):
                continue
            done = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
            agent = cols.get(AGENT_ID)
            # Rows of one (episode, agent) are contiguous: split where either changes.
            change = eps_id[1:] != eps_id[:-1]
            if agent is not None:
                change = change | (agent[1:] != agent[:-1])
            starts = np.flatnonzero(np.r_[True, change])
            ends = np.r_[starts[1:], len(eps_id)]
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                rows = {k: v[s:e] for k, v in cols.items()}
                key = (module_id, int(eps_id[s]), None if agent is None else str(agent[s]))
                self._pending.setdefault(key, []).append(rows)
                if done[e - 1]:
                    self._finish(module_id, self._pending.pop(key))
        if self._num_ready >= self.max_rows_per_file:
            self.flush()

    def _column(self, name: str, values: Any) -> np.ndarray:
        """A copy of one given column; Dict/Tuple observations given as a dict/tuple of
        arrays (as a vector env returns them) become a structured array."""
        if (
            name in (Columns.OBS, Columns.NEXT_OBS)
            and isinstance(values, dict | tuple)
            and isinstance(self._obs_space, struct_obs.NESTED_SPACES)
        ):
            return struct_obs.to_rows(self._obs_space, values)
        return np.array(values)

    def _finish(self, module_id: str, parts: list[dict[str, np.ndarray]]) -> None:
        episode = (
            parts[0]
            if len(parts) == 1
            else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        )
        n = len(episode[Columns.EPS_ID])
        episode[TIMESTEP] = np.arange(n, dtype=np.int32)
        episode[Columns.EPS_ID] = episode[Columns.EPS_ID].astype(np.int64) + self.episode_id_offset
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
            while self._ready and (
                not take or rows + len(self._ready[0][Columns.EPS_ID]) <= self.max_rows_per_file
            ):
                ep = self._ready.pop(0)
                take.append(ep)
                rows += len(ep[Columns.EPS_ID])
            self._num_ready -= rows
            self._write_file(take)

    def _write_file(self, episodes: list[dict[str, np.ndarray]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = [c for c in (*RECORDED_COLUMNS, MODULE_ID) if c in episodes[0]]
        table = pa.table(
            {c: _to_arrow(np.concatenate([ep[c] for ep in episodes])) for c in columns}
        )
        name = f"{self.prefix}-{self._num_files:05d}.parquet"
        tmp = self.output_dir / f".{name}.tmp"
        if (self.output_dir / name).exists():
            raise OfflineDataError(
                f"{self.output_dir / name} exists already: this directory was recorded into "
                "with the same seed before. Record into a new directory or use another seed."
            )
        # Page CRCs: a reader verifies them, so flipped bytes fail loudly, never silently.
        pq.write_table(table, tmp, write_page_checksum=True, row_group_size=ROW_GROUP_ROWS)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.output_dir / name)  # readers never see a half-written file
        self._num_files += 1
        self.num_rows_written += table.num_rows

    def drop_pending(self) -> None:
        """Forgets the rows of unfinished episodes (their env was reset: they never end)."""
        self._pending.clear()

    def close(self) -> None:
        """Writes what is queued; rows of unfinished episodes are dropped (never written
        half)."""
        self.flush()
        self._pending.clear()


class RowRecorder:
    """An EpisodeWriter fed with MultiAgentEnvRunner's per-module batches, each row's
    agent given by its (env, agent) slot (`env_index * len(agents) + agent_index`)."""

    def __init__(self, writer: EpisodeWriter, agents: list[AgentID]) -> None:
        self.writer = writer
        self.agents = agents
        self._names = np.array([str(a) for a in agents], dtype=object)

    @classmethod
    def create(
        cls,
        config: AlgorithmConfig,
        *,
        module_ids: list[ModuleID],
        spaces: ModuleSpaces,
        module_to_env: dict[ModuleID, ConnectorPipeline],
        env_spaces: dict[str, tuple[gym.Space, gym.Space]],
        agents: list[AgentID],
        worker_index: int,
    ) -> RowRecorder | None:
        """A recorder when `config.output` is set (else None); an OfflineDataError where a
        module's connectors would make the recorded rows differ from the env's (the
        single-agent EnvRunner records raw data in every case)."""
        if config.output is None:
            return None
        for mid in module_ids:
            pipeline = spaces.env_to_module.get(mid)
            if (pipeline is not None and len(pipeline)) or len(module_to_env[mid]) > 1:
                raise OfflineDataError(
                    f"offline_data(output=...) with a MultiAgentEnvRunner records what the "
                    f"modules see; module {mid!r} sees transformed observations ({pipeline}) "
                    "or maps its actions into the env's space, which would make the "
                    "recorded rows differ from the env's. Record envs with flat float32 Box "
                    "observations and Discrete actions starting at 0, or leave output unset."
                )
        writer = EpisodeWriter(
            config.output,
            spaces=env_spaces,
            max_rows_per_file=config.output_max_rows_per_file,
            file_prefix=f"env_runner_{worker_index}",
        )
        return cls(writer, agents)

    def write(self, module_id: ModuleID, batch: dict[str, np.ndarray], slots: np.ndarray) -> None:
        """Hands a module's rows to the writer with each row's agent ID (from `slots`)."""
        self.writer.add_batch(
            {module_id: {**batch, AGENT_ID: self._names[slots % len(self.agents)]}}
        )


def _to_arrow(values: np.ndarray) -> Any:
    """A column as Arrow: strings as strings, else `struct_obs.to_arrow` (scalars as they
    are, fixed-shape rows as fixed-size lists, Dict/Tuple observations as structs)."""
    import pyarrow as pa

    if values.dtype == object or values.dtype.kind == "U":
        return pa.array([str(v) for v in values.tolist()], type=pa.string())
    return struct_obs.to_arrow(values)


def record_episodes(
    env: gym.Env,
    policy: Callable[[Any], Any],
    *,
    num_episodes: int,
    output_dir: str | os.PathLike,
    seed: int | None = None,
    max_rows_per_file: int = 100_000,
    on_episode_start: Callable[[], Any] | None = None,
) -> int:
    """Runs `policy(observation) -> action` (any policy, e.g. a scripted controller) on
    `env` for `num_episodes` episodes and writes them as an EnvRunner would (raw
    observations and env actions, the env's spaces in `spaces.json`); returns the number
    of rows written.

    Episode `i` is reset with `seed + i` when `seed` is given (and the files are named
    after `seed`, so a seeded recording gives the same files each time);
    `on_episode_start` is called before each episode (e.g. `InferencePolicy.reset` for stateful connectors).

    Example:
        >>> import gymnasium as gym, tempfile
        >>> env = gym.make("CartPole-v1")
        >>> record_episodes(env, lambda obs: int(obs[2] > 0), num_episodes=2,
        ...                 output_dir=tempfile.mkdtemp(), seed=0) > 0
        True
    """
    writer = EpisodeWriter(
        output_dir,
        max_rows_per_file=max_rows_per_file,
        seed=seed,
        spaces={ENV_KEY: (env.observation_space, env.action_space)},
    )
    for i in range(num_episodes):
        obs, _ = env.reset(seed=None if seed is None else seed + i)
        if on_episode_start is not None:
            on_episode_start()
        rows: dict[str, list[Any]] = {
            c: []
            for c in (
                Columns.OBS,
                Columns.ACTIONS,
                Columns.REWARDS,
                Columns.TERMINATEDS,
                Columns.TRUNCATEDS,
                Columns.NEXT_OBS,
            )
        }
        done = False
        while not done:
            action = policy(obs)
            new_obs, reward, terminated, truncated, _ = env.step(action)
            for c, v in (
                (Columns.OBS, obs),
                (Columns.ACTIONS, action),
                (Columns.REWARDS, reward),
                (Columns.TERMINATEDS, terminated),
                (Columns.TRUNCATEDS, truncated),
                (Columns.NEXT_OBS, new_obs),
            ):
                rows[c].append(v)
            obs, done = new_obs, terminated or truncated
        batch = {c: _stacked(env.observation_space, c, v) for c, v in rows.items()}
        batch[Columns.REWARDS] = batch[Columns.REWARDS].astype(np.float32)
        batch[Columns.EPS_ID] = np.full(len(batch[Columns.REWARDS]), i, dtype=np.int64)
        writer.add_batch({DEFAULT_MODULE_ID: batch})
    writer.close()
    return writer.num_rows_written


def _stacked(obs_space: gym.Space, name: str, values: list[Any]) -> np.ndarray:
    """One episode's values of column `name` as an array (Dict/Tuple observations as a
    structured array)."""
    if name in (Columns.OBS, Columns.NEXT_OBS) and struct_obs.is_nested(obs_space):
        return struct_obs.stack(obs_space, values)
    return np.asarray(values)
