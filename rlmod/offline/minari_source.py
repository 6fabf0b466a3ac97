"""Minari datasets (Farama's offline-RL format) as a source of the OfflineReader.

Used by MARWIL and BC when `config.offline_data(input_="minari:<dataset_id>")` names a
dataset installed locally (`minari.load_dataset`, never downloaded here). Needs the
`minari` package, imported only then; its episodes become the same columns as rlmod's own
Parquet rows (observation t and t + 1, action, reward, terminated, truncated).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline.struct_obs import LEAF_SPACES

PREFIX = "minari:"
EPISODES_PER_SOURCE = 32
"""Episodes per MinariSource: the reader shuffles the order of sources each pass."""


def is_minari_input(input_: Any) -> bool:
    """True for `input_="minari:<dataset_id>"`."""
    return isinstance(input_, str) and input_.startswith(PREFIX)


class MinariSource:
    """Some episodes of a Minari dataset, read as chunks of whole episodes."""

    def __init__(self, dataset: Any, episode_indices: Sequence[int], name: str) -> None:
        self.dataset = dataset
        self.episode_indices = list(episode_indices)
        self.name = name

    def __str__(self) -> str:
        return f"{self.name} (episodes {self.episode_indices[0]}..{self.episode_indices[-1]})"

    def chunks(
        self,
        *,
        columns: Sequence[str] | None,
        module_id: str | None,
        obs_shape: tuple[int, ...] | None,
        rows: int,
    ) -> Iterator[dict[str, np.ndarray]]:
        """One chunk per episode (Minari stores T + 1 observations per T steps)."""
        for episode in self.dataset.iterate_episodes(self.episode_indices):
            obs = np.asarray(episode.observations)
            n = len(episode.rewards)
            cols = {
                Columns.EPS_ID: np.full(n, int(episode.id), np.int64),
                Columns.OBS: obs[:-1],
                Columns.NEXT_OBS: obs[1:],
                Columns.ACTIONS: np.asarray(episode.actions),
                Columns.REWARDS: np.asarray(episode.rewards, np.float32),
                Columns.TERMINATEDS: np.asarray(episode.terminations, bool),
                Columns.TRUNCATEDS: np.asarray(episode.truncations, bool),
            }
            if n and not (cols[Columns.TERMINATEDS][-1] or cols[Columns.TRUNCATEDS][-1]):
                # Minari allows episodes cut without a flag; the last row ends it here.
                cols[Columns.TRUNCATEDS] = cols[Columns.TRUNCATEDS].copy()
                cols[Columns.TRUNCATEDS][-1] = True
            yield {k: v for k, v in cols.items() if columns is None or k in columns}


def load_minari(input_: str) -> tuple[list[MinariSource], tuple[gym.Space, gym.Space]]:
    """The sources and (observation, action) spaces of `input_="minari:<dataset_id>"`."""
    try:
        import minari
    except ImportError:
        raise ImportError(
            f"offline_data(input_={input_!r}) reads a Minari dataset and needs the minari "
            "package: pip install minari."
        ) from None
    dataset_id = input_[len(PREFIX) :]
    try:
        dataset = minari.load_dataset(dataset_id, download=False)
    except (FileNotFoundError, ValueError) as e:
        raise OfflineDataError(
            f"offline_data(input_={input_!r}): no local Minari dataset {dataset_id!r} "
            f"({e}). rlmod does not download datasets: run `minari download {dataset_id}` "
            "or point MINARI_DATASETS_PATH at its directory."
        ) from None
    obs_space, act_space = dataset.observation_space, dataset.action_space
    for kind, space in (("observation", obs_space), ("action", act_space)):
        if not isinstance(space, LEAF_SPACES):  # Dict/Tuple Minari data: not read yet
            raise OfflineDataError(
                f"Minari dataset {dataset_id!r} has a {kind} space {space}; rlmod reads Box, "
                "Discrete, MultiDiscrete and MultiBinary spaces."
            )
    indices = [int(i) for i in dataset.episode_indices]
    if not indices:
        raise OfflineDataError(f"Minari dataset {dataset_id!r} holds no episodes.")
    sources = [
        MinariSource(dataset, indices[i : i + EPISODES_PER_SOURCE], input_)
        for i in range(0, len(indices), EPISODES_PER_SOURCE)
    ]
    return sources, (obs_space, act_space)
