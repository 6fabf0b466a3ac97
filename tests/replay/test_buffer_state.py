"""The check of a stored replay buffer state (rlmod.replay.buffer_state), called on plain
dicts: each field's bounds and types (bools are not ints, numpy ints are), the settings a
mismatch names, the columns' shape rules, an RNG state that must fit the buffer's
generator (which the check leaves alone), and the priorities of prioritized buffers.

That buffers run this check before loading anything, and change nothing when it fails,
is tested in tests/replay/test_replay_state_checks.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlmod.errors import CheckpointError
from rlmod.replay.buffer_state import check_buffer_state, check_priorities

KIND = "ReplayBuffer"


def _state(**overrides: Any) -> dict[str, Any]:
    state: dict[str, Any] = {
        "type": KIND,
        "capacity": 4,
        "size": 2,
        "next_index": 2,
        "columns": {"obs": np.zeros((2, 3), np.float32), "done": np.array([False, True])},
    }
    state.update(overrides)
    return state


def _check(state: object, capacity: int = 4, kind: str = KIND):
    return check_buffer_state(state, kind=kind, capacity=capacity, rng=np.random.default_rng(0))


def test_a_good_state_comes_back_as_plain_ints_and_arrays():
    checked = _check(_state(size=np.int64(2), next_index=np.int32(2)))
    assert (checked.size, checked.next_index) == (2, 2)
    assert type(checked.size) is int and type(checked.next_index) is int
    assert set(checked.columns) == {"obs", "done"} and checked.rng is None
    assert checked.priorities is None and checked.max_priority is None
    # an empty buffer needs no columns; a state without "type" is taken for this kind
    empty = _check({"capacity": 4, "size": 0, "next_index": 0})
    assert empty.size == 0 and empty.columns == {}


def test_a_full_buffer_may_point_at_any_row_but_not_past_the_last():
    full = {"obs": np.zeros(4)}
    for next_index in range(4):
        assert _check(_state(size=4, next_index=next_index, columns=full)).next_index == next_index
    with pytest.raises(CheckpointError, match=r"next_index=4 must be an int >= 0 and <= 3"):
        _check(_state(size=4, next_index=4, columns=full))


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ([1, 2], r"The saved replay buffer is a list, not a dict; the checkpoint is corrupt"),
        (
            _state(type="PrioritizedReplayBuffer"),
            r"is a PrioritizedReplayBuffer, this one a ReplayBuffer; set "
            r"replay_buffer_config\['type'\] to 'PrioritizedEpisodeReplayBuffer'",
        ),
        (
            _state(capacity=8),
            r"has capacity 8, this one 4; set replay_buffer_config\['capacity'\] to match",
        ),
        (_state(capacity=True), r"capacity=True must be an int >= 1"),
        (_state(size=True), r"size=True must be an int >= 0 and <= 4"),
        (_state(size=5), r"size=5 must be an int >= 0 and <= 4"),
        (_state(size=2.0), r"size=2.0 must be an int"),
        (_state(next_index=-1), r"next_index=-1 must be an int >= 0"),
        (
            _state(next_index=1),
            r"next_index=1 differs from its size=2: until a buffer is full.* at row 2",
        ),
        ({"type": KIND, "capacity": 4, "next_index": 0}, r"lacks 'size'"),
        (_state(columns=[np.zeros(2)]), r"columns are a list, not a dict"),
        (_state(columns={}), r"has size=2 but no columns"),
        (
            _state(columns={"obs": np.array(["a", "b"])}),
            r"column 'obs' is a <U1 array of shape \(2,\), not a numeric array",
        ),
        (_state(columns={"obs": np.float32(1.0)}), r"column 'obs' is a float32, not a numeric"),
        (_state(columns={"obs": np.array(1.0)}), r"column 'obs' is a float64 array of shape \(\)"),
        (_state(columns={"obs": [0.0, 1.0]}), r"column 'obs' is a list, not a numeric array"),
        (
            _state(columns={"obs": np.zeros(2), "act": np.zeros(3)}),
            r"says size 2 but its columns have \{'obs': 2, 'act': 3\} rows",
        ),
    ],
)
def test_a_bad_field_is_named_in_the_error(state: object, message: str):
    with pytest.raises(CheckpointError, match=message):
        _check(state)


def test_the_other_buffer_kind_names_its_own_setting():
    with pytest.raises(CheckpointError, match=r"to 'EpisodeReplayBuffer' to load it"):
        _check(_state(), kind="PrioritizedReplayBuffer")


def test_an_rng_state_must_fit_the_buffers_generator_which_stays_unchanged():
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    saved = np.random.default_rng(123).bit_generator.state
    checked = check_buffer_state(_state(rng=saved), kind=KIND, capacity=4, rng=rng)
    assert checked.rng == saved and checked.rng is not saved
    assert rng.bit_generator.state == before  # checked on a probe, not on `rng`

    other = np.random.Generator(np.random.MT19937(0)).bit_generator.state
    with pytest.raises(CheckpointError, match=r"rng does not fit its PCG64 generator"):
        check_buffer_state(_state(rng=other), kind=KIND, capacity=4, rng=rng)
    with pytest.raises(CheckpointError, match=r"rng does not fit"):
        check_buffer_state(_state(rng={"nonsense": 1}), kind=KIND, capacity=4, rng=rng)
    assert rng.bit_generator.state == before


def _prioritized(**overrides: Any) -> dict[str, Any]:
    state: dict[str, Any] = {
        "alpha": 0.6,
        "priorities": np.array([0.5, 2.0], np.float32),
        "max_priority": 2,
    }
    state.update(overrides)
    return state


def test_good_priorities_come_back_as_float64_leaves_and_a_float_maximum():
    leaves, max_priority = check_priorities(_prioritized(), 2, alpha=0.6)
    assert leaves.dtype == np.float64 and leaves.tolist() == [0.5, 2.0]
    assert max_priority == 2.0 and type(max_priority) is float
    # an int alpha equal to the buffer's float one, and a state without alpha, pass
    check_priorities(_prioritized(alpha=1), 2, alpha=1.0)
    state = _prioritized()
    del state["alpha"]
    check_priorities(state, 2, alpha=0.3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"alpha": 0.5}, r"has alpha=0.5, this one alpha=0.6; set replay_buffer_config\['alpha'\]"),
        ({"alpha": True}, r"alpha=True is not a finite number"),
        ({"alpha": float("inf")}, r"alpha=inf is not a finite number"),
        ({"priorities": np.ones((2, 1))}, r"numeric array of its 2 rows, got a float64 array"),
        ({"priorities": np.array([1.0, np.inf])}, r"must be finite and > 0"),
        ({"max_priority": True}, r"max_priority=True must be a finite number > 0"),
        ({"max_priority": -1.0}, r"max_priority=-1.0 must be a finite number > 0"),
        ({"max_priority": "2"}, r"max_priority='2' must be a finite number > 0"),
    ],
)
def test_bad_priorities_are_named_in_the_error(overrides: dict[str, Any], message: str):
    with pytest.raises(CheckpointError, match=message):
        check_priorities(_prioritized(**overrides), 2, alpha=0.6)


def test_missing_priority_fields_are_named():
    for key in ("priorities", "max_priority"):
        state = _prioritized()
        del state[key]
        with pytest.raises(CheckpointError, match=f"lacks '{key}'"):
            check_priorities(state, 2, alpha=0.6)
