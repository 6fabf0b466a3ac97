"""Discounted returns and truncation bootstraps (rlmod.offline.returns) by hand on chunks
of a few rows: where episodes end (flags, or the chunk's end), gamma 0 and 1, an episode
both terminated and truncated (no bootstrap), the bootstrap table and index, finals handed
in from a cache, and the refusal of data without `new_obs` only where a bootstrap needs it.

The returns against the plain recursion on long episodes (segments cut inside them) are
in tests/offline/test_reader.py; the bootstrap through the readers and MARWIL's value
targets in tests/offline/test_marwil_bootstrap.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline.returns import (
    BOOTSTRAP_DISCOUNT,
    BOOTSTRAP_FINALS,
    BOOTSTRAP_INDEX,
    BOOTSTRAP_OBS,
    add_return_columns,
    bootstrap_obs_per_row,
    discounted_returns,
)


def test_rows_after_the_last_end_flag_form_one_more_episode():
    rewards = np.array([1.0, 1.0, 1.0, 1.0])
    assert discounted_returns(rewards, np.zeros(4, bool), 0.5).tolist() == [1.875, 1.75, 1.5, 1.0]
    got = discounted_returns(rewards, np.array([False, True, False, False]), 0.5)
    assert got.tolist() == [1.5, 1.0, 1.5, 1.0]


def test_gamma_zero_and_one_and_an_empty_chunk():
    rewards = np.array([1.0, 2.0, 3.0], np.float32)
    ends = np.array([False, False, True])
    assert discounted_returns(rewards, ends, 0.0).tolist() == [1.0, 2.0, 3.0]
    assert discounted_returns(rewards, ends, 1.0).tolist() == [6.0, 5.0, 3.0]
    empty = discounted_returns(np.zeros(0), np.zeros(0, bool), 0.9)
    assert empty.shape == (0,) and empty.dtype == np.float32


def _chunk(*, terminated: list[bool], truncated: list[bool], next_obs: bool = True):
    n = len(terminated)
    cols = {
        Columns.OBS: np.arange(n * 2, dtype=np.float32).reshape(n, 2),
        Columns.REWARDS: np.ones(n, np.float32),
        Columns.TERMINATEDS: np.array(terminated),
        Columns.TRUNCATEDS: np.array(truncated),
    }
    if next_obs:
        cols[Columns.NEXT_OBS] = 100 + cols[Columns.OBS]
    return cols


def test_add_return_columns_by_hand():
    # episode A: rows 0-1, truncated; B: rows 2-3, terminated; C: rows 4-6, truncated
    cols = _chunk(
        terminated=[False, False, False, True, False, False, False],
        truncated=[False, True, False, False, False, False, True],
    )
    finals = add_return_columns(cols, 0.5)
    assert cols[Columns.VALUE_TARGETS].tolist() == [1.5, 1.0, 1.5, 1.0, 1.75, 1.5, 1.0]
    assert cols[BOOTSTRAP_DISCOUNT].tolist() == [0.25, 0.5, 0.0, 0.0, 0.125, 0.25, 0.5]
    assert cols[BOOTSTRAP_INDEX].tolist() == [1, 1, 0, 0, 2, 2, 2]
    assert cols[BOOTSTRAP_INDEX].dtype == np.int32
    # row 0: zeros; then the observation after each truncated episode's last row
    assert cols[BOOTSTRAP_FINALS].tolist() == [[0, 0], [102, 103], [112, 113]]
    assert finals.tolist() == [[102, 103], [112, 113]]
    assert Columns.NEXT_OBS in cols
    per_row = bootstrap_obs_per_row(cols)[BOOTSTRAP_OBS]
    assert per_row[:, 0].tolist() == [102, 102, 0, 0, 112, 112, 112]
    assert BOOTSTRAP_INDEX not in cols and BOOTSTRAP_FINALS not in cols


def test_an_episode_both_terminated_and_truncated_does_not_bootstrap():
    cols = _chunk(terminated=[False, True], truncated=[False, True])
    finals = add_return_columns(cols, 0.9, keep_next_obs=False)
    assert cols[BOOTSTRAP_DISCOUNT].tolist() == [0.0, 0.0]
    assert cols[BOOTSTRAP_INDEX].tolist() == [0, 0]
    assert cols[BOOTSTRAP_FINALS].shape == (1, 2) and finals.shape == (0, 2)
    assert Columns.NEXT_OBS not in cols  # dropped on request


def test_gamma_zero_bootstraps_nothing_even_after_a_truncation():
    cols = _chunk(terminated=[False, False], truncated=[False, True])
    add_return_columns(cols, 0.0)
    assert cols[BOOTSTRAP_DISCOUNT].tolist() == [0.0, 0.0]
    assert cols[BOOTSTRAP_INDEX].tolist() == [1, 1]  # it points at its final, times 0


def test_data_without_next_obs_are_refused_only_where_a_bootstrap_needs_them():
    plain = _chunk(terminated=[False, True], truncated=[False, False], next_obs=False)
    add_return_columns(plain, 0.9)
    assert plain[BOOTSTRAP_DISCOUNT].tolist() == [0.0, 0.0]
    cut = _chunk(terminated=[False, False], truncated=[False, True], next_obs=False)
    with pytest.raises(OfflineDataError, match=r"the 'new_obs' column, which these data lack"):
        add_return_columns(cut, 0.9)


def test_finals_from_a_cache_replace_next_obs_and_extra_ones_are_ignored():
    cols = _chunk(terminated=[False, False], truncated=[False, True], next_obs=False)
    cached = np.array([[7.0, 8.0], [9.0, 9.0]], np.float32)
    used = add_return_columns(cols, 0.5, finals=cached)
    assert used.tolist() == [[7.0, 8.0]]
    assert cols[BOOTSTRAP_FINALS].tolist() == [[0.0, 0.0], [7.0, 8.0]]
    assert cols[BOOTSTRAP_DISCOUNT].tolist() == [0.25, 0.5]


def test_bootstrap_obs_per_row_leaves_a_chunk_without_a_table_alone():
    cols = {Columns.OBS: np.zeros((2, 1))}
    assert bootstrap_obs_per_row(cols) is cols and set(cols) == {Columns.OBS}
