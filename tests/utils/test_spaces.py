"""Space helpers (rlmod.utils.spaces): every supported space survives a JSON round trip
(starts, dtypes, infinite bounds, 2-D MultiDiscrete / MultiBinary, nesting), unsupported
ones are refused by name, and `flatten_batch` one-hots Discrete parts (with their start)
by hand, in the order and width `flat_dim` and `flat_box` promise.

Spaces stored in specs and checkpoints, and flattening in the env-to-module connectors,
are tested end to end in tests/utils/test_checkpoints.py and
tests/connectors/test_env_to_module.py.
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from rlmod.utils.spaces import flat_box, flat_dim, flatten_batch, space_from_dict, space_to_dict

Box, Discrete, MultiDiscrete = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete

SPACES = [
    Box(-np.inf, np.inf, (2, 3), np.float64),
    Box(0, 255, (4,), np.uint8),
    Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 5.0], np.float32)),
    Discrete(5, start=-2),
    MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [-1, 0]]),
    gym.spaces.MultiBinary(3),
    gym.spaces.MultiBinary([2, 2]),
    gym.spaces.Dict({"b": Discrete(2), "a": gym.spaces.Tuple([Box(0, 1, (1,)), Discrete(3)])}),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_spaces_round_trip_through_json(space: gym.Space):
    back = space_from_dict(json.loads(json.dumps(space_to_dict(space))))
    assert back == space
    assert back.dtype == space.dtype


def test_none_stays_none_and_unknown_spaces_are_refused():
    assert space_to_dict(None) is None and space_from_dict(None) is None
    with pytest.raises(TypeError, match="space of type Text as JSON; supported are Box"):
        space_to_dict(gym.spaces.Text(5))
    with pytest.raises(ValueError, match=r"Unknown space type 'Graph' in stored space"):
        space_from_dict({"type": "Graph"})
    with pytest.raises(ValueError, match="a part that is None"):
        space_from_dict({"type": "Tuple", "spaces": [None]})
    # descriptions written before "start" was stored read as starting at 0
    assert space_from_dict({"type": "Discrete", "n": 3}) == Discrete(3)
    assert space_from_dict({"type": "MultiDiscrete", "nvec": [2, 2]}) == MultiDiscrete([2, 2])


def test_flatten_one_hots_discrete_parts_from_their_start():
    out = flatten_batch(Discrete(3, start=-1), np.array([-1, 1, 0]))
    assert out.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]] and out.dtype == np.float32
    space = MultiDiscrete([2, 3], start=[1, 0])
    out = flatten_batch(space, np.array([[1, 2], [2, 0]]))
    assert out.tolist() == [[1, 0, 0, 0, 1], [0, 1, 1, 0, 0]]


def test_flatten_a_2d_multi_discrete_and_boxes():
    space = MultiDiscrete([[2, 2], [2, 2]])
    out = flatten_batch(space, np.array([[[0, 1], [1, 0]]]))
    assert out.tolist() == [[1, 0, 0, 1, 0, 1, 1, 0]]
    box = flatten_batch(Box(0, 10, (2, 2), np.int64), np.arange(8).reshape(2, 2, 2))
    assert box.dtype == np.float32 and box.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    bits = flatten_batch(gym.spaces.MultiBinary([2, 2]), np.ones((1, 2, 2), np.int8))
    assert bits.tolist() == [[1, 1, 1, 1]]


def test_nested_parts_are_concatenated_in_the_spaces_order():
    space = gym.spaces.Dict(
        {"z": Discrete(2), "a": gym.spaces.Tuple([Box(-1, 1, (2,)), Discrete(2, start=1)])}
    )
    obs = {"z": np.array([1]), "a": (np.array([[0.5, -0.5]]), np.array([1]))}
    out = flatten_batch(space, obs)
    order = list(space.spaces)  # gymnasium sorts a Dict's keys: "a" first
    assert order == ["a", "z"]
    assert out.tolist() == [[0.5, -0.5, 1, 0, 0, 1]]
    assert flat_dim(space) == out.shape[1] == 6


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_flat_dim_and_flat_box_match_what_flatten_batch_makes(space: gym.Space):
    batch = [space.sample() for _ in range(3)]
    if isinstance(space, gym.spaces.Dict):
        stacked = {
            "b": np.array([b["b"] for b in batch]),
            "a": tuple(np.array([b["a"][i] for b in batch]) for i in range(2)),
        }
    else:
        stacked = np.array(batch)
    flat = flatten_batch(space, stacked)
    box = flat_box(space)
    assert flat.shape == (3, flat_dim(space)) == (3, *box.shape)
    assert box.dtype == np.float32
    assert box.contains(flat[0])


def test_flat_box_keeps_box_bounds_and_gives_one_hot_parts_0_to_1():
    space = gym.spaces.Tuple(
        [Box(np.array([-2.0, 0.0], np.float32), np.array([3.0, 1.0], np.float32)), Discrete(2)]
    )
    box = flat_box(space)
    assert box.low.tolist() == [-2.0, 0.0, 0.0, 0.0]
    assert box.high.tolist() == [3.0, 1.0, 1.0, 1.0]
