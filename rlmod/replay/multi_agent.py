"""MultiAgentReplayBuffer: one replay buffer per module, filled from EnvRunner batches.

Used by DQN and SAC (`training_step`): EnvRunners' flat column batches go in, n-step
transitions are computed once there, and per-module train batches come out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlmod.core.multi_rl_module import ModuleID
from rlmod.errors import CheckpointError
from rlmod.replay.buffer_state import CORRUPT
from rlmod.replay.n_step import N_STEP, TRANSITION_COLUMNS, NStepCollector
from rlmod.replay.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from rlmod.utils.checkpoints import Checkpointable
from rlmod.utils.naming import did_you_mean
from rlmod.utils.schedules import scheduled_value

UNIFORM_TYPES = ("EpisodeReplayBuffer", "ReplayBuffer", "MultiAgentEpisodeReplayBuffer")
PRIORITIZED_TYPES = (
    "PrioritizedEpisodeReplayBuffer",
    "PrioritizedReplayBuffer",
    "MultiAgentPrioritizedEpisodeReplayBuffer",
)
CONFIG_KEYS = ("type", "capacity", "alpha", "beta")


def check_replay_buffer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The validated `replay_buffer_config` (RLlib's keys: type, capacity, alpha, beta)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"replay_buffer_config must be a dict, got {type(config).__name__}.")
    for key in config:
        if key not in CONFIG_KEYS:
            raise ValueError(
                f"replay_buffer_config has unknown key {key!r}."
                f"{did_you_mean(str(key), CONFIG_KEYS)} Valid: {list(CONFIG_KEYS)}."
            )
    out = {
        "type": "PrioritizedEpisodeReplayBuffer",
        "capacity": 50_000,
        "alpha": 0.6,
        "beta": 0.4,
        **config,
    }
    kind = out["type"]
    if kind not in UNIFORM_TYPES + PRIORITIZED_TYPES:
        raise ValueError(
            f"replay_buffer_config['type']={kind!r} is unknown; use one of "
            f"{list(UNIFORM_TYPES + PRIORITIZED_TYPES)}."
        )
    cap = out["capacity"]
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(
            f"replay_buffer_config['capacity']={cap!r} must be an int >= 1 "
            "(transitions, i.e. timesteps)."
        )
    beta = out["beta"]
    if isinstance(beta, list | tuple):
        out["beta"] = [[int(t), float(b)] for t, b in beta]
    elif not isinstance(beta, int | float) or not 0.0 <= beta <= 1.0:
        raise ValueError(
            f"replay_buffer_config['beta']={beta!r} must be a number in [0, 1] "
            "or a schedule [[env_step, beta], ...] (annealed towards 1)."
        )
    return out


class MultiAgentReplayBuffer(Checkpointable):
    """A `ReplayBuffer` or `PrioritizedReplayBuffer` per module, each with n-step collectors.

    `Checkpointable`: DQN and SAC save it as their `replay_buffer/` checkpoint component
    when `store_buffer_in_checkpoints=True` (see `get_state` for what is saved).

    Args:
        replay_buffer_config: RLlib's dict: `type`, `capacity` (transitions per module),
            `alpha` and `beta` (prioritized only; `beta` may be a schedule in env steps).
        n_step: `module_id -> (n, gamma)` for the n-step returns of that module.
        seed: Seeds the sampling of every module's buffer.
    """

    def __init__(
        self,
        *,
        replay_buffer_config: Mapping[str, Any],
        n_step: Callable[[ModuleID], tuple[int, float]],
        seed: int | None = None,
    ) -> None:
        self.config = check_replay_buffer_config(replay_buffer_config)
        self.prioritized = self.config["type"] in PRIORITIZED_TYPES
        self._n_step = n_step
        self._seed = seed
        self.buffers: dict[ModuleID, ReplayBuffer] = {}
        self._collectors: dict[tuple[ModuleID, int], NStepCollector] = {}

    def _buffer(self, module_id: ModuleID) -> ReplayBuffer:
        buf = self.buffers.get(module_id)
        if buf is None:
            buf = self.buffers[module_id] = self._new_buffer(len(self.buffers))
        return buf

    def _new_buffer(self, position: int) -> ReplayBuffer:
        """An empty buffer of the configured type, the `position`-th to be made."""
        seed = None if self._seed is None else self._seed + position
        cap = self.config["capacity"]
        return (
            PrioritizedReplayBuffer(cap, alpha=self.config["alpha"], seed=seed)
            if self.prioritized
            else ReplayBuffer(cap, seed=seed)
        )

    def add(self, sample: Mapping[ModuleID, Mapping[str, np.ndarray]], *, source: int = 0) -> int:
        """Adds one EnvRunner's `sample()` result; `source` tells EnvRunners apart (episode
        IDs are unique per EnvRunner). Returns the number of transitions stored."""
        added = 0
        for mid, batch in sample.items():
            collector = self._collectors.get((mid, source))
            if collector is None:
                n, gamma = self._n_step(mid)
                collector = self._collectors[(mid, source)] = NStepCollector(n=n, gamma=gamma)
            transitions = collector(dict(batch))
            added += len(self._buffer(mid).add(transitions))
        return added

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def sample(
        self, batch_size: int, *, num_env_steps_sampled_lifetime: int = 0
    ) -> tuple[dict[ModuleID, dict[str, np.ndarray]], dict[ModuleID, np.ndarray]]:
        """A train batch of `batch_size` transitions per non-empty module, and their indices."""
        beta = scheduled_value(self.config["beta"], num_env_steps_sampled_lifetime)
        batch, indices = {}, {}
        for mid, buf in self.buffers.items():
            if len(buf):
                batch[mid], indices[mid] = buf.sample(batch_size, beta=beta)
        return batch, indices

    def update_priorities(
        self, indices: Mapping[ModuleID, np.ndarray], td_errors: Mapping[ModuleID, np.ndarray]
    ) -> None:
        """Prioritized buffers: new priorities from the TD errors of the sampled items."""
        if not self.prioritized:
            return
        for mid, idx in indices.items():
            if mid in td_errors:
                buf = self.buffers[mid]
                assert isinstance(buf, PrioritizedReplayBuffer)
                buf.update_priorities(idx, td_errors[mid])

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Each module's buffer (contents, priorities, insertion pointer, RNG) and the rows
        each n-step collector still holds back, keyed `module_id -> source`.

        `components` / `not_components` are ignored (no sub-components).
        """
        held: dict[str, dict[str, dict[str, np.ndarray]]] = {}
        for (mid, source), collector in self._collectors.items():
            if collector.num_held:
                held.setdefault(mid, {})[str(source)] = collector.get_state()
        return {
            "buffers": {mid: buf.get_state() for mid, buf in self.buffers.items()},
            "held": held,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores the saved buffers (replacing any the buffer has) and stores the held
        rows as transitions; all or nothing: everything is checked and built aside first,
        and a state that does not fit raises a CheckpointError naming the module and the
        field, with this buffer unchanged.

        Held rows are rows whose n-step window was still open when saved. EnvRunners do
        not save envs in the middle of an episode, so a restored run starts new episodes
        and those windows never close: each such row is stored with the shorter window it
        has (as for an episode cut by an env reset), instead of being lost or joined to a
        new episode that happens to reuse its episode ID.
        """
        if not isinstance(state, Mapping):
            raise CheckpointError(
                f"replay_buffer: the state is a {type(state).__name__}, not "
                "a dict of buffers and held rows."
            )
        buffers = None if "buffers" not in state else self._restored_buffers(state["buffers"])
        held = self._held_transitions(state.get("held", {}))
        target = self.buffers if buffers is None else buffers
        # Each module's held rows must fit its buffer, or (none yet, or empty) each other.
        layout: dict[ModuleID, ReplayBuffer] = {}
        for mid, transitions in held:
            if mid not in layout:
                buf = target.get(mid)
                layout[mid] = buf if buf is not None and buf.columns else ReplayBuffer(1)
            try:
                layout[mid].check_fits(transitions)
            except ValueError as e:
                raise CheckpointError(f"replay_buffer: module {mid!r}: held rows: {e}") from None
            if not layout[mid].columns:
                layout[mid].add(transitions)  # a 1-row scratch buffer: the columns to fit
        # Nothing below can fail on a checked state: only now is this buffer changed.
        if buffers is not None:
            self.buffers = buffers
        self._collectors = {}
        for mid, transitions in held:
            self._buffer(mid).add(transitions)

    def _restored_buffers(self, saved: object) -> dict[ModuleID, ReplayBuffer]:
        """New buffers loaded from `saved` (module ID -> buffer state), each checked."""
        if not isinstance(saved, Mapping):
            raise CheckpointError(
                f"replay_buffer: 'buffers' is a {type(saved).__name__}, not "
                "a dict keyed by module ID."
            )
        buffers: dict[ModuleID, ReplayBuffer] = {}
        for mid, buf_state in saved.items():
            buf = self._new_buffer(len(buffers))
            try:
                buf.set_state(buf_state)
                check_transitions(buf)
            except CheckpointError as e:
                raise CheckpointError(f"replay_buffer: module {mid!r}: {e}") from None
            buffers[mid] = buf
        return buffers

    def _held_transitions(self, held: object) -> list[tuple[ModuleID, dict[str, np.ndarray]]]:
        """The saved held rows (module ID -> source -> columns) as the transitions they
        make with the windows they have, per module."""
        if not isinstance(held, Mapping) or not all(isinstance(v, Mapping) for v in held.values()):
            raise CheckpointError(
                "replay_buffer: 'held' must be a dict module ID -> source -> columns."
            )
        out = []
        for mid, by_source in held.items():
            n, gamma = self._n_step(mid)
            for rows in by_source.values():
                collector = NStepCollector(n=n, gamma=gamma)
                try:
                    collector.set_state(rows)
                    out.append((mid, collector.flush()))
                except (ValueError, IndexError, TypeError) as e:
                    raise CheckpointError(f"replay_buffer: module {mid!r}: {e}") from None
        return out


def check_transitions(buf: ReplayBuffer) -> None:
    """CheckpointError if a loaded buffer's columns are not the n-step transitions DQN and
    SAC train on: the columns `NStepCollector` writes, `n_step` >= 1 (bootstrapping with
    gamma ** 0 counts the next state's value undiscounted) and finite floats (EnvRunners
    refuse NaN and inf env data, so only an edited file holds them)."""
    if not buf.columns:
        return
    expected = {*TRANSITION_COLUMNS, N_STEP}
    if buf.columns.keys() != expected:
        raise CheckpointError(
            f"The saved replay buffer's columns are {sorted(buf.columns)}, "
            f"not {sorted(expected)}; {CORRUPT}."
        )
    rows = slice(0, len(buf))
    if not (buf.columns[N_STEP][rows] >= 1).all():
        raise CheckpointError(
            f"The saved replay buffer's column 'n_step' holds values < 1; {CORRUPT}."
        )
    for name, column in buf.columns.items():
        if column.dtype.kind == "f" and not np.isfinite(column[rows]).all():
            raise CheckpointError(
                f"The saved replay buffer's column {name!r} holds NaN or inf; {CORRUPT}."
            )
