"""Tests of the env-to-module connectors (rlmod/connectors/env_to_module.py).

Each connector is run in a ConnectorPipeline, as EnvRunners run it, and its output
space must contain every row it outputs (that space is what the module is built with).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.connectors import (
    ConnectorPipeline,
    FlattenObservations,
    FrameStacking,
    MeanStdFilter,
    OneHotObservations,
)
from rlmod.connectors.env_to_module import _ToFloat32, default_env_to_module

ACT = gym.spaces.Discrete(2)


def pipeline(obs_space: gym.Space, *connectors) -> ConnectorPipeline:
    return ConnectorPipeline(connectors, input_observation_space=obs_space, input_action_space=ACT)


def starts(n: int, value: bool = False) -> np.ndarray:
    return np.full(n, value)


def assert_contains_rows(space: gym.Space, out: np.ndarray) -> None:
    assert out.dtype == np.float32
    assert all(space.contains(row) for row in out), (space, out)


# ---------------------------------------------------------------------- flatten, one-hot
def test_flatten_dict_observations():
    space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-2.0, 2.0, (2, 2), np.float32), "cell": gym.spaces.Discrete(3)}
    )
    obs = {
        "pos": np.arange(12, dtype=np.float32).reshape(3, 2, 2) / 10,
        "cell": np.array([0, 2, 1]),
    }
    pipe = pipeline(space, FlattenObservations())
    out = pipe(obs, episode_starts=starts(3))
    parts = {"cell": np.eye(3, dtype=np.float32)[obs["cell"]], "pos": obs["pos"].reshape(3, 4)}
    expected = np.concatenate([parts[k] for k in space.spaces], axis=-1)  # the space's key order
    np.testing.assert_array_equal(out, expected)
    assert pipe.observation_space.shape == (7,)
    assert_contains_rows(pipe.observation_space, out)


def test_flatten_tuple_observations():
    space = gym.spaces.Tuple(
        (
            gym.spaces.Discrete(2),
            gym.spaces.Box(0.0, 1.0, (3,), np.float32),
            gym.spaces.MultiDiscrete([2, 3]),
        )
    )
    obs = (
        np.array([1, 0]),
        np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], np.float32),
        np.array([[1, 2], [0, 0]]),
    )
    pipe = pipeline(space, FlattenObservations())
    out = pipe(obs, episode_starts=starts(2))
    expected = np.array(
        [[0, 1, 0.1, 0.2, 0.3, 0, 1, 0, 0, 1], [1, 0, 0.4, 0.5, 0.6, 1, 0, 1, 0, 0]], np.float32
    )
    np.testing.assert_array_equal(out, expected)
    assert_contains_rows(pipe.observation_space, out)


def test_flatten_keeps_box_bounds():
    space = gym.spaces.Box(np.array([[-1.0, 0.0]]), np.array([[1.0, 5.0]]), dtype=np.float64)
    pipe = pipeline(space, FlattenObservations())
    assert pipe.observation_space == gym.spaces.Box(
        np.array([-1.0, 0.0], np.float32), np.array([1.0, 5.0], np.float32)
    )
    out = pipe(np.array([[[0.5, 4.0]]]), episode_starts=starts(1))
    np.testing.assert_array_equal(out, [[0.5, 4.0]])
    assert_contains_rows(pipe.observation_space, out)


def test_one_hot_discrete():
    space = gym.spaces.Discrete(4, start=1)
    pipe = pipeline(space, OneHotObservations())
    out = pipe(np.array([1, 4, 2]), episode_starts=starts(3))
    np.testing.assert_array_equal(out, [[1, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]])
    assert pipe.observation_space == gym.spaces.Box(0.0, 1.0, (4,), np.float32)
    assert_contains_rows(pipe.observation_space, out)


def test_one_hot_multi_discrete():
    space = gym.spaces.MultiDiscrete([2, 3])
    pipe = pipeline(space, OneHotObservations())
    out = pipe(np.array([[0, 2], [1, 0]]), episode_starts=starts(2))
    np.testing.assert_array_equal(out, [[1, 0, 0, 0, 1], [0, 1, 1, 0, 0]])
    assert_contains_rows(pipe.observation_space, out)


@pytest.mark.parametrize(
    "space, kinds",
    [
        (gym.spaces.Discrete(3), [OneHotObservations]),
        (gym.spaces.MultiDiscrete([2, 2]), [OneHotObservations]),
        (gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), [FlattenObservations]),
        (gym.spaces.Box(-1, 1, (4,), np.float32), []),
        (gym.spaces.Box(-1, 1, (4,), np.float64), [FlattenObservations]),
        (gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), []),  # images pass as uint8
        (gym.spaces.Box(0, 1, (10, 10, 4), bool), []),  # MinAtar's
        (gym.spaces.Box(0, 1, (8, 8, 3), np.float64), [_ToFloat32]),
    ],
)
def test_default_connectors_per_space(space, kinds):
    assert [type(c) for c in default_env_to_module(space)] == kinds


# ---------------------------------------------------------------------- MeanStdFilter
def test_mean_std_filter_normalizes():
    rng = np.random.default_rng(0)
    space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    pipe = pipeline(space, MeanStdFilter())
    data = rng.normal([5.0, -3.0, 0.0], [2.0, 0.5, 10.0], size=(2000, 3))
    out = pipe(data, episode_starts=starts(2000))
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(0), 1.0, atol=1e-4)
    assert_contains_rows(pipe.observation_space, out)
    later = pipe(np.array([[5.0, -3.0, 0.0]]), episode_starts=starts(1))
    np.testing.assert_allclose(later, 0.0, atol=0.1)


def test_mean_std_filter_clips_to_its_space():
    space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    pipe = pipeline(space, MeanStdFilter(clip_by_value=2.0))
    pipe(np.random.default_rng(0).normal(size=(100, 1)), episode_starts=starts(100))
    out = pipe(np.array([[1e6], [-1e6]]), episode_starts=starts(2))
    np.testing.assert_array_equal(out, [[2.0], [-2.0]])
    assert_contains_rows(pipe.observation_space, out)


def test_mean_std_filter_merge_states_equals_stats_of_the_concatenated_data():
    rng = np.random.default_rng(1)
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    chunks = [rng.normal(3.0, 2.0, size=(n, 2)) for n in (50, 7, 300)]
    filters = [MeanStdFilter() for _ in chunks]
    for f, x in zip(filters, chunks, strict=True):
        pipeline(space, f)(x, episode_starts=starts(len(x)))
    base = filters[0].get_state()["base"]  # empty: nothing synced yet
    assert base["n"] == 0
    merged = MeanStdFilter.merge_states(base, [f.get_state()["delta"] for f in filters])
    everything = np.concatenate(chunks)
    assert merged["n"] == len(everything)
    np.testing.assert_allclose(merged["mean"], everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(merged["m2"] / merged["n"], everything.var(0), rtol=1e-12)
    # Merging onto a non-empty base is the same as merging all at once.
    first = MeanStdFilter.merge_states(base, [filters[0].get_state()["delta"]])
    again = MeanStdFilter.merge_states(first, [f.get_state()["delta"] for f in filters[1:]])
    np.testing.assert_allclose(again["mean"], merged["mean"], rtol=1e-12)
    np.testing.assert_allclose(again["m2"], merged["m2"], rtol=1e-12)


def test_mean_std_filter_state_round_trip():
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    trained = MeanStdFilter()
    pipe = pipeline(space, trained)
    pipe(np.random.default_rng(2).normal(4.0, 3.0, (500, 2)), episode_starts=starts(500))
    fresh_pipe = pipeline(space, MeanStdFilter(update_stats=False))
    fresh_pipe.set_state(pipe.get_state())
    trained.update_stats = False  # else the probe itself would move the trained statistics
    probe = np.array([[4.0, 1.0]])
    np.testing.assert_allclose(
        fresh_pipe(probe, episode_starts=starts(1)),
        pipe(probe, episode_starts=starts(1)),
        rtol=1e-4,
    )


def test_mean_std_filter_needs_box_observations():
    with pytest.raises(TypeError, match="MeanStdFilter needs Box observations"):
        pipeline(gym.spaces.Discrete(3), MeanStdFilter())


# ---------------------------------------------------------------------- FrameStacking
def test_frame_stacking_stacks_and_resets_at_episode_starts():
    space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
    pipe = pipeline(space, FrameStacking(num_frames=3))
    assert pipe.observation_space.shape == (3,)
    steps = [  # (obs of sub-envs 0 and 1, episode_starts)
        ([1.0, 5.0], [True, True]),
        ([2.0, 6.0], [False, False]),
        ([3.0, 7.0], [False, True]),  # sub-env 1 starts a new episode
        ([4.0, 8.0], [False, False]),
    ]
    expected = [
        [[1, 1, 1], [5, 5, 5]],
        [[1, 1, 2], [5, 5, 6]],
        [[1, 2, 3], [7, 7, 7]],  # no frame of the old episode leaks into the new one
        [[2, 3, 4], [7, 7, 8]],
    ]
    for (obs, start), want in zip(steps, expected, strict=True):
        out = pipe(np.array(obs, np.float32)[:, None], episode_starts=np.array(start))
        np.testing.assert_array_equal(out, want)
        assert_contains_rows(pipe.observation_space, out)


def test_frame_stacking_after_flatten_and_bad_arguments():
    space = gym.spaces.Discrete(3)
    pipe = pipeline(space, OneHotObservations(), FrameStacking(num_frames=2))
    assert pipe.observation_space.shape == (6,)
    out = pipe(np.array([2]), episode_starts=starts(1, True))
    np.testing.assert_array_equal(out, [[0, 0, 1, 0, 0, 1]])
    assert_contains_rows(pipe.observation_space, out)
    with pytest.raises(ValueError, match=r"FrameStacking\(num_frames=0\) must be at least 1"):
        FrameStacking(num_frames=0)
    with pytest.raises(TypeError, match="FrameStacking needs flat Box observations"):
        pipeline(gym.spaces.Box(0, 1, (2, 2), np.float32), FrameStacking())
