"""Integer-space checks on whole batches (rlmod.utils.space_checks): which rows lie
outside Discrete / MultiDiscrete / MultiBinary spaces (with starts, inside Dict and
Tuple ones, for every numeric dtype, integral floats only, and values at the ends of
int64), the key path of the first bad leaf, the fast `fits_space` agreeing with the full
check, and the words of `outside_space_problem`.

These checks at work in the EnvRunners' observation guard and the offline reader are
tested in tests/env/test_observation_space_guard.py and tests/offline/test_data_checks.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.utils.space_checks import (
    SMALL_DISCRETE_BATCH,
    fits_space,
    has_integer_parts,
    out_of_space_rows,
    outside_space_problem,
)

Box, Discrete, MultiDiscrete = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete
NESTED = gym.spaces.Dict(
    {
        "pos": Box(-1, 1, (2,)),
        "cell": Discrete(4, start=-1),
        "pair": gym.spaces.Tuple([MultiDiscrete([2, 3]), gym.spaces.MultiBinary(2)]),
    }
)


def test_has_integer_parts_looks_inside_dicts_and_tuples():
    assert not has_integer_parts(Box(0, 1, (3,)))
    assert not has_integer_parts(gym.spaces.Dict({"a": Box(0, 1), "b": gym.spaces.Tuple([])}))
    assert has_integer_parts(gym.spaces.Tuple([Box(0, 1), gym.spaces.MultiBinary(1)]))
    assert has_integer_parts(NESTED)
    assert fits_space(Box(0, 1, (3,))) is None


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float32])
def test_discrete_with_a_start_for_every_numeric_dtype(dtype):
    space = Discrete(3, start=2)  # 2..4
    values = np.array([2, 4, 5, 3], dtype=dtype)
    mask, key = out_of_space_rows(space, values, 4, "obs")
    assert mask.tolist() == [False, False, True, False] and key == "obs"
    assert out_of_space_rows(space, values[[0, 1, 3]], 3, "obs") is None


def test_negative_values_and_the_ends_of_int64_are_outside():
    space = Discrete(4, start=-1)  # -1..2
    extremes = np.array([-2, -1, 2, np.iinfo(np.int64).max, np.iinfo(np.int64).min])
    mask, _ = out_of_space_rows(space, extremes, 5, "x")
    assert mask.tolist() == [True, False, False, True, True]
    assert out_of_space_rows(Discrete(2), np.array([-1], np.int8), 1, "x")[0].tolist() == [True]


def test_floats_fit_only_when_integral_and_strings_never():
    space = Discrete(3)
    mask, _ = out_of_space_rows(space, np.array([0.0, 1.5, 2.0, np.nan, -0.0]), 5, "x")
    assert mask.tolist() == [False, True, False, True, False]
    assert out_of_space_rows(space, np.array(["0", "1"]), 2, "x")[0].tolist() == [True, True]
    # booleans are 0 and 1
    assert out_of_space_rows(space, np.array([True, False]), 2, "x") is None
    assert out_of_space_rows(Discrete(2, start=1), np.array([True, False]), 2, "x")[0].tolist() == [
        False,
        True,
    ]


def test_multi_discrete_rows_are_bad_if_any_entry_is():
    space = MultiDiscrete([2, 3], start=[1, -1])  # entry 0: 1..2, entry 1: -1..1
    values = np.array([[1, -1], [2, 1], [0, 0], [1, 2]])
    mask, _ = out_of_space_rows(space, values, 4, "a")
    assert mask.tolist() == [False, False, True, True]


def _nested_batch(cell: list[int], pair0: list[list[int]], pair1: list[list[int]]) -> dict:
    n = len(cell)
    return {
        "pos": np.full((n, 2), 99.0),  # Box parts are never checked
        "cell": np.array(cell),
        "pair": (np.array(pair0), np.array(pair1)),
    }


def test_nested_spaces_or_their_rows_and_name_the_first_bad_leaf():
    batch = _nested_batch([0, 2, 0], [[0, 0], [1, 2], [1, 3]], [[0, 1], [1, 1], [0, 2]])
    mask, key = out_of_space_rows(NESTED, batch, 3, "obs")
    assert mask.tolist() == [False, False, True]
    assert key == "obs['pair'][0]"
    batch = _nested_batch([0, 3, 0], [[0, 0]] * 3, [[0, 1], [0, 0], [2, 0]])
    mask, key = out_of_space_rows(NESTED, batch, 3, "obs")
    assert mask.tolist() == [False, True, True] and key == "obs['cell']"
    good = _nested_batch([-1, 2], [[0, 0], [1, 2]], [[0, 1], [1, 0]])
    assert out_of_space_rows(NESTED, good, 2, "obs") is None


@pytest.mark.parametrize("n", [1, SMALL_DISCRETE_BATCH, SMALL_DISCRETE_BATCH + 1])
def test_fits_space_agrees_with_the_full_check(n: int):
    space = Discrete(5, start=-2)
    fits = fits_space(space)
    rng = np.random.default_rng(n)
    for _ in range(20):
        values = rng.integers(-4, 5, n)
        for batch in (values, values.astype(np.uint8), values.astype(float), values.tolist()):
            expected = out_of_space_rows(space, np.asarray(batch), n, "") is None
            assert fits(batch, n) == expected
    assert fits(np.zeros(0, np.int64), 0)
    nested = fits_space(NESTED)
    assert nested(_nested_batch([0], [[1, 2]], [[1, 1]]), 1)
    assert not nested(_nested_batch([0], [[1, 2]], [[1, 2]]), 1)


@pytest.mark.parametrize(
    ("space", "values", "row", "problem"),
    [
        (Discrete(4), [0, 4], 1, "obs is 4, outside 0..3 of Discrete(4)"),
        (
            Discrete(4, start=1),
            [0.5],
            0,
            "obs is 0.5, not an integer in 1..4 of Discrete(4, start=1)",
        ),
        (Discrete(2), [np.nan], 0, "obs is nan, outside 0..1 of Discrete(2)"),
        (
            MultiDiscrete([2, 3], start=[0, 5]),
            [[1, 5], [1, 9]],
            1,
            "obs is [1, 9]: its entry 1 is 9, outside 5..7 of MultiDiscrete([2 3], start=[0 5])",
        ),
        (
            gym.spaces.MultiBinary(3),
            [[0, 1, 2]],
            0,
            "obs is [0, 1, 2]: its entry 2 is 2, outside 0..1 of MultiBinary(3)",
        ),
    ],
)
def test_outside_space_problem_in_words(space, values, row, problem):
    assert outside_space_problem(space, np.array(values), row, "obs") == problem


def test_outside_space_problem_of_a_fitting_row_or_a_box_is_none_and_paths_nest():
    assert outside_space_problem(Discrete(4), np.array([0, 9]), 0, "obs") is None
    assert outside_space_problem(Box(0, 1, (1,)), np.array([[5.0]]), 0, "obs") is None
    batch = _nested_batch([0, 0], [[0, 0], [0, 7]], [[0, 0], [0, 0]])
    assert outside_space_problem(NESTED, batch, 1, "obs") == (
        "obs['pair'][0] is [0, 7]: its entry 1 is 7, outside 0..2 of MultiDiscrete([2 3])"
    )
