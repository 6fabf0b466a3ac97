"""Whole-episode shuffling for the OfflineReader: the row order that shuffles episodes (not
rows), and where a batch of whole episodes ends.

Used by OfflineReader(whole_episodes=True), which recurrent modules (`use_lstm`) train from:
their Learner needs each episode's rows contiguous and in time order
(rlmod.algorithms.marwil.offline_sequences).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rlmod.core.columns import Columns
from rlmod.core.types import BoolArray, IntArray


def episode_ends(cols: Mapping[str, np.ndarray]) -> BoolArray:
    """`[N]` bool: True at each episode's last row (terminated or truncated)."""
    return np.asarray(cols[Columns.TERMINATEDS] != 0) | np.asarray(cols[Columns.TRUNCATEDS] != 0)


def episode_order(ends: BoolArray, rng: np.random.Generator) -> IntArray:
    """A row order that puts whole episodes (ended by `ends`, `[N]`; the rows after the
    last end count as one more) in a random order, each one's rows contiguous and in time
    order."""
    n = len(ends)
    if n == 0:
        return np.zeros(0, np.int64)
    lasts = np.flatnonzero(ends)
    if not len(lasts) or lasts[-1] != n - 1:
        lasts = np.r_[lasts, n - 1]
    starts = np.r_[0, lasts[:-1] + 1]
    lengths = lasts + 1 - starts
    perm = rng.permutation(len(starts))
    lengths = lengths[perm]
    # row i of the new order: start of its episode + its offset within the episode
    offsets = np.arange(n) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return (np.repeat(starts[perm], lengths) + offsets).astype(np.int64)


def batch_stop(pool: Mapping[str, np.ndarray], pos: int, batch_size: int) -> int:
    """How many rows from `pos` make a batch of whole episodes of at least `batch_size`
    rows: up to and including the end of the episode that holds row `pos + batch_size -
    1` (the pool ends with an episode end, so there is one)."""
    first = pos + max(1, batch_size) - 1
    tail = episode_ends({k: pool[k][first:] for k in (Columns.TERMINATEDS, Columns.TRUNCATEDS)})
    found = np.flatnonzero(tail)
    if not len(found):  # the pool's rows after the last end (not whole episodes)
        return len(pool[Columns.REWARDS]) - pos
    return first - pos + int(found[0]) + 1
