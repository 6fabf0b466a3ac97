"""Replay buffers: ring storage, prioritized probabilities and weights by hand, state."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlmod.core.columns import Columns
from rlmod.replay import (
    MultiAgentReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SumTree,
)


def _transitions(start: int, num: int) -> dict[str, np.ndarray]:
    x = np.arange(start, start + num)
    return {Columns.OBS: np.stack([x, -x], 1).astype(np.float32), Columns.ACTIONS: x}


def test_ring_overwrites_the_oldest_rows() -> None:
    buf = ReplayBuffer(5, seed=0)
    np.testing.assert_array_equal(buf.add(_transitions(0, 3)), [0, 1, 2])
    np.testing.assert_array_equal(buf.add(_transitions(3, 4)), [3, 4, 0, 1])
    assert len(buf) == 5 and buf.next_index == 2
    np.testing.assert_array_equal(buf.columns[Columns.ACTIONS], [5, 6, 2, 3, 4])
    buf.add(_transitions(7, 12))  # more than the capacity: the last 5 rows stay
    assert sorted(buf.columns[Columns.ACTIONS].tolist()) == [14, 15, 16, 17, 18]
    batch, idx = buf.sample(64)
    np.testing.assert_array_equal(batch[Columns.ACTIONS], buf.columns[Columns.ACTIONS][idx])
    np.testing.assert_array_equal(batch["weights"], np.ones(64))


def test_sum_tree_finds_the_prefix_sum_item() -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(13)  # not a power of two
    prios = rng.random(13)
    tree.update(np.arange(13), prios)
    assert tree.total == pytest.approx(prios.sum())
    values = rng.random(1000) * prios.sum()
    expected = np.searchsorted(np.cumsum(prios), values, side="right")
    np.testing.assert_array_equal(tree.find(values), expected)


def test_prioritized_probabilities_and_weights_by_hand() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=0.5, epsilon=0.0, seed=0)
    idx = buf.add(_transitions(0, 4))
    np.testing.assert_allclose(buf.probabilities(idx), [0.25] * 4)  # new: max priority
    buf.update_priorities(idx, np.array([1.0, -4.0, 9.0, 16.0]))  # |td|^0.5 = 1, 2, 3, 4
    np.testing.assert_allclose(buf.probabilities(idx), [0.1, 0.2, 0.3, 0.4])
    # w_i = (N P(i))^-beta / max_j w_j with N = 4, beta = 0.5: sqrt(0.4 / (4 P(i))).
    np.testing.assert_allclose(buf.importance_weights(idx, beta=0.5),
                               [1.0, np.sqrt(0.5), np.sqrt(1 / 3), 0.5], rtol=1e-6)
    np.testing.assert_allclose(buf.importance_weights(idx, beta=0.0), [1.0] * 4)
    # Items are drawn with these probabilities (stratified: close to exact).
    _, drawn = buf.sample(20_000, beta=0.4)
    np.testing.assert_allclose(np.bincount(drawn, minlength=4) / 20_000, [0.1, 0.2, 0.3, 0.4],
                               atol=0.005)
    # A new item gets the largest priority so far (16^0.5 = 4).
    new = buf.add(_transitions(4, 1))
    np.testing.assert_allclose(buf.probabilities(new), [4 / 14])


def test_non_finite_td_errors_are_refused() -> None:
    buf = PrioritizedReplayBuffer(4)
    idx = buf.add(_transitions(0, 2))
    with pytest.raises(ValueError, match="non-finite TD errors"):
        buf.update_priorities(idx, np.array([1.0, np.nan]))


def _checkpoint_round_trip(state: dict) -> dict:
    """What a checkpoint does generically: arrays to safetensors, the rest to JSON."""
    from safetensors.numpy import load, save

    arrays: dict[str, np.ndarray] = {}

    def split(node: object, path: str) -> object:
        if isinstance(node, dict):
            return {k: split(v, f"{path}/{k}") for k, v in node.items()}
        if isinstance(node, np.ndarray):
            arrays[path] = node
            return {"__array__": path}
        return node

    meta = json.loads(json.dumps(split(state, "")))
    loaded = load(save(arrays))

    def join(node: object) -> object:
        if isinstance(node, dict):
            if set(node) == {"__array__"}:
                return loaded[node["__array__"]]
            return {k: join(v) for k, v in node.items()}
        return node

    return join(meta)  # type: ignore[return-value]


@pytest.mark.parametrize("kind", ["EpisodeReplayBuffer", "PrioritizedEpisodeReplayBuffer"])
def test_buffers_round_trip_through_safetensors_and_json(kind: str) -> None:
    def make() -> MultiAgentReplayBuffer:
        return MultiAgentReplayBuffer(replay_buffer_config={"type": kind, "capacity": 6},
                                      n_step=lambda mid: (1, 0.99), seed=3)

    rows = {Columns.OBS: np.arange(8, dtype=np.float32)[:, None],
            Columns.NEXT_OBS: np.arange(1, 9, dtype=np.float32)[:, None],
            Columns.ACTIONS: np.arange(8), Columns.REWARDS: np.ones(8, np.float32),
            Columns.TERMINATEDS: np.zeros(8, bool), Columns.TRUNCATEDS: np.zeros(8, bool),
            Columns.EPS_ID: np.zeros(8, np.int64)}
    buf = make()
    buf.add({"p0": rows, "p1": {k: v[:3] for k, v in rows.items()}})
    _, idx = buf.sample(4)
    buf.update_priorities(idx, {m: np.arange(1.0, 5.0) for m in idx})
    restored = make()
    restored.set_state(_checkpoint_round_trip(buf.get_state()))
    for mid in ("p0", "p1"):
        a, b = buf.buffers[mid], restored.buffers[mid]
        assert (len(a), a.next_index) == (len(b), b.next_index)
        for col in a.columns:
            np.testing.assert_array_equal(a.columns[col][:len(a)], b.columns[col][:len(b)])
        if isinstance(a, PrioritizedReplayBuffer):
            assert isinstance(b, PrioritizedReplayBuffer)
            np.testing.assert_allclose(a.probabilities(np.arange(len(a))),
                                       b.probabilities(np.arange(len(b))))


def test_bad_replay_buffer_config_names_the_key() -> None:
    with pytest.raises(ValueError, match="unknown key 'capacty'.*capacity"):
        MultiAgentReplayBuffer(replay_buffer_config={"capacty": 5}, n_step=lambda m: (1, 0.9))
    with pytest.raises(ValueError, match=r"replay_buffer_config\['type'\]"):
        MultiAgentReplayBuffer(replay_buffer_config={"type": "Foo"}, n_step=lambda m: (1, 0.9))
