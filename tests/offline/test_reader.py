"""OfflineReader: every row once per pass, shuffled across files, returns as a hand
computation, broken files named (never skipped), memory bounded by the buffers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlmod.connectors.module_to_env import _plan, _to_env, actions_from_env
from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline import OfflineReader, record_episodes
from rlmod.offline.parquet_chunks import read_columns
from rlmod.offline.reader import REQUIRED_COLUMNS, check_files, resolve_files
from rlmod.offline.returns import discounted_returns
from rlmod.offline.writer import TIMESTEP


def _loop_returns(rewards: np.ndarray, ends: np.ndarray, gamma: float) -> np.ndarray:
    out, last = np.zeros(len(rewards)), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        last = rewards[t] + gamma * last * (not ends[t])
        out[t] = last
    return out


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.99, 0.999, 1.0])
def test_discounted_returns_match_the_recursion(gamma: float) -> None:
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=5000).astype(np.float32)
    ends = rng.random(5000) < 0.002  # episodes of ~500 rows: segments cut inside them
    ends[-1] = True
    np.testing.assert_allclose(
        discounted_returns(rewards, ends, gamma),
        _loop_returns(rewards.astype(np.float64), ends, gamma),
        rtol=1e-5,
        atol=1e-5,
    )


def test_discounted_returns_by_hand() -> None:
    got = discounted_returns(np.array([1.0, 2.0, 3.0, 4.0]), np.array([0, 1, 0, 1]), 0.5)
    assert got.tolist() == [2.0, 2.0, 5.0, 4.0]


def test_one_pass_yields_every_row_once_in_shuffled_order(expert_dir: Path) -> None:
    files = resolve_files(expert_dir)
    everything = read_columns(files, obs_shape=(4,))
    n = len(everything[Columns.REWARDS])
    reader = OfflineReader(
        files, batch_size=n, shuffle_buffer_size=0, seed=0, obs_shape=(4,), columns=[*everything]
    )
    batch = reader.next_batch()
    order = np.lexsort((batch[TIMESTEP], batch[Columns.EPS_ID]))
    for k, v in everything.items():
        got = batch[k][order]
        assert got.tolist() == v.tolist() if v.dtype == object else got.tobytes() == v.tobytes()
    assert not np.array_equal(batch[Columns.EPS_ID], everything[Columns.EPS_ID])


def test_small_batches_mix_files_and_episodes(expert_dir: Path) -> None:
    files = resolve_files(expert_dir)
    assert len(files) == 3
    reader = OfflineReader(
        files,
        batch_size=100,
        shuffle_buffer_size=4000,
        seed=0,
        obs_shape=(4,),
        columns=[*REQUIRED_COLUMNS, Columns.EPS_ID],
    )
    batch = reader.next_batch()
    assert len(np.unique(batch[Columns.EPS_ID])) >= 6  # of 10 episodes in 3 files
    # value_targets: the discounted return from each row's state on.
    ts = batch[Columns.VALUE_TARGETS]
    assert ts.max() <= 100.0 and ts.min() >= 1.0 - 1e-6


def test_module_rows_only(tmp_path: Path) -> None:
    record_episodes(gym.make("CartPole-v1"), lambda o: 0, num_episodes=2, output_dir=tmp_path)
    reader = OfflineReader(
        resolve_files(tmp_path), batch_size=4, module_id="other", shuffle_buffer_size=0
    )
    with pytest.raises(OfflineDataError, match="no rows of module 'other'"):
        reader.next_batch()


def _broken(expert_dir: Path, how: str) -> Path:
    file = resolve_files(expert_dir)[1]
    data = file.read_bytes()
    if how == "truncated":
        file.write_bytes(data[: len(data) // 2])
    else:  # bytes flipped inside a data page; the page checksum catches it
        mid = len(data) // 2
        file.write_bytes(
            data[:mid] + bytes(b ^ 0x55 for b in data[mid : mid + 64]) + data[mid + 64 :]
        )
    return file


@pytest.mark.parametrize("how", ["truncated", "corrupt"])
def test_a_broken_file_is_named_and_never_skipped(expert_dir: Path, how: str) -> None:
    file = _broken(expert_dir, how)
    files = resolve_files(expert_dir)
    with pytest.raises(OfflineDataError, match=f"{file.name}.*(truncated or corrupt)"):
        check_files(files)
        read_columns(files)
    reader = OfflineReader(files, batch_size=64, shuffle_buffer_size=0, seed=0)
    with pytest.raises(OfflineDataError, match=file.name):
        for _ in range(200):  # every file is reached within a pass
            reader.next_batch()


def test_a_file_that_ends_mid_episode_is_refused(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    record_episodes(gym.make("CartPole-v1"), lambda o: 0, num_episodes=3, output_dir=tmp_path)
    file = resolve_files(tmp_path)[0]
    table = pq.read_table(file)
    pq.write_table(table.slice(0, table.num_rows - 2), file)
    with pytest.raises(OfflineDataError, match=f"{file.name} ends in the middle of an episode"):
        read_columns([file])


def test_missing_input_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(OfflineDataError, match=r"offline_data\(input_=.*matches no Parquet"):
        resolve_files(tmp_path / "nothing*.parquet")


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(3, start=-1),
        gym.spaces.MultiDiscrete([2, 5]),
        gym.spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 1.0]), dtype=np.float32),
    ],
)
def test_recorded_env_actions_map_back_to_the_module(space: gym.Space) -> None:
    """actions_from_env inverts ActionsToEnvSpace (inside the bounds)."""
    rng = np.random.default_rng(0)
    if isinstance(space, gym.spaces.Box):
        module = rng.uniform(-1, 1, size=(50, 2)).astype(np.float32)
    elif isinstance(space, gym.spaces.Discrete):
        module = rng.integers(3, size=(50, 1))
    else:
        module = np.stack([rng.integers(2, size=50), rng.integers(5, size=50)], 1)
    env_actions = _to_env(_plan(space), module)
    back = actions_from_env(space, env_actions)
    np.testing.assert_allclose(back.reshape(50, -1), module.reshape(50, -1), atol=1e-6)


_MEMORY_SCRIPT = textwrap.dedent("""
    import sys
    import pyarrow as pa
    import pyarrow.compute
    import pyarrow.parquet
    from rlmod.offline import OfflineReader
    from rlmod.offline.reader import resolve_files

    pa.array([1]).to_numpy()  # pyarrow's first to_numpy imports ~30 MiB of modules

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    files = resolve_files(sys.argv[1])
    base, peaks = rss_mib(), []
    reader = OfflineReader(files, batch_size=256, shuffle_buffer_size=2048, seed=0,
                           obs_shape=(64,))
    for num_passes in (1, 2, 3):
        peak = 0.0
        while reader.num_rows_read < num_passes * int(sys.argv[2]):
            reader.next_batch()
            peak = max(peak, rss_mib())
        peaks.append(peak - base)
    print(*peaks)
