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
from rlmod.replay.n_step import NStepCollector
from rlmod.replay.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from rlmod.utils.checkpoints import Checkpointable
from rlmod.utils.naming import did_you_mean
from rlmod.utils.schedules import scheduled_value

UNIFORM_TYPES = ("EpisodeReplayBuffer", "ReplayBuffer", "MultiAgentEpisodeReplayBuffer")
PRIORITIZED_TYPES = ("PrioritizedEpisodeReplayBuffer", "PrioritizedReplayBuffer",
                     "MultiAgentPrioritizedEpisodeReplayBuffer")
CONFIG_KEYS = ("type", "capacity", "alpha", "beta")


def check_replay_buffer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The validated `replay_buffer_config` (RLlib's keys: type, capacity, alpha, beta)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"replay_buffer_config must be a dict, got {type(config).__name__}.")
    for key in config:
        if key not in CONFIG_KEYS:
            raise ValueError(f"replay_buffer_config has unknown key {key!r}."
                             f"{did_you_mean(str(key), CONFIG_KEYS)} Valid: {list(CONFIG_KEYS)}.")
    out = {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50_000, "alpha": 0.6,
           "beta": 0.4, **config}
    kind = out["type"]
    if kind not in UNIFORM_TYPES + PRIORITIZED_TYPES:
        raise ValueError(f"replay_buffer_config['type']={kind!r} is unknown; use one of "
                         f"{list(UNIFORM_TYPES + PRIORITIZED_TYPES)}.")
    cap = out["capacity"]
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"replay_buffer_config['capacity']={cap!r} must be an int >= 1 "
                         "(transitions, i.e. timesteps).")
    beta = out["beta"]
    if isinstance(beta, list | tuple):
        out["beta"] = [[int(t), float(b)] for t, b in beta]
    elif not isinstance(beta, int | float) or not 0.0 <= beta <= 1.0:
        raise ValueError(f"replay_buffer_config['beta']={beta!r} must be a number in [0, 1] "
                         "or a schedule [[env_step, beta], ...] (annealed towards 1).")
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

    def __init__(self, *, replay_buffer_config: Mapping[str, Any],
                 n_step: Callable[[ModuleID], tuple[int, float]],
                 seed: int | None = None) -> None:
        self.config = check_replay_buffer_config(replay_buffer_config)
        self.prioritized = self.config["type"] in PRIORITIZED_TYPES
        self._n_step = n_step
        self._seed = seed
        self.buffers: dict[ModuleID, ReplayBuffer] = {}
        self._collectors: dict[tuple[ModuleID, int], NStepCollector] = {}

    def _buffer(self, module_id: ModuleID) -> ReplayBuffer:
        buf = self.buffers.get(module_id)
        if buf is None:
            seed = None if self._seed is None else self._seed + len(self.buffers)
            cap = self.config["capacity"]
            buf = (PrioritizedReplayBuffer(cap, alpha=self.config["alpha"], seed=seed)
                   if self.prioritized else ReplayBuffer(cap, seed=seed))
            self.buffers[module_id] = buf
        return buf

    def add(self, sample: Mapping[ModuleID, Mapping[str, np.ndarray]], *, source: int = 0
            ) -> int:
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

    def sample(self, batch_size: int, *, num_env_steps_sampled_lifetime: int = 0
               ) -> tuple[dict[ModuleID, dict[str, np.ndarray]], dict[ModuleID, np.ndarray]]:
        """A train batch of `batch_size` transitions per non-empty module, and their indices."""
        beta = scheduled_value(self.config["beta"], num_env_steps_sampled_lifetime)
        batch, indices = {}, {}
        for mid, buf in self.buffers.items():
            if len(buf):
                batch[mid], indices[mid] = buf.sample(batch_size, beta=beta)
        return batch, indices

    def update_priorities(self, indices: Mapping[ModuleID, np.ndarray],
                          td_errors: Mapping[ModuleID, np.ndarray]) -> None:
        """Prioritized buffers: new priorities from the TD errors of the sampled items."""
        if not self.prioritized:
            return
        for mid, idx in indices.items():
            if mid in td_errors:
                buf = self.buffers[mid]
                assert isinstance(buf, PrioritizedReplayBuffer)
                buf.update_priorities(idx, td_errors[mid])

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        """Each module's buffer (contents, priorities, insertion pointer, RNG) and the rows
        each n-step collector still holds back, keyed `module_id -> source`.

        `components` / `not_components` are ignored (no sub-components).
        """
        held: dict[str, dict[str, dict[str, np.ndarray]]] = {}
        for (mid, source), collector in self._collectors.items():
            if collector.num_held:
                held.setdefault(mid, {})[str(source)] = collector.get_state()
        return {"buffers": {mid: buf.get_state() for mid, buf in self.buffers.items()},
                "held": held}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores the saved buffers (replacing any the buffer has) and stores the held
        rows as transitions.

        Held rows are rows whose n-step window was still open when saved. EnvRunners do
        not save envs in the middle of an episode, so a restored run starts new episodes
        and those windows never close: each such row is stored with the shorter window it
        has (as for an episode cut by an env reset), instead of being lost or joined to a
        new episode that happens to reuse its episode ID.
        """
        if "buffers" in state:
            self.buffers = {}
            for mid, buf_state in state["buffers"].items():
                self._buffer(mid).set_state(buf_state)
        self._collectors = {}
        for mid, by_source in state.get("held", {}).items():
            n, gamma = self._n_step(mid)
            for rows in by_source.values():
                collector = NStepCollector(n=n, gamma=gamma)
                try:
                    collector.set_state(rows)
                except ValueError as e:
                    raise CheckpointError(f"replay_buffer: module {mid!r}: {e}") from None
                self._buffer(mid).add(collector.flush())
