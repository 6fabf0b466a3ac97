"""ReplayBuffer and PrioritizedReplayBuffer: transitions of one module in preallocated columns.

Used by `MultiAgentReplayBuffer` (one buffer per module), which DQN and SAC fill with
n-step transitions and sample train batches from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlmod.replay.buffer_state import BufferState, check_buffer_state, check_priorities
from rlmod.replay.sum_tree import MinTree, SumTree
from rlmod.utils.checkpoints import Checkpointable

HAND_OVER_ROWS = 16_384
"""Rows a PrioritizedReplayBuffer adds before its trees recompute their parents without
waiting for a read (then one reduction per level over these rows' parents)."""

WEIGHTS = "weights"
"""Column of sampled batches: importance-sampling weights (all ones for uniform replay)."""


class ReplayBuffer(Checkpointable):
    """A ring of `capacity` transitions (timesteps), stored column by column, sampled uniformly.

    Columns are numpy arrays allocated on the first `add`, with the shapes and dtypes of
    that first batch; when full, the oldest transitions are overwritten. The buffer is
    `Checkpointable`: `save_to_path(dir)` writes its filled rows to safetensors and its
    insertion pointer and RNG state to JSON, so that a restored buffer samples exactly the
    transitions the saved one would have.

    Example:
        >>> import numpy as np
        >>> buf = ReplayBuffer(capacity=4, seed=0)
        >>> _ = buf.add({"obs": np.arange(6.0)[:, None], "rewards": np.ones(6)})
        >>> len(buf), sorted(buf.sample(2)[0])
        (4, ['obs', 'rewards', 'weights'])
    """

    def __init__(self, capacity: int, *, seed: int | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"replay_buffer_config['capacity']={capacity!r} must be an int >= 1.")
        self.capacity = capacity
        self.size = 0
        self.next_index = 0
        self.columns: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, transitions: Mapping[str, np.ndarray]) -> np.ndarray:
        """Writes `transitions` (equal-length columns) at the ring's head; returns their
        indices. Only the last `capacity` rows of an oversized batch are kept."""
        num = len(next(iter(transitions.values()), ()))
        if num == 0:
            return np.zeros(0, np.int64)
        if not self.columns:
            self.columns = {
                c: np.empty((self.capacity, *np.shape(v)[1:]), np.asarray(v).dtype)
                for c, v in transitions.items()
            }
        elif transitions.keys() != self.columns.keys():
            raise ValueError(
                f"Transitions have columns {sorted(transitions)}; this buffer "
                f"stores {sorted(self.columns)}."
            )
        skip = max(0, num - self.capacity)
        num -= skip
        start = self.next_index
        first = min(num, self.capacity - start)  # rows before the ring wraps
        for c, v in transitions.items():
            dst = self.columns[c]
            dst[start : start + first] = v[skip : skip + first]
            if first < num:
                dst[: num - first] = v[skip + first :]
        self.next_index = (start + num) % self.capacity
        self.size = min(self.capacity, self.size + num)
        self._rows_written(start, start + first)
        if first < num:
            self._rows_written(0, num - first)
        if first == num:  # no wrap: one arange (the modulo would double add()'s overhead)
            return np.arange(start, start + num)
        return np.concatenate([np.arange(start, self.capacity), np.arange(num - first)])

    def check_fits(self, transitions: Mapping[str, np.ndarray]) -> None:
        """ValueError unless `add(transitions)` can store them whole: the stored columns,
        each a numeric array with the stored rows' shape (checked before an `add` that must
        not fail halfway, e.g. when a restore adds held rows)."""
        if not self.columns or not transitions:
            return
        if transitions.keys() != self.columns.keys():
            raise ValueError(
                f"Transitions have columns {sorted(transitions)}; this buffer "
                f"stores {sorted(self.columns)}."
            )
        for c, v in transitions.items():
            v, dst = np.asarray(v), self.columns[c]
            if v.shape[1:] != dst.shape[1:] or v.dtype.kind not in "biuf":
                raise ValueError(
                    f"Column {c!r} holds {v.dtype} rows of shape {v.shape[1:]}; "
                    f"this buffer stores {dst.dtype} rows of {dst.shape[1:]}."
                )

    def _rows_written(self, start: int, stop: int) -> None:
        """Hook: `add` wrote rows `start .. stop - 1` (once per contiguous slice)."""

    def sample(self, batch_size: int, **kwargs: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`batch_size` transitions drawn uniformly with replacement, and their indices."""
        self._check_can_sample(batch_size)
        indices = self.rng.integers(0, self.size, batch_size)
        batch = self._gather(indices)
        batch[WEIGHTS] = np.ones(batch_size, np.float32)
        return batch, indices

    def _check_can_sample(self, batch_size: int) -> None:
        if self.size == 0:
            raise ValueError(
                "Cannot sample from an empty replay buffer; add transitions first "
                "(num_steps_sampled_before_learning_starts guards this in DQN/SAC)."
            )
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1.")

    def _gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        # np.take: about half the time of fancy indexing on 2-D columns.
        return {c: np.take(v, indices, axis=0) for c, v in self.columns.items()}

    # ------------------------------------------------------------------ state
    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """A snapshot: the filled rows of each column (copies, in storage order), the
        insertion pointer and the sampling RNG's state (numpy arrays and JSON; no pickle).
        A buffer has no sub-components, so `components` / `not_components` are ignored."""
        return {
            "type": type(self).__name__,
            "capacity": self.capacity,
            "size": self.size,
            "next_index": self.next_index,
            "rng": self.rng.bit_generator.state,
            "columns": {c: v[: self.size].copy() for c, v in self.columns.items()},
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores what `get_state` returned, checked first (`check_state`): the buffer must
        have the saved type and capacity, and a state that does not fit changes nothing
        (CheckpointError naming the field, or the setting to change)."""
        self.load_checked(self.check_state(state))

    def check_state(self, state: Mapping[str, Any]) -> BufferState:
        """`state` checked against this buffer (see `check_buffer_state`), nothing changed."""
        return check_buffer_state(
            state, kind=type(self).__name__, capacity=self.capacity, rng=self.rng
        )

    def load_checked(self, checked: BufferState) -> None:
        """Loads a state that `check_state` returned."""
        self.size = checked.size
        self.next_index = checked.next_index
        self.columns = {}
        for c, v in checked.columns.items():
            self.columns[c] = np.empty((self.capacity, *v.shape[1:]), v.dtype)
            self.columns[c][: checked.size] = v
        if checked.rng is not None:
            self.rng.bit_generator.state = checked.rng


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016, sec. 3.3 and Algorithm 1).

    Item i is drawn with probability `P(i) = p_i^alpha / sum_k p_k^alpha`, where `p_i` is
    its last absolute TD error plus `epsilon` (new items get the largest priority so far, so
    each is replayed at least once soon). Sampling is stratified: one draw from each of
    `batch_size` equal slices of the total. The importance-sampling weights
    `w_i = (N * P(i))^-beta / max_j w_j` (max over all stored items) correct the bias;
    `beta` is annealed towards 1 by the caller (`sample(beta=...)`).
    """

    def __init__(
        self, capacity: int, *, alpha: float = 0.6, epsilon: float = 1e-6, seed: int | None = None
    ) -> None:
        super().__init__(capacity, seed=seed)
        if alpha < 0:
            raise ValueError(f"replay_buffer_config['alpha']={alpha} must be >= 0.")
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self._set_trees(SumTree(capacity), MinTree(capacity))
        self.max_priority = 1.0

    def _set_trees(self, sums: SumTree, mins: MinTree) -> None:
        # The MinTree gives the largest importance weight without a scan.
        self._sum_tree, self._min_tree = sums, mins
        self._sum_leaves, self._min_leaves = sums.leaves, mins.leaves  # views, written by add
        self._written: list[list[int]] = []  # [start, stop) row ranges the trees are not told of

    @property
    def tree(self) -> SumTree:
        """The sum tree of `p_i ** alpha`, told of every row added so far."""
        if self._written:
            self._hand_over()
        return self._sum_tree

    @property
    def min_tree(self) -> MinTree:
        """The min tree of `p_i ** alpha`, told of every row added so far."""
        if self._written:
            self._hand_over()
        return self._min_tree

    def _hand_over(self) -> None:
        for start, stop in self._written:
            # the min tree's leaves equal the sum tree's: copied once per waiting range
            self._min_leaves[start:stop] = self._sum_leaves[start:stop]
            self._sum_tree.mark_written(start, stop)
            self._min_tree.mark_written(start, stop)
        self._written = []

    def _rows_written(self, start: int, stop: int) -> None:
        """New rows get the largest priority so far: one slice of the sum tree's leaves
        (the min tree's get the same values in one copy per waiting range when the trees
        are told), and the range joins the previous one when the ring writes on where it
        left off (an add costs one slice write, not two tree calls); the trees are told at
        the next read, or once the waiting rows reach `HAND_OVER_ROWS`, when they also
        refresh."""
        self._sum_leaves[start:stop] = self.max_priority**self.alpha
        written = self._written
        if written and written[-1][1] == start:
            written[-1][1] = stop
        else:
            written.append([start, stop])
        if stop - written[-1][0] >= HAND_OVER_ROWS or len(written) > 2:
            self._hand_over()
            self._sum_tree.refresh()
            self._min_tree.refresh()

    def _set_priorities(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """Sets the leaves `p_i ** alpha` of items `indices` in both trees."""
        self.tree.update(indices, values)
        self.min_tree.update(indices, values)

    def probabilities(self, indices: np.ndarray) -> np.ndarray:
        """`P(i)` of the items `indices`."""
        return self.tree.leaves[indices] / self.tree.total

    def sample(
        self, batch_size: int, *, beta: float = 0.4, **kwargs: Any
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`batch_size` transitions by priority, with importance weights in `weights`."""
        self._check_can_sample(batch_size)
        total = self.tree.total
        values = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        indices = self.tree.find(values)  # (it keeps values below its own total)
        batch = self._gather(indices)
        batch[WEIGHTS] = self.importance_weights(indices, beta=beta)
        return batch, indices

    def importance_weights(self, indices: np.ndarray, *, beta: float) -> np.ndarray:
        """`(N * P(i))^-beta`, divided by the largest such weight over all stored items:
        `(N * P(i))^-beta / (N * min_j P(j))^-beta = (p_i / min_j p_j)^-beta` (p: the leaves)."""
        return ((self.tree.leaves[indices] / self.min_tree.min()) ** -beta).astype(np.float32)

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Sets `p_i = |td_error_i| + epsilon` for the sampled items `indices`."""
        priorities = np.abs(np.asarray(td_errors, np.float64)) + self.epsilon
        if not np.all(np.isfinite(priorities)):
            raise ValueError(
                "update_priorities got non-finite TD errors; the Q loss diverged "
                "(lower lr, set grad_clip, or check the rewards' scale)."
            )
        self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))
        self._set_priorities(indices, priorities**self.alpha)

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """`ReplayBuffer.get_state` plus the tree's leaves (`p_i ** alpha`), `alpha` and the
        largest priority so far."""
        return {
            **super().get_state(),
            "priorities": self.tree.leaves[: self.size].copy(),
            "alpha": self.alpha,
            "max_priority": self.max_priority,
        }

    def check_state(self, state: Mapping[str, Any]) -> BufferState:
        """`ReplayBuffer.check_state` plus the priorities (`check_priorities`)."""
        checked = super().check_state(state)
        checked.priorities, checked.max_priority = check_priorities(
            state, checked.size, alpha=self.alpha
        )
        return checked

    def load_checked(self, checked: BufferState) -> None:
        """Restores contents, pointer, RNG and priorities; the sum tree is rebuilt from the
        leaves, which gives the very same sums (every level is recomputed from the one
        below, never updated by differences)."""
        assert checked.priorities is not None and checked.max_priority is not None
        super().load_checked(checked)
        self._set_trees(SumTree(self.capacity), MinTree(self.capacity))
        self._set_priorities(np.arange(self.size), checked.priorities)
        self.max_priority = checked.max_priority
