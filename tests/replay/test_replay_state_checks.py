"""A stored replay buffer state is checked field by field before any of it is loaded
(issue 30, item 6): an insertion pointer of 500 in a buffer of 3 rows made training sample
a row never written, and bad priorities, columns or RNG states failed later, far from the
checkpoint, or half-way through a restore."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from rlmod.core.columns import Columns
from rlmod.errors import CheckpointError
from rlmod.replay import N_STEP, MultiAgentReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer


def _transitions(start: int, num: int) -> dict[str, np.ndarray]:
    x = np.arange(start, start + num)
    return {Columns.OBS: np.stack([x, -x], 1).astype(np.float32), Columns.ACTIONS: x}


def _filled(cls: type[ReplayBuffer], capacity: int = 1000, rows: int = 3) -> ReplayBuffer:
    buf = cls(capacity, seed=0)
    buf.add(_transitions(0, rows))
    return buf


def _snapshot(buf: ReplayBuffer) -> dict[str, Any]:
    return copy.deepcopy(buf.get_state())


def _assert_same(buf: ReplayBuffer, before: dict[str, Any]) -> None:
    after = buf.get_state()
    assert after.keys() == before.keys()
    for key, value in before.items():
        if key == "columns":
            assert value.keys() == after[key].keys()
            for c in value:
                np.testing.assert_array_equal(value[c], after[key][c])
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, after[key])
        else:
            assert after[key] == value, key


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_pointer_beyond_the_filled_rows_is_refused(cls: type[ReplayBuffer]) -> None:
    """The issue's case: next_index 500 with size 3. Loaded, the next add wrote row 500 and
    sampling drew rows 0..3, row 3 never written (uninitialized memory)."""
    buf = _filled(cls)
    state = buf.get_state()
    state["next_index"] = 500
    fresh = _filled(cls)
    before = _snapshot(fresh)
    with pytest.raises(CheckpointError, match=r"next_index=500 differs from its size=3"):
        fresh.set_state(state)
    _assert_same(fresh, before)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        state[key] = value

    return edit


def _column(name: str, make: Callable[[np.ndarray], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        state["columns"][name] = make(state["columns"][name])

    return edit


BAD_STATES = [  # a buffer of capacity 4 holding 3 rows
    ("size-above-capacity", _set("size", 5), r"size=5 must be an int >= 0 and <= 4"),
    ("size-negative", _set("size", -1), r"size=-1 must be an int >= 0 and <= 4"),
    ("size-float", _set("size", 2.5), r"size=2.5 must be an int"),
    ("size-missing", lambda s: s.pop("size"), r"lacks 'size'"),
    (
        "next-index-at-capacity",
        _set("next_index", 4),
        r"next_index=4 must be an int >= 0 and "
        r"<= 3",
    ),
    ("next-index-negative", _set("next_index", -1), r"next_index=-1 must be an int >= 0"),
    ("next-index-text", _set("next_index", "abc"), r"next_index='abc' must be an int"),
    ("next-index-behind-size", _set("next_index", 1), r"next_index=1 differs from its size=3"),
    ("capacity-text", _set("capacity", "abc"), r"capacity='abc' must be an int >= 1"),
    ("capacity-inf", _set("capacity", 1e999), r"capacity=inf must be an int >= 1"),
    ("column-short", _column(Columns.OBS, lambda v: v[:2]), r"says size 3 but its columns"),
    (
        "column-text",
        _column(Columns.OBS, lambda v: v.astype(str)),
        r"column 'obs' is a <U\d+ array of shape \(3, 2\), not a numeric array",
    ),
    (
        "column-list",
        _column(Columns.OBS, lambda v: v.tolist()),
        r"column 'obs' is a list, not a numeric array",
    ),
    (
        "column-scalar",
        _column(Columns.ACTIONS, lambda v: np.float64(1.0)),
        r"column 'actions' is a float64, not a numeric array",
    ),
    ("no-columns", _set("columns", {}), r"has size=3 but no columns"),
    ("columns-not-a-dict", _set("columns", [1, 2]), r"columns are a list, not a dict"),
    (
        "rng-of-another-generator",
        lambda s: s["rng"].update(bit_generator="MT19937"),
        r"rng does not fit its PCG64 generator",
    ),
    (
        "rng-garbage",
        _set("rng", {"bit_generator": "PCG64", "state": "x"}),
        r"rng does not fit its PCG64 generator",
    ),
    ("state-not-a-dict", None, r"is a list, not a dict"),
]


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
@pytest.mark.parametrize("name, edit, message", BAD_STATES, ids=[c[0] for c in BAD_STATES])
def test_a_bad_buffer_state_is_refused_and_changes_nothing(
    cls: type[ReplayBuffer], name: str, edit: Any, message: str
) -> None:
    state: Any = _filled(cls, capacity=4).get_state()
    if edit is None:
        state = [state]
    else:
        edit(state)
    buf = _filled(cls, capacity=4, rows=1)
    before = _snapshot(buf)
    with pytest.raises(CheckpointError, match=message):
        buf.set_state(state)
    _assert_same(buf, before)


def test_a_full_buffer_may_point_anywhere() -> None:
    """Once full, the pointer is where the oldest row is: any row, not the size."""
    buf = ReplayBuffer(4, seed=0)
    buf.add(_transitions(0, 3))
    buf.add(_transitions(3, 3))
    assert len(buf) == 4 and buf.next_index == 2
    restored = ReplayBuffer(4)
    restored.set_state(buf.get_state())
    assert restored.next_index == 2 and len(restored) == 4


BAD_PRIORITIES = [
    ("nan", lambda s: s["priorities"].__setitem__(1, np.nan), r"finite and > 0"),
    ("negative", lambda s: s["priorities"].__setitem__(0, -1.0), r"finite and > 0"),
    # one leaf of 0 made the smallest leaf 0: every importance weight came out 0
    ("zero", lambda s: s["priorities"].__setitem__(2, 0.0), r"finite and > 0"),
    (
        "too-few",
        lambda s: s.update(priorities=s["priorities"][:2]),
        r"priorities must be a numeric array of its 3 rows, got a float64 array of shape \(2,\)",
    ),
    ("not-an-array", _set("priorities", "x"), r"priorities must be a numeric array"),
    ("missing", lambda s: s.pop("priorities"), r"lacks 'priorities'"),
    (
        "max-priority-nan",
        _set("max_priority", float("nan")),
        r"max_priority=nan must be a finite number > 0",
    ),
    ("max-priority-zero", _set("max_priority", 0), r"max_priority=0 must be a finite number > 0"),
    ("alpha-text", _set("alpha", "abc"), r"alpha='abc' is not a finite number"),
]


@pytest.mark.parametrize("name, edit, message", BAD_PRIORITIES, ids=[c[0] for c in BAD_PRIORITIES])
def test_bad_priorities_are_refused_and_change_nothing(name: str, edit: Any, message: str) -> None:
    source = _filled(PrioritizedReplayBuffer, capacity=4)
    assert isinstance(source, PrioritizedReplayBuffer)
    source.update_priorities(np.arange(3), np.array([0.5, 2.0, 1.0]))
    state = source.get_state()
    edit(state)
    buf = _filled(PrioritizedReplayBuffer, capacity=4, rows=1)
    assert isinstance(buf, PrioritizedReplayBuffer)
    before, total = _snapshot(buf), buf.tree.total
    with pytest.raises(CheckpointError, match=message):
        buf.set_state(state)
    _assert_same(buf, before)
    assert buf.tree.total == total


# ---------------------------------------------------------------------- multi-agent
def _env_runner_rows(num: int, *, eps: int = 0) -> dict[str, np.ndarray]:
    """`num` rows of one ongoing episode, as an EnvRunner's sample() gives them."""
    return {
        Columns.OBS: np.arange(num, dtype=np.float32)[:, None],
        Columns.NEXT_OBS: np.arange(1, num + 1, dtype=np.float32)[:, None],
        Columns.ACTIONS: np.arange(num),
        Columns.REWARDS: np.ones(num, np.float32),
        Columns.TERMINATEDS: np.zeros(num, bool),
        Columns.TRUNCATEDS: np.zeros(num, bool),
        Columns.EPS_ID: np.full(num, eps, np.int64),
    }


