"""SumTree and MinTree: the trees of priorities that prioritized replay samples and weighs by.

Used by `PrioritizedReplayBuffer`: the SumTree finds the item at a prefix sum (sampling in
proportion to priority), the MinTree gives the smallest priority (the largest importance
weight, which normalizes the others). Both are 16-ary trees kept as one numpy array per
level, and every operation is vectorized over a batch of items, because here each numpy
call costs microseconds however small its input:

- an update writes the leaves at once and only notes which parents are stale; they are
  recomputed, level by level, when the tree is next read, so that the adds and priority
  updates between two samples cost one recomputation (by slices where the changed items
  are close together, as a ring's new rows are);
- the tree stops at the first level of at most `SCAN_MAX` nodes; a search starts there with
  one running sum and a binary search, then descends the few levels below it, all values
  of the batch at once (1 level at 100k items, 2 at 1M).
"""

from __future__ import annotations

import numpy as np

BRANCHING = 16
SCAN_MAX = 8192
"""A search scans this many top-level nodes with one `np.cumsum` + `np.searchsorted`, about
the cost of descending one level of the tree (at 100k items: a top of 6,250 nodes and one
descent; with 1,024, 391 nodes and two descents: the same sample time, and 17% less for a
sample plus its priority update, whose scattered refresh has one level fewer)."""
MAX_STALE = 64
"""Updates noted before the tree refreshes without waiting for a read."""
_UPPER = np.triu(np.ones((BRANCHING, BRANCHING)))  # running sums of 16 children: x @ _UPPER
_ONES = np.ones(BRANCHING)


def _padded(n: int) -> int:
    return -(-n // BRANCHING) * BRANCHING


class _Tree:
    """`levels[0]` holds the values of the `capacity` items (the leaves); entry `k` of
    `levels[d + 1]` reduces entries `16k .. 16k + 15` of `levels[d]` with `op`; the last
    level has at most `SCAN_MAX` entries. Levels are padded with `identity`."""

    def __init__(self, capacity: int, *, op: np.ufunc, identity: float) -> None:
        self.capacity = capacity
        self._op = op
        self._levels = [np.full(_padded(capacity), identity)]
        while len(self._levels[-1]) > SCAN_MAX:
            self._levels.append(np.full(_padded(len(self._levels[-1]) // BRANCHING), identity))
        self._stale_ranges: list[tuple[int, int]] = []  # leaf ranges whose parents are stale
        self._stale_items: list[np.ndarray] = []  # scattered leaves whose parents are stale

    @property
    def levels(self) -> list[np.ndarray]:
        """All levels, leaves first, with every parent up to date."""
        self.refresh()
        return self._levels

    @property
    def leaves(self) -> np.ndarray:
        """The values of all `capacity` items (a view; always current)."""
        return self._levels[0][: self.capacity]

    def update(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """Sets the values of items `indices` (the last one wins for repeated indices)."""
        idx = np.asarray(indices, np.int64)
        self._levels[0][idx] = values
        if len(idx) == 0 or len(self._levels) == 1:
            return
        lo, hi = int(idx.min()), int(idx.max())
        if hi - lo < 4 * len(idx):  # nearby items (a ring's new rows): refresh by slices
            self._stale_ranges.append((lo, hi))
        else:
            self._stale_items.append(idx)
        self._bound_staleness()

    def update_range(self, start: int, stop: int, value: float) -> None:
        """Sets items `start .. stop - 1` to `value` (a ring's new rows: one slice)."""
        self._levels[0][start:stop] = value
        self.mark_written(start, stop)

    def mark_written(self, start: int, stop: int) -> None:
        """Notes that items `start .. stop - 1` were written straight into `leaves` (their
        parents are recomputed at the next read)."""
        if stop > start and len(self._levels) > 1:
            self._stale_ranges.append((start, stop - 1))
            self._bound_staleness()

    def _bound_staleness(self) -> None:
        # Many updates without a read (a buffer filling before learning starts): refresh
        # now and then, so the notes stay short and no single read pays for thousands.
        if len(self._stale_ranges) + len(self._stale_items) >= MAX_STALE:
            self.refresh()

    def refresh(self) -> None:
        """Recomputes the parents of the leaves updated since the last refresh."""
        pairs = list(zip(self._levels[:-1], self._levels[1:], strict=True))
        merged: list[list[int]] = []  # overlapping or adjacent ranges as one (a ring's adds)
        for lo, hi in sorted(self._stale_ranges):
            if merged and lo <= merged[-1][1] + BRANCHING:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        for lo, hi in merged:
            for child, parent in pairs:
                lo, hi = lo // BRANCHING, hi // BRANCHING
                parent[lo : hi + 1] = self._reduce(child.reshape(-1, BRANCHING)[lo : hi + 1])
        if self._stale_items:  # a parent listed twice is recomputed twice, to the same value
            idx = np.concatenate(self._stale_items)
            for child, parent in pairs:
                idx = idx // BRANCHING
                parent[idx] = self._reduce(child.reshape(-1, BRANCHING)[idx])
        self._stale_ranges.clear()
        self._stale_items.clear()

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        """`op` over each row of `children` (`[P, BRANCHING]`): the parents' values."""
        return self._op.reduce(children, axis=1)


class SumTree(_Tree):
    """Sums of priorities, and the search for the item at a prefix sum."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, op=np.add, identity=0.0)

    @property
    def total(self) -> float:
        """The sum of all items' values."""
        return float(self.levels[-1].sum())

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each `v` in [0, total), the item `i` with `prefix(i) <= v < prefix(i + 1)`,
        where `prefix(i)` sums the values of the items before `i`: always an item with a
        positive value (a `v` that rounding puts at or past the end goes to the last one)."""
        levels = self.levels
        top = levels[-1]
        cums = np.cumsum(top)
        if not cums[-1] > 0:
            raise ValueError("SumTree.find needs at least one item with a positive value.")
        # Each v is kept below the running total it is compared with (the sums of a node's
        # children can round differently from the node's own sum), so the chosen node or
        # child always has a positive value, and the residual falls inside it.
        values = np.minimum(np.asarray(values, np.float64), np.nextafter(cums[-1], 0.0))
        idx = np.searchsorted(cums, values, side="right")
        values -= cums[idx] - top[idx]
        first_child = np.arange(len(values)) * BRANCHING  # of each row of `children`, flat
        for level in reversed(levels[:-1]):
            children = level.reshape(-1, BRANCHING)[idx]  # [B, BRANCHING]
            # Running sums along the 16 children as one matmul with an upper-triangular
            # matrix of ones: 15x faster than np.cumsum(axis=1) on [256, 16] here.
            cums = children @ _UPPER
            np.minimum(values, np.nextafter(cums[:, -1], 0.0), out=values)
            # The child whose range holds v: count the children ending at or before v.
            j = ((cums <= values[:, None]) @ _ONES).astype(np.int64)  # [B], each < 16
            values -= np.take(cums - children, first_child + j)  # the sums before child j
            idx = idx * BRANCHING + j
        return idx


class MinTree(_Tree):
    """Minima of priorities; items never set count as +inf."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, op=np.minimum, identity=np.inf)

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        # Minima are exact in any order: reduce along the rows of the transposed copy,
        # where numpy vectorizes (16 us against 57 us over 1,024 parents here; np.minimum
        # along short rows is not vectorized). Sums keep np.add's own order.
        return np.minimum.reduce(np.ascontiguousarray(children.T), axis=0)

    def min(self) -> float:
        """The smallest value of all items set so far (+inf before any)."""
        return float(self.levels[-1].min())
