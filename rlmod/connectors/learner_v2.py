"""ConnectorV2 pieces in the learner pipeline: RLlib's learner-connector contract on rlmod's
train batches.

Used by `AlgorithmConfig.build_learner_connector` for what `training(learner_connector=...)`
returns when it is a ConnectorV2 (written as RLlib's, e.g. a reward-shaping piece in the
style of RLlib's count-based curiosity example). RLlib's learner pieces get episodes;
rlmod's Learners receive column batches, so each piece gets one `BatchEpisode` per
sequence of rows (an episode's steps in this batch, in time order) with RLlib's
SingleAgentEpisode methods. What it changes there (`set_rewards`, `set_observations`) and
what it adds with `add_batch_item` / `add_n_batch_items` (one item per step) goes back
into the batch before the algorithm's own pieces (GAE) run, as RLlib prepends user pieces.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from rlmod.connectors.connector_v2 import ConnectorV2
from rlmod.connectors.learner import LearnerConnector
from rlmod.core.columns import Columns
from rlmod.core.learner import TensorBatch
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule

Index = int | slice | Sequence[int] | None


class BatchEpisode:
    """One sequence of a module's train-batch rows, shown as RLlib's SingleAgentEpisode
    (ray 2.60 `ray/rllib/env/single_agent_episode.py`): `len(ep)` steps, `len(ep) + 1`
    observations (the rows' observations and the last row's next one), `get_actions`,
    `get_rewards`, `get_return`, `set_rewards`, `set_observations`, `id_`,
    `module_id`/`agent_id` (None for a single-agent batch, as RLlib's), `is_terminated`,
    `is_truncated`, `is_done`. Indices are RLlib's (ints, negative from the end, slices,
    lists). Infos and extra model outputs are not in a train batch: asking for them is an
    error naming what to do instead.
    """

    def __init__(
        self,
        cols: dict[str, np.ndarray],
        start: int,
        stop: int,
        *,
        id_: int,
        module_id: ModuleID | None,
        changed: set[str],
    ) -> None:
        self._cols = cols
        self._start, self._stop = start, stop
        self._changed = changed
        self.id_ = id_
        self.multi_agent_episode_id = id_
        self.module_id = module_id
        self.agent_id = None
        last = stop - 1
        self.is_terminated = bool(cols[Columns.TERMINATEDS][last])
        self.is_truncated = (
            bool(cols[Columns.TRUNCATEDS][last]) if Columns.TRUNCATEDS in cols else False
        )

    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    def __len__(self) -> int:
        return self._stop - self._start

    def env_steps(self) -> int:
        return len(self)

    def agent_steps(self) -> int:
        return len(self)

    def _rows(self, indices: Index, n: int) -> np.ndarray | int:
        """Positions (0..n-1 within this episode's items) that `indices` names."""
        if indices is None:
            return np.arange(n)
        if isinstance(indices, int | np.integer):
            i = int(indices) + n if indices < 0 else int(indices)
            if not 0 <= i < n:
                raise IndexError(f"index {indices} out of range for {n} items")
            return i
        if isinstance(indices, slice):
            return np.arange(n)[indices]
        return np.array([i + n if i < 0 else i for i in indices])

    def get_observations(self, indices: Index = None) -> Any:
        """The observations: row observations, then the last row's next observation."""
        obs = np.concatenate(
            [
                self._cols[Columns.OBS][self._start : self._stop],
                self._cols[Columns.NEXT_OBS][self._stop - 1 : self._stop],
            ]
        )
        return obs[self._rows(indices, len(obs))]

    def get_actions(self, indices: Index = None) -> Any:
        return self._cols[Columns.ACTIONS][self._start : self._stop][self._rows(indices, len(self))]

    def get_rewards(self, indices: Index = None) -> Any:
        return self._cols[Columns.REWARDS][self._start : self._stop][self._rows(indices, len(self))]

    def get_return(self) -> float:
        return float(self._cols[Columns.REWARDS][self._start : self._stop].sum())

    def set_rewards(self, *, new_data: Any, at_indices: Index = None) -> None:
        """Replaces rewards (RLlib's keywords); the batch's rewards change with them."""
        rows = self._rows(at_indices, len(self))
        self._cols[Columns.REWARDS][self._start : self._stop][rows] = new_data
        self._changed.add(Columns.REWARDS)

    def set_observations(self, *, new_data: Any, at_indices: Index = None) -> None:
        """Replaces observations; observation i is row i's `obs` and row i-1's `new_obs`."""
        n = len(self) + 1
        rows = np.atleast_1d(self._rows(at_indices, n))
        data = np.asarray(new_data)
        if np.ndim(self._rows(at_indices, n)) == 0:
            data = data[None]
        obs, nxt = self._cols[Columns.OBS], self._cols[Columns.NEXT_OBS]
        for k, i in enumerate(rows.tolist()):
            if i < n - 1:
                obs[self._start + i] = data[k]
            if i > 0:
                nxt[self._start + i - 1] = data[k]
        self._changed.update((Columns.OBS, Columns.NEXT_OBS))

    def _unavailable(self, what: str) -> Any:
        raise NotImplementedError(
            f"{what} is not in rlmod's train batches, so a learner ConnectorV2 cannot read "
            "it; compute what you need in an env-to-module piece or a callback "
            "(on_episode_step) and keep it in the observation, or read the batch columns."
        )

    def get_infos(self, indices: Index = None) -> Any:
        return self._unavailable("get_infos()")

    def get_extra_model_outputs(self, key: str | None = None, indices: Index = None) -> Any:
        return self._unavailable("get_extra_model_outputs()")

    def __repr__(self) -> str:
        return f"BatchEpisode(id_={self.id_}, module_id={self.module_id!r}, len={len(self)})"


def _sequences(cols: dict[str, np.ndarray]) -> list[tuple[int, int]]:
    """(start, stop) of each sequence of rows; rows without SEQ_ENDS (replayed n-step
    transitions) are one-row sequences."""
    n = len(cols[Columns.REWARDS])
    if Columns.SEQ_ENDS not in cols:
        return [(i, i + 1) for i in range(n)]
    ends = np.flatnonzero(np.asarray(cols[Columns.SEQ_ENDS]).astype(bool)).tolist()
    if not ends or ends[-1] != n - 1:
        ends.append(n - 1)
    starts = [0, *[e + 1 for e in ends[:-1]]]
    return list(zip(starts, [e + 1 for e in ends], strict=True))


class ConnectorV2LearnerPiece(LearnerConnector):
    """Runs a user's ConnectorV2 on a Learner's batch with RLlib's keyword call
    (`rl_module`, `batch`, `episodes`, `explore`, `shared_data`, `metrics`)."""

    def __init__(self, piece: ConnectorV2) -> None:
        self.piece = piece

    def set_input_spaces(self, observation_space: Any, action_space: Any) -> None:
        super().set_input_spaces(observation_space, action_space)
        self.piece.set_input_spaces(observation_space, action_space)

    def get_state(self) -> dict[str, Any]:
        return self.piece.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.piece.set_state(state)

    def __call__(
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        arrays: dict[ModuleID, dict[str, np.ndarray]] = {}
        changed: dict[ModuleID, set[str]] = {}
        episodes: list[BatchEpisode] = []
        owner: dict[tuple, tuple[ModuleID, BatchEpisode]] = {}
        single = len(batch) == 1
        for mid, cols in batch.items():
            if Columns.REWARDS not in cols:
                continue
            arrays[mid] = {k: v.detach().cpu().numpy().copy() for k, v in cols.items()}
            changed[mid] = set()
            for start, stop in _sequences(arrays[mid]):
                ep = BatchEpisode(
                    arrays[mid],
                    start,
                    stop,
                    id_=len(episodes),
                    module_id=None if single else mid,
                    changed=changed[mid],
                )
                episodes.append(ep)
                owner[_key(ep)] = (mid, ep)
        staged: dict[str, Any] = {}
        out = self.piece(
            rl_module=rl_module,
            batch=staged,
            episodes=episodes,
            explore=False,
            shared_data={},
            metrics=None,
        )
        if out is not None:
            if not isinstance(out, dict):
                raise TypeError(
                    f"{type(self.piece).__name__}.__call__ must return the batch (a dict), as "
                    f"RLlib's ConnectorV2 does; got {type(out).__name__}."
                )
            staged = out
        for mid, names in changed.items():
            for name in names:
                ref = batch[mid][name]
                batch[mid][name] = torch.as_tensor(arrays[mid][name], dtype=ref.dtype).to(
                    ref.device
                )
        for column, items in staged.items():
            self._merge(batch, arrays, column, items, owner)
        return batch

    def _merge(
        self,
        batch: TensorBatch,
        arrays: dict[ModuleID, dict[str, np.ndarray]],
        column: str,
        items: Any,
        owner: dict[tuple, tuple[ModuleID, BatchEpisode]],
    ) -> None:
        """Puts a column the piece added (one item per step of each episode) into the
        module batches, rows in the batch's order."""
        name = type(self.piece).__name__
        if not isinstance(items, dict):
            raise ValueError(
                f"{name} added column {column!r} without episodes; add it per episode with "
                "add_batch_item(batch, column, item, single_agent_episode=episode) (or "
                "add_n_batch_items), one item per step, so rlmod knows each item's row."
            )
        per_module: dict[ModuleID, np.ndarray] = {}
        filled: dict[ModuleID, int] = {}
        for key, values in items.items():
            if key not in owner:
                raise ValueError(f"{name} added {column!r} under {key!r}, not an episode it got.")
            mid, ep = owner[key]
            rows = _stack(values)
            if len(rows) != len(ep):
                raise ValueError(
                    f"{name} added {len(rows)} items of {column!r} for an episode of "
                    f"{len(ep)} steps; a learner piece adds one item per step."
                )
            n = len(arrays[mid][Columns.REWARDS])
            if mid not in per_module:
                per_module[mid] = np.zeros((n, *rows.shape[1:]), rows.dtype)
                filled[mid] = 0
            per_module[mid][ep._start : ep._stop] = rows
            filled[mid] += len(rows)
        for mid, values in per_module.items():
            if filled[mid] != len(values):
                raise ValueError(
                    f"{name} added {column!r} for some episodes of module {mid!r} only; add "
                    "it for every episode the piece gets."
                )
            device = next(iter(batch[mid].values())).device
            batch[mid][column] = torch.as_tensor(values).to(device)


def _stack(values: Any) -> np.ndarray:
    """Items (a list, or batched arrays as add_n_batch_items keeps them) as one array."""
    if isinstance(values, list) and values and all(isinstance(v, _Batched) for v in values):
        return np.concatenate([np.asarray(v.items) for v in values])
    if isinstance(values, list):
        parts = [
            np.asarray(v.items) if isinstance(v, _Batched) else np.asarray(v)[None] for v in values
        ]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(values)


class _Batched:
    """Items that `add_n_batch_items` got already batched (an array of `num_items` rows)."""

    __slots__ = ("items",)

    def __init__(self, items: Any) -> None:
        self.items = items


def _key(episode: Any) -> tuple:
    """Where `add_batch_item` files an episode's items (RLlib's keys: `(eps_id,)` for a
    single-agent episode, `(eps_id, agent_id, module_id)` for an agent of a multi-agent
    one; rlmod's learner episodes of several modules carry their module ID)."""
    module_id = getattr(episode, "module_id", None)
    if module_id is None:
        return (episode.id_,)
    return (getattr(episode, "multi_agent_episode_id", episode.id_), episode.agent_id, module_id)


def iterate_single_agent_episodes(
    episodes: Sequence[Any], zip_with_batch_column: Any = None
) -> Iterator[Any]:
    """RLlib's `single_agent_episode_iterator` for rlmod's episode objects, which are
    single-agent views already (learner `BatchEpisode`s, env-to-module rows)."""
    if zip_with_batch_column is None:
        yield from episodes
        return
    if isinstance(zip_with_batch_column, list):
        if len(zip_with_batch_column) != len(episodes):
            raise ValueError(
                "zip_with_batch_column must have one item per episode "
                f"({len(episodes)}), got {len(zip_with_batch_column)}."
            )
        yield from zip(episodes, zip_with_batch_column, strict=True)
        return
    taken: dict[tuple, int] = {}
    for ep in episodes:
        key = _key(ep)
        column = zip_with_batch_column[key]
        i = taken.get(key, 0)
        taken[key] = i + 1
        yield ep, column[i]