""")


def test_reader_memory_is_bounded_by_its_buffers_not_the_dataset(tmp_path: Path) -> None:
    """150,000 rows of 64-float observations (37 MiB of them) read with a batch of 256 and
    a shuffle buffer of 2,048 rows (65x fewer rows), in a fresh process: RSS grows by less
    than the observations read, and not between the first and third pass."""
    from rlmod.offline import EpisodeWriter

    space = gym.spaces.Box(-1.0, 1.0, (64,), np.float32)
    writer = EpisodeWriter(
        tmp_path, spaces={"__env__": (space, gym.spaces.Discrete(2))}, max_rows_per_file=20_000
    )
    rng = np.random.default_rng(0)
    num_rows = 150_000
    for e in range(num_rows // 1000):  # episodes of 1,000 rows
        done = np.zeros(1000, bool)
        done[-1] = True
        writer.add_batch(
            {
                "default_policy": {
                    Columns.EPS_ID: np.full(1000, e),
                    Columns.OBS: rng.random((1000, 64), np.float32),
                    Columns.ACTIONS: rng.integers(2, size=1000),
                    Columns.REWARDS: np.ones(1000, np.float32),
                    Columns.TERMINATEDS: done,
                    Columns.TRUNCATEDS: np.zeros(1000, bool),
                }
            }
        )
    writer.close()
    obs_mib = num_rows * 64 * 4 / 2**20
    # RSS should track live memory (what this test is about), not allocators' caches:
    # glibc raises its mmap threshold after each large free (freed numpy buffers then stay
    # in the heap), and Arrow's mimalloc pool keeps freed segments; a fixed threshold and
    # Arrow on the system allocator return freed buffers to the OS.
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "MALLOC_MMAP_THRESHOLD_": str(128 * 1024),
        "ARROW_DEFAULT_MEMORY_POOL": "system",
    }
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, str(tmp_path), str(num_rows)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    first, _, third = (float(x) for x in out.stdout.split())
    print(f"RSS growth {first:.1f} / {third:.1f} MiB (pass 1 / 3) over {obs_mib:.1f} MiB of obs")
    assert max(first, third) < 0.75 * obs_mib  # ~18 MiB measured: buffers, one row group
    assert abs(third - first) < 2.0  # more data read, no more memory
