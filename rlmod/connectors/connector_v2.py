"""ConnectorV2 and SingleAgentObservationPreprocessor: env-to-module pieces written as in RLlib.

Users subclass these and return them from `config.env_runners(env_to_module_connector=
lambda env, spaces, device: [...])`; ConnectorPipeline runs them through
`call_on_arrays`, which hands them RLlib's keyword arguments. rlmod's own pieces
(env_to_module.py) work on whole arrays instead and never pay for this.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.connectors.pipeline import Connector
from rlmod.core.columns import Columns


def row_of(x: Any, i: int) -> Any:
    """Row `i` of a batched (possibly Dict/Tuple) observation."""
    if isinstance(x, Mapping):
        return {k: row_of(v, i) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(row_of(v, i) for v in x)
    return x[i]


class LatestObservationEpisode:
    """What an env-to-module ConnectorV2 gets as each episode: the latest observation of
    one sub-env (or agent row), readable and replaceable with RLlib's episode methods.

    Deliberate difference: RLlib hands connectors whole episodes; rlmod's vectorized
    EnvRunners keep no per-episode history on the sampling path, so `get_observations`
    holds only the latest observation (index -1 or 0). Pieces that need history are
    rlmod's array pieces (FrameStackingEnvToModule) or keep their own state.
    """

    __slots__ = ("_rows", "_index", "is_reset", "observation_space", "changed")

    def __init__(
        self, rows: list[Any], index: int, *, is_reset: bool, observation_space: gym.Space | None
    ) -> None:
        self._rows = rows
        self._index = index
        self.is_reset = is_reset  # True where this observation starts an episode
        self.observation_space = observation_space
        self.changed = False

    @property
    def env_index(self) -> int:
        return self._index

    def get_observations(self, indices: int | None = None) -> Any:
        if indices is None:
            return [self._rows[self._index]]
        if indices not in (-1, 0):
            raise IndexError(
                f"get_observations({indices}): an env-to-module connector in rlmod sees only "
                "the latest observation (index -1); keep history in the connector's state."
            )
        return self._rows[self._index]

    def set_observations(self, *, new_data: Any, at_indices: int = -1) -> None:
        if at_indices not in (-1, 0):
            raise IndexError(
                "set_observations: only the latest observation (at_indices=-1) "
                "can be replaced here."
            )
        self._rows[self._index] = new_data
        self.changed = True

    def __len__(self) -> int:
        return 0 if self.is_reset else 1


def stack_rows(rows: Sequence[Any]) -> Any:
    """Inverse of `row_of` over all rows: one batched (possibly Dict/Tuple) observation."""
    first = rows[0]
    if isinstance(first, Mapping):
        return {k: stack_rows([r[k] for r in rows]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack_rows([r[i] for r in rows]) for i in range(len(first)))
    return np.stack([np.asarray(r) for r in rows])


class ConnectorV2(Connector):
    """Base of an env-to-module piece written as RLlib's ConnectorV2.

    Override `recompute_output_observation_space(input_observation_space,
    input_action_space)` if the piece changes observations, and
    `__call__(*, rl_module, batch, episodes, explore=None, shared_data=None, **kwargs)`
    (RLlib's signature, ray 2.60 `ray/rllib/connectors/connector_v2.py`). `batch` holds
    the observations of all sub-envs under `Columns.OBS` (as the pieces before this one
    left them); `episodes` are `LatestObservationEpisode`s, one per row. Return the batch:
    if any episode's observation was replaced with `set_observations`, the new
    observations are stacked from the episodes, else `batch[Columns.OBS]` goes on.

    Pieces run before rlmod's default flatten/one-hot ones, as in RLlib, so they see the
    env's raw (e.g. Dict) observations. Cost: one Python object per row per step, only
    for pipelines holding such a piece (rlmod's own pieces work on whole arrays).

    Example:
        >>> class AddOne(ConnectorV2):
        ...     def __call__(self, *, rl_module, batch, episodes, **kwargs):
        ...         batch["obs"] = batch["obs"] + 1.0
        ...         return batch
        >>> piece = AddOne(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
        >>> piece.call_on_arrays(np.zeros((3, 2), np.float32), episode_starts=np.ones(3, bool))
        array([[1., 1.],
               [1., 1.],
               [1., 1.]], dtype=float32)
    """

    rllib_style = True

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        **kwargs: Any,
    ) -> None:
        if input_observation_space is not None and input_action_space is not None:
            self.set_input_spaces(input_observation_space, input_action_space)

    @abc.abstractmethod
    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        """Transforms `batch` and/or the episodes' latest observations; returns the batch."""

    def call_on_arrays(
        self,
        obs: Any,
        *,
        episode_starts: np.ndarray,
        rl_module: Any = None,
        explore: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """What ConnectorPipeline calls: the batched observations in, the batched
        observations out, with RLlib's arguments in between."""
        n = len(episode_starts)
        rows = [row_of(obs, i) for i in range(n)]
        episodes = [
            LatestObservationEpisode(
                rows,
                i,
                is_reset=bool(episode_starts[i]),
                observation_space=self.input_observation_space,
            )
            for i in range(n)
        ]
        batch = {Columns.OBS: obs}
        out = self(
            rl_module=rl_module,
            batch=batch,
            episodes=episodes,
            explore=explore,
            shared_data={},
            metrics=None,
        )
        if any(ep.changed for ep in episodes):
            return stack_rows(rows)
        if not isinstance(out, Mapping) or Columns.OBS not in out:
            raise TypeError(
                f"{type(self).__name__}.__call__ must return the batch (a dict holding "
                f"{Columns.OBS!r}), as RLlib's ConnectorV2 returns it; got {type(out).__name__}."
            )
        return out[Columns.OBS]


class SingleAgentObservationPreprocessor(ConnectorV2):
    """RLlib's observation preprocessor: override `preprocess(observation, episode)` (one
    observation in, one out) and `recompute_output_observation_space` (ray 2.60,
    `ray/rllib/connectors/env_to_module/observation_preprocessor.py`).

    Example:
        >>> class OneHot(SingleAgentObservationPreprocessor):
        ...     def recompute_output_observation_space(self, in_obs_space, in_act_space):
        ...         return gym.spaces.Box(0.0, 1.0, (in_obs_space.n,), np.float32)
        ...     def preprocess(self, observation, episode):
        ...         out = np.zeros(self.observation_space.shape, np.float32)
        ...         out[observation] = 1.0
        ...         return out
        >>> piece = OneHot(gym.spaces.Discrete(3), gym.spaces.Discrete(2))
        >>> piece.call_on_arrays(np.array([2, 0]), episode_starts=np.zeros(2, bool))
        array([[0., 0., 1.],
               [1., 0., 0.]], dtype=float32)
    """

    @abc.abstractmethod
    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        """The observation space `preprocess` outputs."""

    @abc.abstractmethod
    def preprocess(self, observation: Any, episode: Any) -> Any:
        """One observation (the latest of `episode`) in, its preprocessed form out."""

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        for episode in episodes:  # as RLlib's: replace each episode's latest observation
            episode.set_observations(
                new_data=self.preprocess(episode.get_observations(-1), episode), at_indices=-1
            )
            episode.observation_space = self.observation_space
        return batch