def _multi(kind: str = "PrioritizedEpisodeReplayBuffer") -> MultiAgentReplayBuffer:
    buf = MultiAgentReplayBuffer(
        replay_buffer_config={"type": kind, "capacity": 10}, n_step=lambda mid: (3, 0.5), seed=0
    )
    buf.add({"p0": _env_runner_rows(5, eps=1), "p1": _env_runner_rows(6, eps=2)})
    return buf


def _assert_same_multi(buf: MultiAgentReplayBuffer, before: dict[str, Any]) -> None:
    assert list(buf.buffers) == list(before["buffers"])
    for mid, saved in before["buffers"].items():
        _assert_same(buf.buffers[mid], saved)
    held = buf.get_state()["held"]
    assert held.keys() == before["held"].keys()


def _held_of_two_shapes(state: dict[str, Any]) -> None:
    """Module p1 has no saved buffer, and two EnvRunners' held rows that differ in shape:
    the second add failed after the first was stored."""
    state["buffers"].pop("p1")
    rows = state["held"]["p1"]["0"]
    state["held"]["p1"]["1"] = {
        **rows,
        Columns.OBS: np.zeros((2, 3), np.float32),
        Columns.NEXT_OBS: np.zeros((2, 3), np.float32),
    }


MULTI_BAD = [
    (
        "second-module-pointer",
        lambda s: s["buffers"]["p1"].update(next_index=7),
        r"replay_buffer: module 'p1': .*next_index=7 differs from its size=4",
    ),
    (
        "columns-renamed",
        lambda s: s["buffers"]["p1"]["columns"].update(
            extra=s["buffers"]["p1"]["columns"].pop(Columns.REWARDS)
        ),
        r"module 'p1': The saved replay buffer's columns are \['actions', 'extra'",
    ),
    (
        "n-step-zero",
        lambda s: s["buffers"]["p1"]["columns"][N_STEP].__setitem__(0, 0),
        r"module 'p1': .*column 'n_step' holds values < 1",
    ),
    (
        "rewards-nan",
        lambda s: s["buffers"]["p1"]["columns"][Columns.REWARDS].__setitem__(1, np.nan),
        r"module 'p1': .*column 'rewards' holds NaN or inf",
    ),
    (
        "held-rows-of-two-lengths",
        lambda s: s["held"]["p1"]["0"].update(obs=s["held"]["p1"]["0"][Columns.OBS][:1]),
        r"module 'p1': held n-step columns differ in length",
    ),
    (
        "held-column-missing",
        lambda s: s["held"]["p1"]["0"].pop(Columns.EPS_ID),
        r"module 'p1': held n-step rows lack the columns \['eps_id'\]",
    ),
    (
        "held-rows-of-another-shape",
        lambda s: s["held"]["p1"]["0"].update(
            obs=np.zeros((2, 3), np.float32), new_obs=np.zeros((2, 3), np.float32)
        ),
        r"module 'p1': held rows: Column 'obs' holds float32 rows of shape \(3,\)",
    ),
    (
        "held-sources-of-two-shapes",
        _held_of_two_shapes,
        r"module 'p1': held rows: Column 'obs' holds float32 rows of shape \(3,\); this buffer "
        r"stores float32 rows of \(1,\)",
    ),
    ("held-not-a-dict", _set("held", [1]), r"'held' must be a dict"),
    ("buffers-not-a-dict", _set("buffers", [1]), r"'buffers' is a list"),
]


