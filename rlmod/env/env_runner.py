"""EnvRunner: the sampling worker's interface, shared by single- and multi-agent runners.

EnvRunners own their envs and inference-only modules; they are built by EnvRunnerGroup,
in-process or (same class) as Ray actors. Everything they take and return is numpy
arrays and plain containers, so it crosses a process boundary cheaply.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar, cast

import gymnasium as gym
import torch

from rlmod.callbacks import EPISODE_HOOKS, Callbacks
from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array, BoolArray, Components, MetricsDict, StateDict
from rlmod.fast_paths import use_plain_paths
from rlmod.utils.checkpoints import Checkpointable
from rlmod.utils.metrics_logger import MetricsLogger
from rlmod.utils.seeding import derive_seed
from rlmod.utils.spaces import space_to_dict

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

_P = ParamSpec("_P")
_R = TypeVar("_R")

ENV_SPACES_KEY = "__env__"
"""Key of the raw env's (observation_space, action_space) in `get_spaces()`: the vector
env's batched spaces on a single-agent EnvRunner (RLlib's), the first agent's on a
multi-agent one."""

ENV_SINGLE_SPACES_KEY = "__env_single__"
"""Key of one sub-env's (observation_space, action_space) in `get_spaces()` (RLlib's)."""

WEIGHTS_SEQ_NO = "weights_seq_no"
"""Key of the weights' version in a `set_state()` state (RLlib's name): an EnvRunner
applies `rl_module` weights only when this is newer than the version it holds."""

_TORCH_STREAM = 7919
"""Offset that gives an EnvRunner's torch RNG a seed of its own, apart from its envs'."""

NumpyColumns = dict[str, Array]
"""One module's rows as flat numpy column arrays, keyed by `Columns` names."""
SampleResult = dict[ModuleID, NumpyColumns]
"""What `sample()` returns: per module ID, the rows it sampled as flat column arrays (not
episode objects, which RLlib's EnvRunners return).

Rows of one (sub-env, agent) sequence are contiguous and in time order; `eps_id` tells
the episodes apart and `seq_ends` marks the last row of each sequence.
"""


def sequence_ends(terminateds: BoolArray, truncateds: BoolArray, *ids: Array) -> BoolArray:
    """The `seq_ends` column of rows whose sequences are contiguous: True where an episode
    ends, where any of the per-row sequence keys `ids` changes, and at the last row."""
    ends = terminateds | truncateds
    for key in ids:
        ends[:-1] |= key[1:] != key[:-1]
    ends[-1] = True
    return ends


