"""MARWIL's value targets, checked by hand: a terminated episode regresses on its plain
discounted return, a truncated one's returns are bootstrapped with V at the observation
after its last step (RLlib 2.60: GAE with lambda=1 over episodes extended by one step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.marwil import MARWILConfig
from rlmod.connectors.env_to_module import FlattenObservations, FrameStacking
from rlmod.connectors.learner import compute_gae
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.columns import Columns
from rlmod.offline import record_episodes
from rlmod.offline.reader import REQUIRED_COLUMNS, episode_chunks, resolve_files
from rlmod.offline.returns import (
    BOOTSTRAP_DISCOUNT,
    BOOTSTRAP_FINALS,
    BOOTSTRAP_INDEX,
    BOOTSTRAP_OBS,
    add_return_columns,
    bootstrap_obs_per_row,
)
from rlmod.offline.transforms import module_view

GAMMA = 0.9


class Countdown(gym.Env):
    """obs = [step, episode]; reward = step + 1; action 1 at step 2 terminates the episode,
    otherwise the TimeLimit of 4 steps truncates it."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.episode = -1

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.episode], np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(self.t + 1)
        terminated = bool(action == 1 and self.t == 2)
        self.t += 1
        return self._obs(), reward, terminated, False, {}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    env = gym.wrappers.TimeLimit(Countdown(), max_episode_steps=4)
    # episode 0 terminates after 3 steps (rewards 1, 2, 3), episode 1 is truncated after 4
    # (rewards 1, 2, 3, 4; the observation after its last step is [4, 1])
    record_episodes(env, lambda obs: int(obs[1] == 0), num_episodes=2, output_dir=tmp_path, seed=0)
    return tmp_path


def _batch(data: Path) -> dict[str, np.ndarray]:
    """The 7 rows in stored order, as the OfflineReader hands them to a Learner (before
    its shuffle): `bootstrap_obs` per row, gathered from the chunk's table."""
    (file,) = resolve_files(data)
    (chunk,) = episode_chunks(
        file,
        columns=REQUIRED_COLUMNS,
        module_id=None,
        obs_shape=(2,),
        rows=1024,
        gamma=GAMMA,
        transform=None,
    )
    np.testing.assert_array_equal(chunk[Columns.OBS][:, 0], [0, 1, 2, 0, 1, 2, 3])
    # one table row per truncated episode after row 0 (no bootstrap), an index per row
    np.testing.assert_array_equal(chunk[BOOTSTRAP_FINALS], [[0, 0], [4, 1]])
    np.testing.assert_array_equal(chunk[BOOTSTRAP_INDEX], [0, 0, 0, 1, 1, 1, 1])
    return bootstrap_obs_per_row(chunk)


def test_the_reader_marks_what_bootstraps_a_truncated_episode(data: Path) -> None:
    batch = _batch(data)
    g = GAMMA
    np.testing.assert_allclose(
        batch[Columns.VALUE_TARGETS],
        [
            1 + g * 2 + g * g * 3,
            2 + g * 3,
            3,  # terminated
            1 + g * 2 + g**2 * 3 + g**3 * 4,
            2 + g * 3 + g * g * 4,
            3 + g * 4,
            4,
        ],
        rtol=1e-6,
    )
    np.testing.assert_allclose(batch[BOOTSTRAP_DISCOUNT], [0, 0, 0, g**4, g**3, g**2, g], rtol=1e-6)
    np.testing.assert_array_equal(batch[BOOTSTRAP_OBS][3:], [[4, 1]] * 4)
    assert Columns.NEXT_OBS not in batch  # read for the bootstrap, not handed on


