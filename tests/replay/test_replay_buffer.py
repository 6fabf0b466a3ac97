"""Replay buffers: ring storage, prioritized probabilities and weights by hand, checkpoints."""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path

import numpy as np
import pytest

from rlmod.core.columns import Columns
from rlmod.errors import CheckpointError
from rlmod.replay import (
    N_STEP,
    MinTree,
    MultiAgentReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SumTree,
    sum_tree,
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


class _ReferenceTree:
    """The straightforward version: a Python list of leaves, set one by one; sums, minima
    and prefix sums computed item by item."""

    def __init__(self, capacity: int) -> None:
        self.leaves: list[float | None] = [None] * capacity

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        for i, v in zip(indices.tolist(), values.tolist(), strict=True):
            self.leaves[i] = v

    def total(self) -> float:
        return sum(v for v in self.leaves if v is not None)

    def min(self) -> float:
        return min((v for v in self.leaves if v is not None), default=np.inf)

    def find(self, values: np.ndarray) -> list[int]:
        """Per value, the first item whose inclusive prefix sum exceeds it."""
        prefix = list(itertools.accumulate(v or 0.0 for v in self.leaves))
        return [min(bisect.bisect_right(prefix, v), len(prefix) - 1) for v in values.tolist()]


@pytest.mark.parametrize(
    ("capacity", "scan_max", "num_levels"),
    [
        (1, None, 1),
        (13, None, 1),
        (20_000, None, 2),
        (5000, 1024, 2),
        (20_000, 1024, 3),  # a smaller top level: more levels, same code
    ],
)
def test_vectorized_trees_equal_a_straightforward_reference(
    capacity: int, scan_max: int | None, num_levels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batched updates (contiguous ranges, scattered and repeated indices, refreshed lazily)
    and batched searches give what item-by-item code gives. Integer priorities make every
    sum exact, so the comparison is exact."""
    if scan_max is not None:
        monkeypatch.setattr(sum_tree, "SCAN_MAX", scan_max)
    rng = np.random.default_rng(capacity)
    sums, mins, ref = SumTree(capacity), MinTree(capacity), _ReferenceTree(capacity)
    assert len(sums.levels) == len(mins.levels) == num_levels
    for step in range(12):
        if step % 3 == 0:  # a ring's new rows, wrapping at the end
            start = int(rng.integers(capacity))
            idx = (start + np.arange(min(capacity, 300))) % capacity
        else:  # sampled rows: scattered, with repeats (the last one wins)
            idx = rng.integers(0, capacity, 64)
        values = rng.integers(1, 1000, len(idx)).astype(np.float64)
        if step % 3 == 0 and idx[-1] - idx[0] == len(idx) - 1:  # no wrap: as a slice
            values[:] = values[0]
            for tree in (sums, mins):
                tree.update_range(int(idx[0]), int(idx[-1]) + 1, float(values[0]))
            ref.update(idx, values)
        else:
            for tree in (sums, mins, ref):
                tree.update(idx, values)
        if step % 2:  # several updates between reads: refreshed together
            continue
        np.testing.assert_array_equal(sums.leaves, [v or 0.0 for v in ref.leaves])
        assert sums.total == ref.total() and mins.min() == ref.min()
        # Every parent is the sum (minimum) of its 16 children; padding holds 0 (+inf).
        for tree, op, pad in ((sums, np.add, 0.0), (mins, np.minimum, np.inf)):
            for child, parent in zip(tree.levels[:-1], tree.levels[1:], strict=True):
                n = len(child) // 16
                np.testing.assert_array_equal(parent[:n], op.reduce(child.reshape(n, 16), 1))
                assert np.all(parent[n:] == pad)
        # Searches at random values and right at the items' boundaries.
        cums = np.cumsum([v or 0.0 for v in ref.leaves])
        probe = np.concatenate(
            [rng.random(200) * ref.total(), cums[:-1][:200], [0.0, np.nextafter(ref.total(), 0.0)]]
        )
        np.testing.assert_array_equal(sums.find(probe), ref.find(probe))


def test_prioritized_probabilities_and_weights_by_hand() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=0.5, epsilon=0.0, seed=0)
    idx = buf.add(_transitions(0, 4))
    np.testing.assert_allclose(buf.probabilities(idx), [0.25] * 4)  # new: max priority
    buf.update_priorities(idx, np.array([1.0, -4.0, 9.0, 16.0]))  # |td|^0.5 = 1, 2, 3, 4
    np.testing.assert_allclose(buf.probabilities(idx), [0.1, 0.2, 0.3, 0.4])
    # w_i = (N P(i))^-beta / max_j w_j with N = 4, beta = 0.5: sqrt(0.4 / (4 P(i))).
    np.testing.assert_allclose(
        buf.importance_weights(idx, beta=0.5), [1.0, np.sqrt(0.5), np.sqrt(1 / 3), 0.5], rtol=1e-6
    )
    np.testing.assert_allclose(buf.importance_weights(idx, beta=0.0), [1.0] * 4)
    # Items are drawn with these probabilities (stratified: close to exact).
    _, drawn = buf.sample(20_000, beta=0.4)
    np.testing.assert_allclose(
        np.bincount(drawn, minlength=4) / 20_000, [0.1, 0.2, 0.3, 0.4], atol=0.005
    )
    # A new item gets the largest priority so far (16^0.5 = 4).
    new = buf.add(_transitions(4, 1))
    np.testing.assert_allclose(buf.probabilities(new), [4 / 14])


def test_non_finite_td_errors_are_refused() -> None:
    buf = PrioritizedReplayBuffer(4)
    idx = buf.add(_transitions(0, 2))
    with pytest.raises(ValueError, match="non-finite TD errors"):
        buf.update_priorities(idx, np.array([1.0, np.nan]))


def _assert_same_buffer(a: ReplayBuffer, b: ReplayBuffer) -> None:
    """Bit for bit: contents, insertion pointer, RNG state, priorities and tree sums."""
    assert type(a) is type(b)
    assert (len(a), a.next_index, a.capacity) == (len(b), b.next_index, b.capacity)
    assert a.rng.bit_generator.state == b.rng.bit_generator.state
    assert a.columns.keys() == b.columns.keys()
    for col in a.columns:
        x, y = a.columns[col][: len(a)], b.columns[col][: len(b)]
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes(), col
    if isinstance(a, PrioritizedReplayBuffer):
        assert isinstance(b, PrioritizedReplayBuffer)
        assert a.max_priority == b.max_priority
        for la, lb in zip(a.tree.levels, b.tree.levels, strict=True):
            assert la.tobytes() == lb.tobytes()


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_buffer_round_trips_through_a_checkpoint_bit_for_bit(cls: type, tmp_path: Path) -> None:
    buf = cls(7, seed=1)
    buf.add(_transitions(0, 5))
    buf.add(_transitions(5, 4))  # wraps: the pointer is mid-ring, rows out of order
    _, idx = buf.sample(6)
    if isinstance(buf, PrioritizedReplayBuffer):
        buf.update_priorities(idx, np.linspace(-3.0, 5.0, 6))
    buf.save_to_path(tmp_path / "rb")
    restored = cls(7, seed=99)  # another seed: the RNG state must come from the checkpoint
    restored.restore_from_path(tmp_path / "rb")
    _assert_same_buffer(buf, restored)
    # Both go on identically: the same draws, the same weights, the same next slots.
    (batch_a, idx_a), (batch_b, idx_b) = buf.sample(5, beta=0.5), restored.sample(5, beta=0.5)
    np.testing.assert_array_equal(idx_a, idx_b)
    for col in batch_a:
        np.testing.assert_array_equal(batch_a[col], batch_b[col])
    np.testing.assert_array_equal(buf.add(_transitions(9, 2)), restored.add(_transitions(9, 2)))
    _assert_same_buffer(buf, restored)


def test_an_empty_buffer_round_trips(tmp_path: Path) -> None:
    PrioritizedReplayBuffer(4, seed=0).save_to_path(tmp_path / "rb")
    restored = PrioritizedReplayBuffer(4)
    restored.restore_from_path(tmp_path / "rb")
    assert len(restored) == 0 and restored.tree.total == 0.0
    restored.add(_transitions(0, 2))
    assert len(restored) == 2


def test_a_mismatched_buffer_is_refused_with_the_setting_to_change(tmp_path: Path) -> None:
    buf = PrioritizedReplayBuffer(4, alpha=0.6)
    buf.add(_transitions(0, 3))
    buf.save_to_path(tmp_path / "rb")
    with pytest.raises(CheckpointError, match=r"capacity 4.*replay_buffer_config\['capacity'\]"):
        PrioritizedReplayBuffer(5, alpha=0.6).restore_from_path(tmp_path / "rb")
    with pytest.raises(CheckpointError, match=r"replay_buffer_config\['alpha'\] to 0.6"):
        PrioritizedReplayBuffer(4, alpha=0.5).restore_from_path(tmp_path / "rb")
    with pytest.raises(
        CheckpointError,
        match=r"PrioritizedReplayBuffer.*replay_buffer_config"
        r"\['type'\] to 'PrioritizedEpisodeReplayBuffer'",
    ):
        ReplayBuffer(4).restore_from_path(tmp_path / "rb")


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


@pytest.mark.parametrize("kind", ["EpisodeReplayBuffer", "PrioritizedEpisodeReplayBuffer"])
def test_multi_agent_buffers_round_trip_through_a_checkpoint(kind: str, tmp_path: Path) -> None:
    def make(n: int) -> MultiAgentReplayBuffer:
        return MultiAgentReplayBuffer(
            replay_buffer_config={"type": kind, "capacity": 6}, n_step=lambda mid: (n, 0.5), seed=3
        )

    buf = make(1)
    buf.add({"p0": _env_runner_rows(8), "p/1": _env_runner_rows(3)})  # '/' in a module ID
    _, idx = buf.sample(4)
    buf.update_priorities(idx, {m: np.arange(1.0, 5.0) for m in idx})
    buf.save_to_path(tmp_path / "rb")
    restored = make(1)
    restored.restore_from_path(tmp_path / "rb")
    assert list(restored.buffers) == ["p0", "p/1"]
    for mid in buf.buffers:
        _assert_same_buffer(buf.buffers[mid], restored.buffers[mid])


def test_held_n_step_rows_are_stored_with_their_shorter_windows_on_restore(tmp_path: Path) -> None:
    """A restored run starts new episodes (envs are not saved mid-episode): rows whose
    window was still open become transitions with the window they have, not lost."""

    def make() -> MultiAgentReplayBuffer:
        return MultiAgentReplayBuffer(
            replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 10},
            n_step=lambda mid: (3, 0.5),
            seed=0,
        )

    buf = make()
    assert buf.add({"p0": _env_runner_rows(5, eps=7)}, source=1) == 3  # 2 rows wait
    buf.save_to_path(tmp_path / "rb")
    restored = make()
    restored.restore_from_path(tmp_path / "rb")
    stored = restored.buffers["p0"]
    assert len(stored) == 5
    np.testing.assert_array_equal(stored.columns[Columns.OBS][3:5, 0], [3.0, 4.0])
    np.testing.assert_allclose(stored.columns[Columns.REWARDS][:5], [1.75] * 3 + [1.5, 1.0])
    np.testing.assert_array_equal(stored.columns[N_STEP][:5], [3, 3, 3, 2, 1])
    np.testing.assert_array_equal(stored.columns[Columns.NEXT_OBS][3:5, 0], [5.0, 5.0])
    # A new episode that reuses episode ID 7 is not joined to the old rows.
    assert restored.add({"p0": _env_runner_rows(3, eps=7)}, source=1) == 1


def test_bad_replay_buffer_config_names_the_key() -> None:
    with pytest.raises(ValueError, match="unknown key 'capacty'.*capacity"):
        MultiAgentReplayBuffer(replay_buffer_config={"capacty": 5}, n_step=lambda m: (1, 0.9))
    with pytest.raises(ValueError, match=r"replay_buffer_config\['type'\]"):
        MultiAgentReplayBuffer(replay_buffer_config={"type": "Foo"}, n_step=lambda m: (1, 0.9))


def test_beta_is_annealed_by_env_steps() -> None:
    buf = MultiAgentReplayBuffer(
        replay_buffer_config={
            "type": "PrioritizedEpisodeReplayBuffer",
            "capacity": 8,
            "alpha": 1.0,
            "beta": [[0, 0.4], [100, 1.0]],
        },
        n_step=lambda mid: (1, 0.9),
        seed=0,
    )
    buf.add({"p0": _env_runner_rows(4)})
    per = buf.buffers["p0"]
    assert isinstance(per, PrioritizedReplayBuffer)
    per.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    for step, beta in ((0, 0.4), (50, 0.7), (100, 1.0), (500, 1.0)):
        batch, idx = buf.sample(16, num_env_steps_sampled_lifetime=step)
        # w_i = (N P_i)^-beta / max_j (N P_j)^-beta with P = p / 10 (alpha 1, epsilon 1e-6).
        expected = (per.tree.leaves[idx["p0"]] / per.tree.leaves[:4].min()) ** -beta
        np.testing.assert_allclose(batch["p0"]["weights"], expected, rtol=1e-5)


def test_prioritized_adds_reach_the_trees_across_wraps_and_priority_updates() -> None:
    """Adds write leaves and hand their rows to the trees later (at a read or after
    HAND_OVER_ROWS): every level must then equal one rebuilt from the leaves."""
    from rlmod.replay.replay_buffer import HAND_OVER_ROWS
    from rlmod.replay.sum_tree import MinTree, SumTree

    rng = np.random.default_rng(0)
    cap = 200_000  # 3 levels: 200,000 leaves, 12,500 and 782 parents
    buf = PrioritizedReplayBuffer(cap, alpha=0.7, seed=0)
    for i in range(60):  # 7,001-row adds wrap the ring twice
        buf.add({"obs": rng.random((7001, 2)), "rewards": rng.random(7001)})
        if i % 7 == 3:
            _, idx = buf.sample(16)
            buf.update_priorities(idx, rng.random(16) * 5)
        if i % 11 == 5:  # a new largest priority: later adds get it
            buf.update_priorities(np.array([int(rng.integers(0, len(buf)))]), np.array([9.0]))
        for tree, fresh in ((buf.tree, SumTree(cap)), (buf.min_tree, MinTree(cap))):
            fresh.update(np.arange(cap), tree.leaves.copy())
            assert len(tree.levels) == 3
            for a, b in zip(tree.levels, fresh.levels, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12)
        # the min tree's leaves are the sum tree's (copied when the trees are told)
        np.testing.assert_array_equal(buf.min_tree.leaves[: len(buf)], buf.tree.leaves[: len(buf)])
    newest = (buf.next_index - 7001) % cap
    assert buf.tree.leaves[newest] == pytest.approx((9.0 + buf.epsilon) ** 0.7)
    # Many adds without a read: the trees are told (and refresh) by themselves.
    big = PrioritizedReplayBuffer(4 * HAND_OVER_ROWS, seed=0)
    for _ in range(HAND_OVER_ROWS // 256 + 1):
        big.add({"obs": np.zeros((256, 1))})
    assert len(big._written) <= 1
