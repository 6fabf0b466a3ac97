"""SumTree: the tree of priorities that prioritized replay samples from.

Used by `PrioritizedReplayBuffer`. The tree is 16-ary, kept as one numpy array per level,
and every operation is vectorized over a batch of items: a search or an update costs a
few numpy calls per level, and there are log16(capacity) levels (5 for 1M items) instead
of the 20 of a binary tree, each numpy call costing microseconds however small its input.
"""

from __future__ import annotations

import numpy as np

BRANCHING = 16
_UPPER = np.triu(np.ones((BRANCHING, BRANCHING)))  # cums = children @ _UPPER
_ONES = np.ones(BRANCHING)


def _padded(n: int) -> int:
    return -(-n // BRANCHING) * BRANCHING


class SumTree:
    """`levels[0]` holds the priorities (the leaves); each entry of `levels[d + 1]` sums
    `BRANCHING` consecutive entries of `levels[d]`; the last level is the total.
    Levels are zero-padded to a multiple of `BRANCHING`."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.levels = [np.zeros(_padded(capacity), np.float64)]
        while len(self.levels[-1]) > BRANCHING:
            self.levels.append(np.zeros(_padded(len(self.levels[-1]) // BRANCHING)))
        self.levels.append(np.zeros(1))

    @property
    def total(self) -> float:
        return float(self.levels[-1][0])

    @property
    def leaves(self) -> np.ndarray:
        """The priorities of all `capacity` items (a view)."""
        return self.levels[0][:self.capacity]

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities of items `indices` (the last one wins for repeated indices)."""
        idx = np.asarray(indices, np.int64)
        self.levels[0][idx] = priorities
        if len(idx) == 0:
            return
        lo, hi = int(idx.min()), int(idx.max())
        contiguous = hi - lo < 4 * len(idx)  # nearby items (a ring's new rows): use slices
        for child, parent in zip(self.levels[:-1], self.levels[1:], strict=True):
            groups = child.reshape(-1, BRANCHING)
            if contiguous:
                lo, hi = lo // BRANCHING, hi // BRANCHING
                parent[lo:hi + 1] = groups[lo:hi + 1].sum(1)
            else:  # a parent listed twice is recomputed twice, to the same sum
                idx = idx // BRANCHING
                parent[idx] = groups[idx].sum(1)

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each `v` in [0, total), the item `i` with `prefix(i) <= v < prefix(i + 1)`,
        where `prefix(i)` sums the priorities of the items before `i`."""
        values = np.array(values, np.float64)
        rows = np.arange(len(values))
        idx = np.zeros(len(values), np.int64)
        for level in reversed(self.levels[:-1]):
            children = level.reshape(-1, BRANCHING)[idx]  # [B, BRANCHING]
            # Running sums along the 16 children as one matmul with an upper-triangular
            # matrix of ones: 15x faster than np.cumsum(axis=1) on [256, 16] here.
            cums = children @ _UPPER
            # The child whose cumulative range holds v: children ending at or before v
            # are passed (clamped: rounding can put v at the very end).
            passed = (cums <= values[:, None]) @ _ONES  # [B] counts, as floats
            j = np.minimum(passed.astype(np.int64), BRANCHING - 1)
            values -= cums[rows, j] - children[rows, j]
            idx = idx * BRANCHING + j
        return np.minimum(idx, self.capacity - 1)
