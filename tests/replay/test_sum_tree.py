"""SumTree and MinTree (rlmod.replay.sum_tree) on small, hand-checked cases: `find` never
returns an item of value 0 (at a boundary, past the total, between zero items), refuses an
empty tree, leaves are current before any refresh while parents are refreshed on read
(also after `mark_written` of leaves written in place), and pending updates are bounded.

The trees against an item-by-item reference over many random updates and several
levels, and through a PrioritizedReplayBuffer, are tested in
tests/replay/test_replay_buffer.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlmod.replay import sum_tree
from rlmod.replay.sum_tree import MAX_STALE, MinTree, SumTree


@pytest.fixture
def two_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trees of 40 items (48 padded leaves) get one parent level of 16 nodes."""
    monkeypatch.setattr(sum_tree, "SCAN_MAX", 16)


def test_find_by_hand_skips_items_of_value_zero(two_levels: None):
    tree = SumTree(40)
    values = np.zeros(40)
    values[[3, 17, 18, 35]] = [1.0, 2.0, 0.5, 4.0]
    tree.update(np.arange(40), values)
    assert len(tree.levels) == 2
    assert tree.total == 7.5
    # prefix sums: [0, 1) -> 3, [1, 3) -> 17, [3, 3.5) -> 18, [3.5, 7.5) -> 35
    probe = np.array([0.0, 0.999, 1.0, 2.5, 3.0, 3.49, 3.5, 7.4])
    assert tree.find(probe).tolist() == [3, 3, 17, 17, 18, 18, 35, 35]
    # at or past the total (rounding): the last item with a value, not a zero after it
    assert tree.find(np.array([7.5, 100.0])).tolist() == [35, 35]


def test_find_refuses_a_tree_with_nothing_to_sample():
    tree = SumTree(5)
    with pytest.raises(ValueError, match="at least one item with a positive value"):
        tree.find(np.array([0.0]))
    tree.update(np.array([2]), np.array([0.0]))
    with pytest.raises(ValueError, match="at least one item with a positive value"):
        tree.find(np.array([0.0]))


def test_min_tree_counts_unset_items_as_infinite(two_levels: None):
    tree = MinTree(40)
    assert tree.min() == np.inf
    tree.update(np.array([30]), np.array([5.0]))
    assert tree.min() == 5.0
    tree.update_range(0, 3, 2.0)
    assert tree.min() == 2.0
    tree.update(np.array([1, 1]), np.array([0.5, 9.0]))  # repeated: the last one wins
    assert tree.leaves[1] == 9.0 and tree.min() == 2.0


def test_leaves_are_current_at_once_and_parents_on_the_next_read(two_levels: None):
    tree = SumTree(40)
    tree.update(np.array([0, 20]), np.array([1.0, 2.0]))
    assert tree.leaves[[0, 20]].tolist() == [1.0, 2.0]
    assert tree._levels[1].sum() == 0.0  # parents not yet recomputed
    assert tree.levels[1].tolist()[:3] == [1.0, 2.0, 0.0]
    # leaves written straight into `leaves` count once marked
    tree.leaves[32:35] = 3.0
    tree.mark_written(32, 35)
    assert tree.total == 12.0
    tree.mark_written(5, 5)  # an empty range: nothing noted
    assert tree._stale_ranges == []
    tree.update(np.array([], dtype=np.int64), np.array([]))
    assert tree.total == 12.0


def test_pending_updates_are_refreshed_before_they_pile_up(two_levels: None):
    tree = SumTree(40)
    for i in range(MAX_STALE - 1):
        tree.update(np.array([i % 40]), np.array([1.0]))
    assert len(tree._stale_ranges) == MAX_STALE - 1
    tree.update(np.array([39]), np.array([1.0]))
    assert tree._stale_ranges == [] and tree._stale_items == []
    assert tree._levels[1].sum() == 40.0  # refreshed without a read


def test_scattered_and_nearby_updates_both_reach_the_parents(two_levels: None):
    tree = SumTree(40)
    tree.update(np.array([0, 39]), np.array([1.0, 1.0]))  # far apart: noted as items
    tree.update(np.array([16, 17]), np.array([2.0, 2.0]))  # close: noted as a range
    assert len(tree._stale_items) == 1 and tree._stale_ranges == [(16, 17)]
    assert tree.levels[1].tolist()[:3] == [1.0, 4.0, 1.0]


def test_a_tree_of_one_item_has_only_leaves():
    tree = SumTree(1)
    tree.update(np.array([0]), np.array([0.25]))
    assert len(tree.levels) == 1 and tree.total == 0.25
    assert tree.find(np.array([0.0, 0.2499, 0.25])).tolist() == [0, 0, 0]