def test_marwil_value_targets_bootstrap_truncated_episodes_only(data: Path) -> None:
    config = (
        MARWILConfig()
        .offline_data(input_=str(data))
        .training(gamma=GAMMA, train_batch_size=7)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    learner = algo.learner_group.learner
    batch = _batch(data)
    out = learner._learner_connector(
        learner._to_tensors({"default_policy": batch}), rl_module=learner.module
    )["default_policy"]
    assert BOOTSTRAP_OBS not in out and BOOTSTRAP_DISCOUNT not in out
    module = learner.module["default_policy"]
    with torch.no_grad():
        v_final = float(module.compute_values({Columns.OBS: torch.tensor([[4.0, 1.0]])})[0])
        values = module.compute_values({Columns.OBS: torch.tensor(batch[Columns.OBS])})
    assert v_final != 0.0
    g = GAMMA
    by_hand = [
        1 + g * 2 + g * g * 3,
        2 + g * 3,
        3,
        1 + g * 2 + g**2 * 3 + g**3 * 4 + g**4 * v_final,
        2 + g * 3 + g**2 * 4 + g**3 * v_final,
        3 + g * 4 + g**2 * v_final,
        4 + g * v_final,
    ]
    np.testing.assert_allclose(out[Columns.VALUE_TARGETS].numpy(), by_hand, rtol=1e-5)
    # the same as GAE with lambda=1 (RLlib's MARWIL connector) over these two episodes
    next_obs = torch.tensor(
        [[1, 0], [2, 0], [3, 0], [1, 1], [2, 1], [3, 1], [4, 1]], dtype=torch.float32
    )
    with torch.no_grad():
        next_values = module.compute_values({Columns.OBS: next_obs}).numpy()
    _, gae_targets = compute_gae(
        batch[Columns.REWARDS].astype(np.float64),
        values.numpy().astype(np.float64),
        next_values.astype(np.float64),
        batch[Columns.TERMINATEDS].astype(np.float64),
        (batch[Columns.TERMINATEDS] | batch[Columns.TRUNCATEDS]).astype(np.float64),
        gamma=g,
        lambda_=1.0,
    )
    np.testing.assert_allclose(out[Columns.VALUE_TARGETS].numpy(), gae_targets, rtol=1e-5)
    result = algo.train()  # and it trains on them
    assert np.isfinite(result["learners"]["default_policy"]["vf_loss"])
    algo.stop()


@pytest.mark.parametrize("stacked", [False, True])
def test_the_bootstrap_observation_goes_through_the_module_view(data: Path, stacked: bool) -> None:
    """With frame stacking (a connector with memory) the observation after the truncation
    is stacked onto the episode's last frames, as an EnvRunner would have stacked it; a
    row-wise pipeline maps it alone."""
    pieces = [FlattenObservations(), *([FrameStacking(num_frames=2)] if stacked else [])]
    pipeline = ConnectorPipeline(
        pieces,
        input_observation_space=Countdown.observation_space,
        input_action_space=Countdown.action_space,
    )
    (file,) = resolve_files(data)
    (chunk,) = episode_chunks(
        file,
        columns=REQUIRED_COLUMNS,
        module_id=None,
        obs_shape=(2,),
        rows=1024,
        gamma=GAMMA,
        transform=module_view(pipeline, Countdown.action_space),
    )
    want = [3, 1, 4, 1] if stacked else [4, 1]
    np.testing.assert_array_equal(bootstrap_obs_per_row(chunk)[BOOTSTRAP_OBS][3:], [want] * 4)
    if stacked:
        np.testing.assert_array_equal(chunk[Columns.OBS][6], [2, 1, 3, 1])


def test_later_passes_take_the_bootstrap_observations_from_the_cache(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pass over a file reads `new_obs` and keeps the truncated episodes' finals;
    later passes skip the column (and the page checksums, verified once) and give the same
    rows bit for bit."""
    from rlmod.offline import reader as reader_module

    read_columns: list[list[str]] = []
    verified: list[bool] = []
    file_chunks = reader_module.file_chunks

    def spy(file: Path, *, columns: Any, verify: bool, **kwargs: Any) -> Any:
        read_columns.append(list(columns))
        verified.append(verify)
        return file_chunks(file, columns=columns, verify=verify, **kwargs)

    monkeypatch.setattr(reader_module, "file_chunks", spy)
    (file,) = resolve_files(data)
    cache = reader_module.FinalsCache()
    passes = [
        list(
            episode_chunks(
                file,
                columns=REQUIRED_COLUMNS,
                module_id=None,
                obs_shape=(2,),
                rows=1024,
                gamma=GAMMA,
                transform=None,
                finals_cache=cache,
            )
        )
        for _ in range(2)
    ]
    assert [Columns.NEXT_OBS in c for c in read_columns] == [True, False]
    assert verified == [True, False]  # checksums on the first whole read only
    np.testing.assert_array_equal(cache.get(file), [[4, 1]])  # one truncated episode
    (first,), (second,) = passes
    assert first.keys() == second.keys()
    for key, value in first.items():
        assert value.tobytes() == second[key].tobytes(), key
    small = reader_module.FinalsCache(max_bytes=4)  # 8 bytes do not fit: not kept
    small.put(file, cache.get(file))
    assert small.get(file) is None and small.nbytes == 0


@pytest.mark.parametrize("gamma, length", [(0.99, 30), (0.5, 25)])  # one segment / cut ones
def test_bootstrap_discounts_are_gamma_to_the_steps_left(gamma: float, length: int) -> None:
    rng = np.random.default_rng(0)
    n = length + 7  # a truncated episode, then a terminated one of 7 rows
    ends = np.zeros(n, bool)
    truncated, terminated = ends.copy(), ends.copy()
    truncated[length - 1], terminated[-1] = True, True
    cols = {
        Columns.OBS: rng.random((n, 3), np.float32),
        Columns.REWARDS: rng.random(n, np.float32),
        Columns.TERMINATEDS: terminated,
        Columns.TRUNCATEDS: truncated,
        Columns.NEXT_OBS: rng.random((n, 3), np.float32),
    }
    finals = add_return_columns(cols, gamma)
    want = np.r_[gamma ** (length - np.arange(length)), np.zeros(7)]
    np.testing.assert_allclose(cols[BOOTSTRAP_DISCOUNT], want, rtol=1e-6)
    np.testing.assert_array_equal(finals, cols[Columns.NEXT_OBS][[length - 1]])
    np.testing.assert_array_equal(
        bootstrap_obs_per_row(cols)[BOOTSTRAP_OBS],
        np.r_[np.repeat(finals, length, axis=0), np.zeros((7, 3))],
    )


def test_reader_batches_carry_each_rows_own_final_through_the_shuffle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OfflineReader's pool holds an index per row into its table of final observations
    and each batch gathers `bootstrap_obs` from it: through shuffles across files and
    passes, and through the table's compaction (forced often here), every row that
    bootstraps gets its own episode's s_T = [4, episode], and the table stays bounded by
    the pool, not the number of episodes."""
    from rlmod.offline import OfflineReader
    from rlmod.offline import reader as reader_module

    monkeypatch.setattr(reader_module, "FINALS_TABLE_MIN_ROWS", 8)
    monkeypatch.setattr(reader_module, "READ_CHUNK_BYTES", 1)  # pools of about 1,100 rows
    env = gym.wrappers.TimeLimit(Countdown(), max_episode_steps=4)
    env.unwrapped.observation_space = gym.spaces.Box(-1e4, 1e4, (2,), np.float32)
    for part in range(2):  # two files; even episodes truncated, odd ones terminated
        record_episodes(
            env,
            lambda obs: int(obs[1] % 2),
            num_episodes=300,
            output_dir=tmp_path / str(part),
            seed=part,
        )
    files = resolve_files([tmp_path / "0", tmp_path / "1"])
    reader = OfflineReader(
        files, batch_size=50, shuffle_buffer_size=100, seed=0, gamma=GAMMA, obs_shape=(2,)
    )
    table_rows, pool_rows, bootstrapped = [], [], 0
    for _ in range(10 * 2 * 1050 // 50):  # ten passes over 2 x 1,050 rows
        batch = reader.next_batch()
        obs, discount = batch[Columns.OBS], batch[BOOTSTRAP_DISCOUNT]
        truncated = obs[:, 1] % 2 == 0
        np.testing.assert_allclose(
            discount, np.where(truncated, GAMMA ** (4 - obs[:, 0]), 0), rtol=1e-6
        )
        np.testing.assert_array_equal(
            batch[BOOTSTRAP_OBS][truncated], np.c_[np.full(truncated.sum(), 4), obs[truncated, 1]]
        )
        assert BOOTSTRAP_INDEX not in batch and BOOTSTRAP_FINALS not in batch
        bootstrapped += int(truncated.sum())
        table_rows.append(len(reader._finals))
        pool_rows.append(len(reader._pool[Columns.REWARDS]))
    assert bootstrapped > 10_000
    # 6,000 truncated episodes read; the table never held more rows than a pool
    assert max(table_rows) <= max(pool_rows) <= 2500, (max(table_rows), max(pool_rows))
    assert any(b < a for a, b in zip(table_rows, table_rows[1:], strict=False))  # compacted
