"""Discounted returns of recorded episodes, and what bootstraps a truncated one (MARWIL).

Used by the OfflineReader and the Ray Data readers (`episode_chunks`) on chunks of whole
episodes; MARWIL's learner connector `BootstrapTruncatedReturns` consumes the per-row
`bootstrap_discount` and `bootstrap_obs` columns made from them.

A chunk carries the observations after its truncated episodes' last steps once each, in a
small table (`bootstrap_finals`), and every row an index into it (`bootstrap_index`), not
an observation copy per row: the OfflineReader's shuffle pool then moves 4 bytes per row
for the bootstrap instead of a whole observation, and gathers `bootstrap_obs` for the rows
of each batch only (`bootstrap_obs_per_row`).
"""

from __future__ import annotations

import math

import numpy as np

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError

Columns_ = dict[str, np.ndarray]

BOOTSTRAP_OBS = "bootstrap_obs"
"""Per row of a batch: the observation after the last step of the row's episode (s_T), as
the module sees it (through the same transform as `obs`); for rows that do not bootstrap
(`bootstrap_discount` 0) an observation of zeros (as transformed), never used."""
BOOTSTRAP_DISCOUNT = "bootstrap_discount"
"""Per row t of an episode truncated (not terminated) after its step T - 1: gamma^(T - t);
0 for the rows of terminated episodes. MARWIL's Learner adds
`bootstrap_discount * V(bootstrap_obs)` to `value_targets`, with V at the time of the update:
RLlib 2.60's value targets for episodes (GAE with lambda=1 over episodes extended by one
step: `AddOneTsToEpisodesAndTruncate` + `GeneralAdvantageEstimation`)."""
BOOTSTRAP_FINALS = "bootstrap_finals"
"""Not a per-row column: in a chunk, the table of observations `bootstrap_index` points
into; row 0 is zeros (rows that do not bootstrap point there), row k + 1 the observation
after the k-th truncated episode of the chunk."""
BOOTSTRAP_INDEX = "bootstrap_index"
"""Per row of a chunk (int32): the row of `bootstrap_finals` that holds its s_T."""


def discounted_returns(rewards: np.ndarray, episode_ends: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1} within each episode, vectorized; `[N] -> [N]` float32.

    Rows of an episode are contiguous and `episode_ends` marks each episode's last row
    (rows after the last mark count as one more episode). Within a segment,
    G_t = sum_k gamma^(k-t) r_k is a reverse cumulative sum of r_k * gamma^(k-s) divided
    by gamma^(t-s) (s: the segment start; the powers come from one table of at most
    `max_len` entries); segments are the episodes, cut every `max_len` rows where
    gamma^max_len would fall below 1e-3 (bounding the rounding that the division
    amplifies), and the returns at such cuts are carried backwards in a short loop.
    About 13 ns per row, a third of it the cumulative sum (one dependent add per row).
    """
    return _returns(rewards, episode_ends, gamma)[0]


def _returns(
    rewards: np.ndarray, episode_ends: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """`discounted_returns`, plus what `add_return_columns` reuses: gamma^k per row (k:
    the step within its episode; None where episodes were cut into segments or gamma is
    0), and each episode's last row and length."""
    n = len(rewards)
    r = rewards.astype(np.float64)
    ends = episode_ends.astype(bool, copy=False)
    lasts = np.flatnonzero(ends)
    if n and (not len(lasts) or lasts[-1] != n - 1):  # rows after the last end: one more
        lasts = np.r_[lasts, n - 1]
    lens = np.diff(lasts, prepend=-1)
    if n == 0 or gamma == 0.0:
        return r.astype(np.float32), None, lasts, lens
    rows = np.arange(n)
    k = rows - np.repeat(lasts + 1 - lens, lens)  # step within the episode
    log_gamma = math.log(gamma)
    max_len = n if gamma >= 1.0 else max(1, int(math.log(1e-3) / log_gamma))
    cut = bool(lens.max() > max_len)
    if cut:
        k %= max_len  # step within the segment
    w = np.exp(np.arange(int(k.max()) + 1) * log_gamma)[k]  # gamma^(t-s)
    # sums[j] = sum of (r * w) over the last j rows (sums[0] = 0): the suffix sum from row
    # t on is sums[n - t], so the one after row `last` is sums[n - last - 1]
    sums = np.zeros(n + 1)
    np.cumsum((r * w)[::-1], out=sums[1:])
    suffix = sums[n:0:-1]
    if cut:
        seg_last = np.minimum(np.repeat(lasts, lens), rows - k + max_len - 1)
        after = sums[n - seg_last - 1]
    else:  # one segment per episode: the suffix sum after it, gathered per episode
        after = np.repeat(sums[n - lasts - 1], lens)
    g = suffix - after
    g /= w
    if cut:  # segments cut inside an episode carry the next one's first return backwards
        inner = np.flatnonzero((k == max_len - 1) & (rows != np.repeat(lasts, lens)))
        for last in inner[::-1].tolist():
            first = last - max_len + 1
            g[first : last + 1] += g[last + 1] * np.exp(
                (last + 1 - np.arange(first, last + 1)) * log_gamma
            )
    return g.astype(np.float32), None if cut else w, lasts, lens