class EnvRunner(Checkpointable, abc.ABC):
    """Samples episodes with an inference-only module; no loss, no optimizer.

    `metrics` is the MetricsLogger EnvRunner-side callbacks log to (RLlib's
    `env_runner.metrics`); `get_metrics()` ships what was logged to the Algorithm.
    """

    num_envs: int
    """Sub-envs this EnvRunner steps at once (set by each subclass when it builds them)."""

    def __init__(self, *, config: AlgorithmConfig, worker_index: int = 0) -> None:
        use_plain_paths(config)
        self.config = config
        self.worker_index = worker_index
        self.metrics = MetricsLogger()
        self.callbacks = Callbacks.from_config(config)
        # Decided once here: episode objects are built only if a hook will read them.
        self._track_episodes = self.callbacks.any_of(EPISODE_HOOKS)
        self.weights_seq_no = 0
        generator = torch.Generator()
        seed = derive_seed(config.seed, self.seed_index, _TORCH_STREAM)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        self._torch_rng_state = generator.get_state()

    @property
    def seed_index(self) -> int:
        """Which seeds this EnvRunner's envs and action sampling derive from (with
        `config.seed`): `worker_index`, except that the local EnvRunner (index 0) takes
        remote EnvRunner 1's. The local one samples only when there are no remote ones, so
        one seed gives the same episodes in-process and on one remote EnvRunner."""
        return max(self.worker_index, 1)

    @contextlib.contextmanager
    def own_torch_rng(self) -> Iterator[None]:
        """Runs the block on this EnvRunner's own torch RNG stream, then restores the
        process's. Action sampling then depends on the seed and this runner's history
        only, not on what else draws from torch's global RNG in the same process (the
        Learner's minibatch shuffles in-process), which is what makes a remote EnvRunner
        sample exactly what the local one would."""
        saved = torch.get_rng_state()
        torch.set_rng_state(self._torch_rng_state)
        try:
            yield
        finally:
            self._torch_rng_state = torch.get_rng_state()
            torch.set_rng_state(saved)

    def _drop_stale_weights(self, state: StateDict) -> StateDict:
        """`state` without its `rl_module` weights when they are not newer than those held
        (by `WEIGHTS_SEQ_NO`; a state without it always applies). Subclasses' `set_state`
        calls this first."""
        seq_no = cast("int | None", state.get(WEIGHTS_SEQ_NO))
        if seq_no is None:
            return state
        if seq_no <= self.weights_seq_no:
            return {k: v for k, v in state.items() if k not in ("rl_module", WEIGHTS_SEQ_NO)}
        self.weights_seq_no = int(seq_no)
        return state

    def make_module(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Builds this EnvRunner's modules now if it left that for later (RLlib's name;
        here it never rebuilds). EnvRunnerGroup calls it on remote EnvRunners right after
        asking the first one for its spaces, so that they build while the driver builds
        its Learner. By default the modules were built in `__init__`: nothing to do."""

    def apply(
        self, func: Callable[Concatenate[EnvRunner, _P], _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> _R:
        """`func(self, *args, **kwargs)`: how `EnvRunnerGroup.foreach_env_runner` runs a
        function on an EnvRunner, in-process or inside its Ray actor."""
        return func(self, *args, **kwargs)

    @abc.abstractmethod
    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
    ) -> SampleResult:
        """Steps the envs for `num_timesteps` env steps or `num_episodes` whole episodes
        (default: one rollout fragment per sub-env)."""

    def _timesteps_to_sample(
        self, num_timesteps: int | None, num_episodes: int | None
    ) -> int | None:
        """The env steps a `sample()` call runs: `num_timesteps`, None where it runs for
        `num_episodes`, by default one rollout fragment per sub-env."""
        if num_timesteps is not None and num_episodes is not None:
            raise ValueError("sample() takes num_timesteps or num_episodes, not both.")
        if num_timesteps is None and num_episodes is None:
            return self.config.get_rollout_fragment_length() * self.num_envs
        return num_timesteps

    @abc.abstractmethod
    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        """`"__env__"` -> the env's spaces, `"__env_single__"` -> one sub-env's (RLlib's
        keys); each module ID -> the spaces that module sees (after the env-to-module
        connectors)."""

    @abc.abstractmethod
    def get_metrics(self) -> MetricsDict:
        """Episode returns/lengths and step counts since the last call (then reset)."""

    @abc.abstractmethod
    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        """`rl_module` (inference-only weights by module ID; left out with
        `not_components="rl_module"`), connector states, counters."""

    @abc.abstractmethod
    def set_state(self, state: StateDict) -> None:
        """Restores any subset of what `get_state` returned."""

    def get_metadata(self) -> dict[str, object]:
        """The spaces (`get_spaces()`) in checkpoints, for loaders that have no env."""
        return {
            "spaces": {
                key: [space_to_dict(obs), space_to_dict(act)]
                for key, (obs, act) in self.get_spaces().items()
            }
        }

    @property
    def module_ids(self) -> list[ModuleID]:
        """The modules this EnvRunner holds (never learner-only ones)."""
        return [k for k in self.get_spaces() if k not in (ENV_SPACES_KEY, ENV_SINGLE_SPACES_KEY)]

    def stop(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Closes the envs."""
