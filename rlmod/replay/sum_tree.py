"""SumTree: the array-backed binary tree of priorities that prioritized replay samples from.

Used by `PrioritizedReplayBuffer`; every operation is vectorized over a batch of indices,
so one update or one search costs `log2(capacity)` numpy calls, not a Python loop per item.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Leaves hold priorities; each inner node holds the sum of its two children.

    Node 1 is the root, node i has children 2i and 2i+1, and leaf j is node
    `leaf_base + j` with `leaf_base` the capacity rounded up to a power of two.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.leaf_base = 1 << max(0, int(capacity - 1).bit_length())
        self.depth = self.leaf_base.bit_length() - 1
        self.nodes = np.zeros(2 * self.leaf_base, np.float64)

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        """The priorities of all `capacity` items (a view)."""
        return self.nodes[self.leaf_base:self.leaf_base + self.capacity]

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities of items `indices` (the last one wins for repeated indices)."""
        node = np.asarray(indices, np.int64) + self.leaf_base
        self.nodes[node] = priorities
        for _ in range(self.depth):  # recompute the parents, level by level
            node = np.unique(node >> 1)
            self.nodes[node] = self.nodes[2 * node] + self.nodes[2 * node + 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each `v` in [0, total), the item `i` with `prefix(i) <= v < prefix(i + 1)`,
        where `prefix(i)` sums the priorities of the items before `i`."""
        values = np.array(values, np.float64)
        node = np.ones(len(values), np.int64)
        for _ in range(self.depth):
            left = self.nodes[2 * node]
            go_right = values >= left
            values -= np.where(go_right, left, 0.0)
            node = 2 * node + go_right
        # Rounding can step past the last item with priority; clamp into the items.
        return np.minimum(node - self.leaf_base, self.capacity - 1)
