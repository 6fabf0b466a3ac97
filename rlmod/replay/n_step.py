"""n-step returns over flat EnvRunner batches, computed once when transitions enter a buffer.

Used by `MultiAgentReplayBuffer.add` (through `NStepCollector`); the buffers then store
transitions whose `rewards` already are n-step returns and whose `n_step` column says how
many discounts the bootstrap needs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rlmod.core.columns import Columns

N_STEP = "n_step"
"""Column: how many env steps (1..n) a transition's reward sums; bootstrap with gamma**n_step."""

TRANSITION_COLUMNS = (
    Columns.OBS,
    Columns.ACTIONS,
    Columns.REWARDS,
    Columns.NEXT_OBS,
    Columns.TERMINATEDS,
)
"""The columns of a stored transition, besides `n_step`."""


def compute_n_step(
    rewards: np.ndarray, ends: np.ndarray, *, n: int, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """n-step returns over flat sequences (Sutton & Barto 2018, eq. 7.1, before bootstrapping).

    Args:
        rewards: `[B]` rewards; rows of one sequence contiguous and in time order.
        ends: `[B]` bool, True at the last row of each sequence (a terminal step, a
            truncation, or the end of what is known of the episode).
        n: Largest number of steps to sum.
        gamma: Discount factor.

    Returns:
        `(returns, horizons)`, each `[B]`: `returns[t] = sum_{k<h} gamma^k r_{t+k}` with
        `h = horizons[t] = min(n, rows to the end of t's sequence)`; the transition's
        next observation and flags are those of row `t + h - 1`.
    """
    size = len(rewards)
    rows = np.arange(size)
    returns = np.zeros(size, np.float64)
    horizons = np.zeros(size, np.int64)
    open_ = np.ones(size, bool)  # the window of row t still grows
    for k in range(n):
        at = rows + k
        add = open_ & (at < size)
        at = np.minimum(at, size - 1)
        returns += np.where(add, gamma**k * rewards[at], 0.0)
        horizons += add
        open_ = add & ~ends[at]  # a window never crosses a sequence end
    return returns.astype(np.float32), horizons


class NStepCollector:
    """Turns the batches of one EnvRunner (one module) into n-step transitions.

    A row whose window runs into the end of the batch (its episode goes on, but the
    batch stops) is held back and completed with the next batch of the same episode:
    every stored transition sums exactly `n` rewards unless its episode terminated or was
    truncated within the window. No bootstrap past a termination (`terminateds` of the
    window's last row); on a truncation, the bootstrap is from the truncation's final
    observation. Held rows whose episode does not appear in the next batch (an env reset
    mid-episode) are stored with the shorter window they have.
    """

    def __init__(self, *, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n_step={n} must be >= 1.")
        self.n = n
        self.gamma = gamma
        self._held: dict[str, np.ndarray] = {}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The transitions complete with `batch`: `TRANSITION_COLUMNS` plus `n_step`."""
        if self.n == 1 and not self._held:  # each row is a transition: no window, no copies
            out = {c: np.asarray(batch[c]) for c in TRANSITION_COLUMNS}
            out[Columns.REWARDS] = out[Columns.REWARDS].astype(np.float32, copy=False)
            out[Columns.TERMINATEDS] = out[Columns.TERMINATEDS].astype(bool, copy=False)
            out[N_STEP] = np.ones(len(out[Columns.REWARDS]), np.int32)
            return out
        cols = {
            c: np.asarray(batch[c])
            for c in (*TRANSITION_COLUMNS, Columns.TRUNCATEDS, Columns.EPS_ID)
        }
        for flag in (Columns.TERMINATEDS, Columns.TRUNCATEDS):
            cols[flag] = cols[flag].astype(bool, copy=False)
        num_held = len(next(iter(self._held.values()))) if self._held else 0
        if num_held:
            # Held rows first, then a stable sort by episode: each episode's rows contiguous,
            # in time order (an episode's rows in one batch are contiguous already).
            new_eps = cols[Columns.EPS_ID]
            cols = {c: np.concatenate([self._held[c], v]) for c, v in cols.items()}
            order = np.argsort(cols[Columns.EPS_ID], kind="stable")
            cols = {c: v[order] for c, v in cols.items()}
            stale = np.zeros(len(order), bool)
            was_held = order < num_held
            stale[was_held] = ~np.isin(cols[Columns.EPS_ID][was_held], new_eps)
        else:
            stale = np.zeros(len(cols[Columns.EPS_ID]), bool)
        eps = cols[Columns.EPS_ID]
        done = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
        ends = done.copy()
        ends[:-1] |= eps[1:] != eps[:-1]
        ends[-1:] = True
        returns, horizons = compute_n_step(cols[Columns.REWARDS], ends, n=self.n, gamma=self.gamma)
        last = np.arange(len(eps)) + horizons - 1
        complete = (horizons == self.n) | done[last] | stale[last]
        if complete.all():  # nothing to hold: no gathers for the rows themselves
            self._held = {}
            keep: slice | np.ndarray = slice(None)
        else:
            self._held = {c: v[~complete] for c, v in cols.items()}
            keep = np.flatnonzero(complete)
            last = last[keep]
        return {
            Columns.OBS: cols[Columns.OBS][keep],
            Columns.ACTIONS: cols[Columns.ACTIONS][keep],
            Columns.REWARDS: returns[keep],
            Columns.NEXT_OBS: cols[Columns.NEXT_OBS][last],
            Columns.TERMINATEDS: cols[Columns.TERMINATEDS][last],
            N_STEP: horizons[keep].astype(np.int32),
        }

    def flush(self) -> dict[str, np.ndarray]:
        """The held rows as transitions with the windows they have (their episodes will
        not go on, e.g. after a restore), as `__call__` stores rows of an episode that an
        env reset cut; nothing is held afterwards."""
        if not self._held:
            return {}
        return self({c: v[:0] for c, v in self._held.items()})

    def get_state(self) -> dict[str, np.ndarray]:
        """The held rows (columns of the EnvRunner batch, episode IDs included)."""
        return {c: v.copy() for c, v in self._held.items()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Holds the rows `get_state` returned; ValueError, and nothing changed, if columns
        are missing, or are not numeric arrays of one length (`__call__` would fail on
        them later, far from the checkpoint)."""
        if not isinstance(state, Mapping):
            raise ValueError(
                f"held n-step rows are a {type(state).__name__}, not a dict of columns."
            )
        missing = [
            c for c in (*TRANSITION_COLUMNS, Columns.TRUNCATEDS, Columns.EPS_ID) if c not in state
        ]
        if state and missing:
            raise ValueError(f"held n-step rows lack the columns {missing}.")
        for c, v in state.items():
            if not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf" or v.ndim < 1:
                raise ValueError(f"held n-step column {c!r} is not a numeric array.")
        lengths = {c: len(v) for c, v in state.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"held n-step columns differ in length: {lengths}.")
        self._held = dict(state)

    @property
    def num_held(self) -> int:
        """Rows waiting for the rest of their window."""
        return len(self._held[Columns.EPS_ID]) if self._held else 0
