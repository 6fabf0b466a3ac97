"""n-step returns against hand computations: episode ends, truncations, held windows."""

from __future__ import annotations

import numpy as np
import pytest

from rlmod.core.columns import Columns
from rlmod.replay import N_STEP, NStepCollector, compute_n_step


def test_compute_n_step_stops_at_sequence_ends() -> None:
    rewards = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    ends = np.array([False, True, False, False, True])
    returns, horizons = compute_n_step(rewards, ends, n=3, gamma=0.5)
    np.testing.assert_allclose(returns, [1 + 0.5 * 2, 2, 3 + 0.5 * 4 + 0.25 * 5, 4 + 0.5 * 5, 5])
    np.testing.assert_array_equal(horizons, [2, 1, 3, 2, 1])


def _rows(
    eps: list[int], rewards: list[float], obs: list[float], *, term: list[bool], trunc: list[bool]
) -> dict[str, np.ndarray]:
    obs_a = np.array(obs, np.float32)[:, None]
    return {
        Columns.OBS: obs_a,
        Columns.NEXT_OBS: obs_a + 0.5,
        Columns.ACTIONS: np.arange(len(eps)),
        Columns.REWARDS: np.array(rewards, np.float32),
        Columns.TERMINATEDS: np.array(term),
        Columns.TRUNCATEDS: np.array(trunc),
        Columns.EPS_ID: np.array(eps),
    }


def test_collector_with_termination_truncation_and_a_window_across_batches() -> None:
    g = 0.9
    collect = NStepCollector(n=3, gamma=g)
    # Episode 0 terminates at its 3rd row, episode 1 is truncated at its 2nd, episode 2
    # goes on past the batch.
    out = collect(
        _rows(
            [0, 0, 0, 1, 1, 2, 2],
            [1, 1, 1, 2, 3, 1, 2],
            [0, 1, 2, 10, 11, 20, 21],
            term=[0, 0, 1, 0, 0, 0, 0],
            trunc=[0, 0, 0, 0, 1, 0, 0],
        )
    )
    np.testing.assert_allclose(out[Columns.REWARDS], [1 + g + g * g, 1 + g, 1, 2 + g * 3, 3])
    np.testing.assert_array_equal(out[N_STEP], [3, 2, 1, 2, 1])
    # No bootstrap past the termination; the truncation bootstraps from its final obs.
    np.testing.assert_array_equal(out[Columns.TERMINATEDS], [1, 1, 1, 0, 0])
    np.testing.assert_allclose(out[Columns.NEXT_OBS][:, 0], [2.5, 2.5, 2.5, 11.5, 11.5])
    np.testing.assert_allclose(out[Columns.OBS][:, 0], [0, 1, 2, 10, 11])
    assert collect.num_held == 2  # episode 2's rows wait for the rest of their window
    # The next batch continues episode 2 (rows 22, 23) and starts episode 3.
    out = collect(_rows([2, 2, 3], [3, 4, 7], [22, 23, 30], term=[0, 0, 1], trunc=[0, 0, 0]))
    np.testing.assert_allclose(out[Columns.OBS][:, 0], [20, 21, 30])
    np.testing.assert_allclose(
        out[Columns.REWARDS], [1 + g * 2 + g * g * 3, 2 + g * 3 + g * g * 4, 7], rtol=1e-6
    )
    np.testing.assert_array_equal(out[N_STEP], [3, 3, 1])
    np.testing.assert_allclose(out[Columns.NEXT_OBS][:, 0], [22.5, 23.5, 30.5])
    np.testing.assert_array_equal(out[Columns.ACTIONS], [5, 6, 2])  # actions ride along
    assert collect.num_held == 2
    # Episode 2 is gone from the next batch (its env was reset): its held rows are stored
    # with the shorter windows they have, bootstrapping from their last new_obs.
    out = collect(_rows([4], [1], [40], term=[0], trunc=[0]))
    np.testing.assert_allclose(out[Columns.OBS][:, 0], [22, 23])
    np.testing.assert_allclose(out[Columns.REWARDS], [3 + g * 4, 4], rtol=1e-6)
    np.testing.assert_array_equal(out[N_STEP], [2, 1])
    np.testing.assert_allclose(out[Columns.NEXT_OBS][:, 0], [23.5, 23.5])
    np.testing.assert_array_equal(out[Columns.TERMINATEDS], [0, 0])
    assert collect.num_held == 1


def test_one_step_collector_holds_nothing() -> None:
    collect = NStepCollector(n=1, gamma=0.99)
    out = collect(_rows([0, 0, 1], [1, 2, 3], [0, 1, 2], term=[0, 0, 0], trunc=[0, 0, 0]))
    np.testing.assert_allclose(out[Columns.REWARDS], [1, 2, 3])
    assert collect.num_held == 0


def test_n_step_must_be_positive() -> None:
    with pytest.raises(ValueError, match="n_step=0"):
        NStepCollector(n=0, gamma=0.9)