@pytest.mark.parametrize("name, edit, message", MULTI_BAD, ids=[c[0] for c in MULTI_BAD])
def test_a_bad_module_buffer_changes_no_module(name: str, edit: Any, message: str) -> None:
    """Module p0's good state is not loaded when p1's is bad: every module's state, held
    rows included, is checked and built aside before any replaces the live buffers."""
    state = _multi().get_state()
    assert state["held"]["p1"]["0"][Columns.OBS].shape == (2, 1)  # 2 rows wait per module
    state["buffers"]["p0"]["next_index"] = 0  # p0 changed but valid: must not be loaded...
    state["buffers"]["p0"]["size"] = 0
    state["buffers"]["p0"]["columns"] = {}
    state["buffers"]["p0"]["priorities"] = state["buffers"]["p0"]["priorities"][:0]
    edit(state)
    live = _multi()
    live.add({"p0": _env_runner_rows(2, eps=1)})
    before = copy.deepcopy(live.get_state())
    with pytest.raises(CheckpointError, match=message):
        live.set_state(state)
    _assert_same_multi(live, before)  # ...since p1's is bad


def test_a_good_multi_agent_state_still_loads() -> None:
    saved = _multi()
    state = saved.get_state()
    restored = _multi("PrioritizedEpisodeReplayBuffer")
    restored.set_state(state)
    assert list(restored.buffers) == ["p0", "p1"]
    assert len(restored.buffers["p1"]) == len(saved.buffers["p1"]) + 2  # held rows stored
