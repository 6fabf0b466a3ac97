"""ConnectorV2 and SingleAgentObservationPreprocessor: env-to-module pieces written as in RLlib.

Users subclass these and return them from `config.env_runners(env_to_module_connector=
lambda env, spaces, device: [...])`; ConnectorPipeline runs them through
`call_on_arrays`, which hands them RLlib's keyword arguments. rlmod's own pieces
(env_to_module.py) work on whole arrays instead and never pay for this.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
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

    @property
    def id_(self) -> int:
        """The row's index (rlmod keeps no episode IDs on the sampling path)."""
        return self._index

    module_id = None
    agent_id = None

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

    # RLlib's helpers for writing pieces (ray 2.60 connector_v2.py), same arguments.
    @staticmethod
    def single_agent_episode_iterator(
        episodes: list[Any],
        agents_that_stepped_only: bool = True,
        zip_with_batch_column: Any = None,
    ) -> Iterator[Any]:
        """Yields the single-agent episodes (with `zip_with_batch_column`: pairs of an
        episode and its item). rlmod's episodes in connectors are single-agent views
        already (one per env row, or per sequence of a module's train-batch rows)."""
        from rlmod.connectors.learner_v2 import iterate_single_agent_episodes

        return iterate_single_agent_episodes(episodes, zip_with_batch_column)

    @staticmethod
    def add_batch_item(
        batch: dict[str, Any],
        column: str,
        item_to_add: Any,
        single_agent_episode: Any = None,
    ) -> None:
        """Appends `item_to_add` under `column`: to a list (no episode), else to the list
        under the episode's key, `(eps_id,)` or `(eps_id, agent_id, module_id)` (RLlib's).

        Example:
            >>> batch = {}
            >>> ConnectorV2.add_batch_item(batch, "col", 5)
            >>> ConnectorV2.add_batch_item(batch, "col", 6)
            >>> batch
            {'col': [5, 6]}
        """
        from rlmod.connectors.learner_v2 import _key

        if single_agent_episode is None:
            batch.setdefault(column, []).append(item_to_add)
            return
        batch.setdefault(column, {}).setdefault(_key(single_agent_episode), []).append(item_to_add)

    @staticmethod
    def add_n_batch_items(
        batch: dict[str, Any],
        column: str,
        items_to_add: Any,
        num_items: int,
        single_agent_episode: Any = None,
    ) -> None:
        """Adds `num_items` items: a list is added item by item, an already batched array
        (`num_items` rows) as it is (RLlib's)."""
        from rlmod.connectors.learner_v2 import _Batched, _key

        if isinstance(items_to_add, list):
            if len(items_to_add) != num_items:
                raise ValueError(
                    f"add_n_batch_items({column!r}): {len(items_to_add)} items, "
                    f"num_items={num_items}."
                )
            for item in items_to_add:
                ConnectorV2.add_batch_item(batch, column, item, single_agent_episode)
            return
        if len(items_to_add) != num_items:
            raise ValueError(
                f"add_n_batch_items({column!r}): {len(items_to_add)} rows, num_items={num_items}."
            )
        target = (
            batch.setdefault(column, [])
            if single_agent_episode is None
            else batch.setdefault(column, {}).setdefault(_key(single_agent_episode), [])
        )
        target.append(_Batched(items_to_add))

    @staticmethod
    def foreach_batch_item_change_in_place(
        batch: dict[str, Any],
        column: str | list[str] | tuple[str, ...],
        func: Callable[[Any, Any, Any, Any], Any],
    ) -> None:
        """Replaces every item under `column` (several columns: a tuple of items) with
        `func(item, eps_id, agent_id, module_id)` (RLlib's). Items are those of lists, of
        `(eps_id[, agent_id, module_id])`-keyed dicts of lists, or the rows of an array
        (the env-to-module batch's observations: IDs are None there).

        Example:
            >>> batch = {"col1": {("e1",): [0, 1]}, "col2": np.array([1.0, 2.0])}
            >>> ConnectorV2.foreach_batch_item_change_in_place(
            ...     batch, "col1", lambda item, eps_id, *ids: f"{eps_id}:{item}")
            >>> ConnectorV2.foreach_batch_item_change_in_place(batch, "col2", lambda x, *a: -x)
            >>> batch["col1"], batch["col2"]
            ({('e1',): ['e1:0', 'e1:1']}, array([-1., -2.]))
        """
        columns = [column] if isinstance(column, str) else list(column)
        first = batch[columns[0]]
        targets: list[tuple[list[Any], int, tuple[Any, Any, Any]]] = []
        if isinstance(first, Mapping):
            for key in list(first):
                ids = (key[0], None, None) if len(key) == 1 else (key[0], key[1], key[2])
                seqs = [batch[c][key] for c in columns]
                targets += [(seqs, i, ids) for i in range(len(first[key]))]
        else:
            seqs = [batch[c] for c in columns]
            targets = [(seqs, i, (None, None, None)) for i in range(len(first))]
        for seqs, i, ids in targets:
            items = [seq[i] for seq in seqs]
            new = func(items[0] if len(columns) == 1 else tuple(items), *ids)
            for seq, value in zip(seqs, [new] if len(columns) == 1 else new, strict=True):
                seq[i] = value

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
        extra = sorted(set(out) - {Columns.OBS})
        if extra:
            raise ValueError(
                f"{type(self).__name__} added {extra} to an env-to-module batch: rlmod's "
                "env-to-module pieces pass observations only (the module's input). Put what "
                "the module needs into the observation (and its space)."
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
