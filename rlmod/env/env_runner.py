"""EnvRunner: the sampling worker's interface, shared by single- and multi-agent runners.

EnvRunners own their envs and inference-only modules; they are built by EnvRunnerGroup,
in-process or (same class) as Ray actors. Everything they take and return is numpy
arrays and plain containers, so it crosses a process boundary cheaply.
"""

from __future__ import annotations

import abc
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.callbacks import EPISODE_HOOKS, Callbacks
from rlmod.core.multi_rl_module import ModuleID
from rlmod.utils.checkpoints import Checkpointable
from rlmod.utils.metrics_logger import MetricsLogger
from rlmod.utils.spaces import space_to_dict

ENV_SPACES_KEY = "__env__"
"""Key of the raw env's (observation_space, action_space) in `get_spaces()`: the vector
env's batched spaces on a single-agent EnvRunner (RLlib's), the first agent's on a
multi-agent one."""

ENV_SINGLE_SPACES_KEY = "__env_single__"
"""Key of one sub-env's (observation_space, action_space) in `get_spaces()` (RLlib's)."""

Batch = dict[str, np.ndarray]
SampleResult = dict[ModuleID, Batch]
"""What `sample()` returns: the episodes it collected, as flat column arrays per module.

Rows of one (sub-env, agent) sequence are contiguous and in time order; `eps_id` tells
the episodes apart and `seq_ends` marks the last row of each sequence.
"""


class EnvRunner(Checkpointable, abc.ABC):
    """Samples episodes with an inference-only module; no loss, no optimizer.

    `metrics` is the MetricsLogger EnvRunner-side callbacks log to (RLlib's
    `env_runner.metrics`); `get_metrics()` ships what was logged to the Algorithm.
    """

    def __init__(self, *, config: Any, worker_index: int = 0) -> None:
        self.config = config
        self.worker_index = worker_index
        self.metrics = MetricsLogger()
        self.callbacks = Callbacks.from_config(config)
        # Decided once here: episode objects are built only if a hook will read them.
        self._track_episodes = self.callbacks.any_of(EPISODE_HOOKS)

    @abc.abstractmethod
    def sample(self, *, num_timesteps: int | None = None, num_episodes: int | None = None,
               explore: bool | None = None) -> SampleResult:
        """Steps the envs for `num_timesteps` env steps or `num_episodes` whole episodes
        (default: one rollout fragment per sub-env)."""

    @abc.abstractmethod
    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        """`"__env__"` -> the env's spaces, `"__env_single__"` -> one sub-env's (RLlib's
        keys); each module ID -> the spaces that module sees (after the env-to-module
        connectors)."""

    @abc.abstractmethod
    def get_metrics(self) -> dict[str, Any]:
        """Episode returns/lengths and step counts since the last call (then reset)."""

    @abc.abstractmethod
    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        """`rl_module` (inference-only weights by module ID; left out with
        `not_components="rl_module"`), connector states, counters."""

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Restores any subset of what `get_state` returned."""

    def get_metadata(self) -> dict[str, Any]:
        """The spaces (`get_spaces()`) in checkpoints, for loaders that have no env."""
        return {"spaces": {key: [space_to_dict(obs), space_to_dict(act)]
                           for key, (obs, act) in self.get_spaces().items()}}

    @property
    def module_ids(self) -> list[ModuleID]:
        """The modules this EnvRunner holds (never learner-only ones)."""
        return [k for k in self.get_spaces() if k not in (ENV_SPACES_KEY, ENV_SINGLE_SPACES_KEY)]

    def stop(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Closes the envs."""