def add_return_columns(
    cols: Columns_, gamma: float, *, keep_next_obs: bool = True, finals: np.ndarray | None = None
) -> np.ndarray:
    """Adds `value_targets` (each row's discounted return to its episode's end),
    `bootstrap_discount`, `bootstrap_index` and the chunk's `bootstrap_finals` table (see
    their constants) to a chunk of whole episodes; `new_obs` is dropped unless
    `keep_next_obs`. The last row ends an episode (a chunk cut without an end flag counts
    as a terminated episode's end).

    The observation after each truncated episode comes from `finals` (one per truncated
    episode, in order: what an earlier call returned, see FinalsCache) or else from the
    chunk's `new_obs`; data without `new_obs` are refused only where an episode was
    truncated (nothing to bootstrap from). Returns the truncated episodes' finals used.
    """
    rewards = cols[Columns.REWARDS]
    terminated, truncated = cols[Columns.TERMINATEDS], cols[Columns.TRUNCATEDS]
    cols[Columns.VALUE_TARGETS], w, lasts, lens = _returns(rewards, terminated | truncated, gamma)
    n = len(rewards)
    next_obs = cols.get(Columns.NEXT_OBS) if keep_next_obs else cols.pop(Columns.NEXT_OBS, None)
    bootstrapped = truncated[lasts] & ~terminated[lasts]  # [episodes]
    obs = cols[Columns.OBS]
    num_truncated = int(bootstrapped.sum())
    if finals is None:
        if next_obs is None and num_truncated:
            raise OfflineDataError(
                f"MARWIL bootstraps truncated episodes' returns from the observation after "
                f"their last step, the {Columns.NEXT_OBS!r} column, which these data lack; "
                "record them with rlmod's writers (they store it), or train BC (beta=0), "
                "which needs no returns."
            )
        finals = (
            next_obs[lasts[bootstrapped]]
            if next_obs is not None  # a copy
            else np.empty((0, *obs.shape[1:]), obs.dtype)
        )  # (a view would pin obs)
    else:
        finals = finals[:num_truncated]
    table = np.zeros((1 + num_truncated, *obs.shape[1:]), obs.dtype)  # row 0: no bootstrap
    table[1:] = finals
    discount = np.zeros(n, np.float32)
    index = np.zeros(n, np.int32)
    if num_truncated:
        index = np.repeat(np.where(bootstrapped, np.cumsum(bootstrapped), 0).astype(np.int32), lens)
        if w is not None:  # gamma^(T - t) = gamma^T / gamma^t (both >= 1e-3 * gamma here)
            discount = (
                np.repeat(np.where(bootstrapped, np.exp(lens * math.log(gamma)), 0.0), lens) / w
            ).astype(np.float32)
        elif gamma > 0.0:
            steps_left = np.repeat(lasts + 1, lens) - np.arange(n)  # T - t: 1 at the last row
            discount = (
                np.exp(steps_left * math.log(gamma)) * np.repeat(bootstrapped, lens)
            ).astype(np.float32)
    cols[BOOTSTRAP_DISCOUNT] = discount
    cols[BOOTSTRAP_INDEX] = index
    cols[BOOTSTRAP_FINALS] = table
    return finals


def bootstrap_obs_per_row(cols: Columns_) -> Columns_:
    """Replaces a chunk's `bootstrap_index` and `bootstrap_finals` by the per-row
    `bootstrap_obs` MARWIL's learner connector reads (in place; returns `cols`). Where
    rows are shuffled by others (Ray Data's buffer) or handed to a Learner."""
    index = cols.pop(BOOTSTRAP_INDEX, None)
    table = cols.pop(BOOTSTRAP_FINALS, None)
    if index is not None and table is not None:
        cols[BOOTSTRAP_OBS] = np.take(table, index, axis=0)
    return cols
