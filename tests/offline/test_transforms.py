"""The offline module view (rlmod.offline.transforms.module_view) on small chunks by hand:
row-wise connectors run once over all rows, step-dependent ones (FrameStacking) run per
episode exactly as an EnvRunner with one sub-env per episode would (no frame leaking
across episodes), the bootstrap finals get one step past their episode's end, env actions
come back to the module's scale, and connectors with running statistics are refused.

MARWIL and BC trained through this view are tested in tests/offline/test_learning.py and
tests/offline/test_marwil_bootstrap.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.connectors.env_to_module import FrameStacking, MeanStdFilter, OneHotObservations
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.columns import Columns
from rlmod.offline.returns import BOOTSTRAP_FINALS, BOOTSTRAP_INDEX
from rlmod.offline.transforms import module_view

BOX = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
ACT = gym.spaces.Box(np.array([0.0], np.float32), np.array([4.0], np.float32))


def _pipeline(*connectors, obs_space: gym.Space = BOX) -> ConnectorPipeline:
    return ConnectorPipeline(connectors, input_observation_space=obs_space, input_action_space=ACT)


def _chunk(lengths: list[int]) -> dict[str, np.ndarray]:
    """Episodes of the given lengths; observation = 10 * episode + step."""
    obs = np.concatenate([10 * e + np.arange(n) for e, n in enumerate(lengths)])
    ends = np.zeros(len(obs), bool)
    ends[np.cumsum(lengths) - 1] = True
    return {
        Columns.OBS: obs.astype(np.float32)[:, None],
        Columns.ACTIONS: np.full((len(obs), 1), 3.0, np.float32),
        Columns.TERMINATEDS: ends,
        Columns.TRUNCATEDS: np.zeros(len(obs), bool),
    }


def _env_runner_view(lengths: list[int]) -> list[list[float]]:
    """What a fresh FrameStacking(2) gives on each episode alone, stepped as an EnvRunner."""
    rows = []
    for e, n in enumerate(lengths):
        stacking = _pipeline(FrameStacking(num_frames=2))
        for t in range(n):
            obs = np.array([[10.0 * e + t]], np.float32)
            rows.append(stacking(obs, episode_starts=np.array([t == 0]))[0].tolist())
    return rows


def test_frame_stacking_runs_per_episode_as_an_env_runner_would():
    lengths = [3, 1, 2]
    cols = module_view(_pipeline(FrameStacking(num_frames=2)), ACT)(_chunk(lengths))
    assert cols[Columns.OBS].tolist() == _env_runner_view(lengths)
    assert cols[Columns.OBS].tolist()[:4] == [[0, 0], [0, 1], [1, 2], [10, 10]]


def test_actions_come_back_to_the_modules_scale_and_the_input_is_left_alone():
    chunk = _chunk([2])
    cols = module_view(_pipeline(), ACT)(chunk)  # no connectors: observations as they are
    assert cols[Columns.ACTIONS].tolist() == [[0.5], [0.5]]  # 3 in [0, 4] is 0.5 in [-1, 1]
    assert cols[Columns.OBS] is chunk[Columns.OBS]
    assert chunk[Columns.ACTIONS].tolist() == [[3.0], [3.0]]


def test_row_wise_connectors_transform_rows_and_finals_in_one_call():
    space = gym.spaces.Discrete(3)
    cols = {
        Columns.OBS: np.array([0, 2, 1]),
        Columns.ACTIONS: np.array([[4.0], [0.0], [2.0]], np.float32),
        Columns.TERMINATEDS: np.array([False, False, False]),
        Columns.TRUNCATEDS: np.array([False, True, True]),
        BOOTSTRAP_FINALS: np.array([0, 1, 2]),
        BOOTSTRAP_INDEX: np.array([1, 1, 2], np.int32),
    }
    out = module_view(_pipeline(OneHotObservations(), obs_space=space), ACT)(cols)
    assert out[Columns.OBS].tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert out[BOOTSTRAP_FINALS].tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert out[Columns.ACTIONS].tolist() == [[1.0], [-1.0], [0.0]]


def test_bootstrap_finals_are_stacked_one_step_past_their_episodes_end():
    cols = _chunk([2, 2, 1])  # episodes 0 and 2 truncated, 1 terminated
    cols[Columns.TERMINATEDS] = np.array([False, False, False, True, False])
    cols[Columns.TRUNCATEDS] = np.array([False, True, False, False, True])
    cols[BOOTSTRAP_FINALS] = np.array([[0.0], [2.0], [21.0]], np.float32)  # row 0: none
    cols[BOOTSTRAP_INDEX] = np.array([1, 1, 0, 0, 2], np.int32)
    out = module_view(_pipeline(FrameStacking(num_frames=2)), ACT)(cols)
    assert out[Columns.OBS].tolist() == [[0, 0], [0, 1], [10, 10], [10, 11], [20, 20]]
    # rows 1 and 2: each truncated episode's last frame, then its final; row 0 (rows that
    # do not bootstrap, weighted by a discount of 0) keeps only shape and dtype
    assert out[BOOTSTRAP_FINALS].tolist()[1:] == [[1, 2], [20, 21]]
    assert out[BOOTSTRAP_FINALS].shape == (3, 2) and out[BOOTSTRAP_FINALS].dtype == np.float32


def test_connectors_with_running_statistics_are_refused():
    normalize = MeanStdFilter()
    pipeline = _pipeline(normalize)
    normalize(np.ones((2, 1), np.float32), episode_starts=np.ones(2, bool))  # has statistics
    with pytest.raises(ValueError, match=r"running statistics \(\['MeanStdFilter'\]\) are not"):
        module_view(pipeline, ACT)
