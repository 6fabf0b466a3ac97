"""OfflineData: recorded episodes as per-module training batches for an offline Algorithm.

Built by MARWIL and BC in `setup()` (RLlib's name for the part that feeds Learners from
offline data). It finds the input (Parquet files or a Minari dataset), the spaces every
module is built with (the config's or those stored beside the data; never an env), and
the view each module trains on (the env-to-module connectors an EnvRunner would run), and
what its rows must fit (rlmod.offline.checks: file footers before training, values as
they are read; configured spaces against recorded ones: rlmod.offline.space_match). It
then reads with one OfflineReader per trained module, multi-agent rows routed by their
stored module ID, or, with `input_read_method="read_parquet"`, hands Ray Data shards of the
same files to the Learners, each of which reads its own (rlmod.offline.ray_data).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.errors import OfflineDataError
from rlmod.offline.checks import ColumnCheck, check_schemas
from rlmod.offline.minari_source import is_minari_input, load_minari
from rlmod.offline.parquet_chunks import ObsShape
from rlmod.offline.reader import (
    REQUIRED_COLUMNS,
    Columns_,
    OfflineReader,
    Transform,
    check_files,
    read_spaces,
    resolve_files,
)
from rlmod.offline.space_match import choose_spaces
from rlmod.offline.transforms import module_view
from rlmod.offline.writer import ENV_KEY, SPACES_FILE


@dataclass(frozen=True)
class ModuleView:
    """How one module's recorded rows become its training rows."""

    module_id: str
    transform: Transform
    obs_shape: ObsShape
    """Shape of one stored (raw) observation of this module (a Dict/Tuple space: itself)."""
    stored_id: str | None
    """The `module_id` column value of its rows; None: all rows (single-agent data)."""
    check: ColumnCheck
    """What its rows' values must fit (the spaces it is built from)."""


class OfflineData:
    """Where offline training data come from and what each trained module sees.

    Args:
        config: The algorithm's (frozen) config: `input_`, the spaces, the connectors,
            `policies` and `policies_to_train` for multi-agent data.

    Attributes:
        spaces: `{"__env__": (obs, act), module_id: (obs, act)}` for
            `config.get_multi_rl_module_spec(spaces=...)`.
        env_spaces: The raw env's (observation, action) spaces (single-agent data), or
            those stored under "__env__" (multi-agent data).
        views: One ModuleView per module that trains.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.sources: list[Any]
        if is_minari_input(config.input_):
            self.sources, minari_spaces = load_minari(config.input_)
            stored: dict[str, tuple[gym.Space, gym.Space]] | None = {ENV_KEY: minari_spaces}
            where = str(config.input_)
        else:
            self.sources = resolve_files(config.input_)
            check_files(self.sources)
            stored = read_spaces(self.sources)
            where = str(self.sources[0].parent / SPACES_FILE)
        if config.is_multi_agent:
            self._multi_agent(stored, where)
        else:
            self._single_agent(None if stored is None else stored.get(ENV_KEY), where)

    # ------------------------------------------------------------------ spaces and views
    def _single_agent(self, recorded: tuple[gym.Space, gym.Space] | None, where: str) -> None:
        """The config's spaces where set (they must fit the recorded ones: space_match),
        else the recorded ones; the data are checked against them as they are read."""
        config = self.config
        env_spaces, origin = choose_spaces(
            (config.observation_space, config.action_space),
            recorded,
            where,
            type(config).__name__[: -len("Config")],
        )
        self.env_spaces = env_spaces
        pipeline = config.build_env_to_module_connector(None, *env_spaces)
        assert pipeline.observation_space is not None
        self.spaces = {
            ENV_KEY: env_spaces,
            DEFAULT_MODULE_ID: (pipeline.observation_space, env_spaces[1]),
        }
        check = ColumnCheck(*env_spaces, origin=origin)
        self.views = [
            ModuleView(
                DEFAULT_MODULE_ID,
                module_view(pipeline, env_spaces[1]),
                _shape(env_spaces[0]),
                None,
                check,
            )
        ]
        parquet = [f for f in self.sources if isinstance(f, Path)]
        check_schemas(parquet, check, (*REQUIRED_COLUMNS, Columns.NEXT_OBS))  # footers only

    def _multi_agent(
        self, stored: Mapping[str, tuple[gym.Space, gym.Space]] | None, where: str
    ) -> None:
        """Multi-agent recordings hold what each module saw (the MultiAgentEnvRunner records
        only untransformed observations) with each row's module ID: module M trains on the
        rows stored under M, with the spaces stored for M (or set in its sub-spec)."""
        config = self.config
        if config.env_to_module_connector is not None:
            raise OfflineDataError(
                "Multi-agent offline data hold what each module saw; a config."
                "env_runners(env_to_module_connector=...) would transform them a second "
                "time. Leave it unset for multi-agent offline training."
            )
        stored = dict(stored or {})
        self.env_spaces = stored.get(ENV_KEY)  # type: ignore[assignment]
        self.spaces = dict(stored)
        self.views = []
        for mid in config.module_ids:
            if mid in config.learner_only_module_ids or not config.is_module_trainable(mid):
                continue
            if mid not in stored:
                known = sorted(k for k in stored if k != ENV_KEY)
                raise OfflineDataError(
                    f"Module {mid!r} trains, but {where} stores no spaces for it (the data "
                    f"hold modules {known}). Name the policies as the recorded module IDs, "
                    "or leave this one out of policies_to_train."
                )
            obs, act = stored[mid]
            pipeline = ConnectorPipeline([], input_observation_space=obs, input_action_space=act)
            self.views.append(
                ModuleView(
                    mid,
                    module_view(pipeline, act),
                    _shape(obs),
                    mid,
                    ColumnCheck(obs, act, origin=f"{where} (module {mid!r})"),
                )
            )
        if not self.views:
            raise OfflineDataError("No module trains: policies_to_train excludes them all.")

    @property
    def on_learners(self) -> bool:
        """Whether the Learners read their own Ray Data shards (`input_read_method=
        "read_parquet"`) rather than this process reading for them."""
        return self.config.input_read_method == "read_parquet"

    def _gamma(self, module_id: str) -> float | None:
        """The discount of the returns `module_id` trains on; None for BC (no returns)."""
        config = self.config.get_config_for_module(module_id)
        return config.gamma if config.beta > 0.0 else None

    def build_readers(self, whole_episodes: Collection[str] = ()) -> None:
        """One OfflineReader per trained module in this process, or (on_learners) one Ray
        Data shard stream per module and Learner. The modules in `whole_episodes`
        (recurrent ones) read batches of whole episodes, shuffled as episodes."""
        config = self.config
        self.readers: dict[str, OfflineReader] = {}
        self._streams: list[dict[str, Any]] | None = None
        if self.on_learners:
            if whole_episodes:
                raise OfflineDataError(
                    f"offline_data(input_read_method='read_parquet') shuffles rows with Ray "
                    f"Data, but module(s) {sorted(whole_episodes)} are recurrent "
                    "(model_config use_lstm=True) and train on whole episodes. Leave "
                    "input_read_method unset to read them in-process."
                )
            self._build_shards()
            return
        self.readers = {
            view.module_id: OfflineReader(
                self.sources,
                batch_size=config.train_batch_size_per_learner,
                gamma=self._gamma(view.module_id),
                shuffle_buffer_size=config.shuffle_buffer_size,
                seed=None if config.seed is None else config.seed + i,
                module_id=view.stored_id,
                obs_shape=view.obs_shape,
                transform=view.transform,
                check=view.check,
                whole_episodes=view.module_id in whole_episodes,
            )
            for i, view in enumerate(self.views)
        }

    def _build_shards(self) -> None:
        from rlmod.offline.ray_data import FileReader, ShardStream
        from rlmod.utils import ray_utils

        config = self.config
        if not all(isinstance(f, Path) for f in self.sources):
            raise OfflineDataError(
                f"offline_data(input_read_method='read_parquet') reads Parquet files; "
                f"input_={config.input_!r} is not. Leave input_read_method unset to read it "
                "in-process."
            )
        num_shards = max(1, config.num_learners)
        self._streams = [{} for _ in range(num_shards)]
        for i, view in enumerate(self.views):
            read = FileReader(
                columns=REQUIRED_COLUMNS,
                module_id=view.stored_id,
                obs_shape=view.obs_shape,
                gamma=self._gamma(view.module_id),
                transform=view.transform,
                check=view.check,
            )
            shards = ray_utils.data_shards(
                [str(f) for f in self.sources],
                read,
                num_shards=num_shards,
                map_batches_kwargs=config.map_batches_kwargs,
            )
            for rank, shard in enumerate(shards):
                self._streams[rank][view.module_id] = ShardStream(
                    shard,
                    batch_size=config.train_batch_size_per_learner,
                    shuffle_buffer_size=config.shuffle_buffer_size,
                    seed=None if config.seed is None else config.seed + 1000 * rank + i,
                    module_id=view.module_id,
                    iter_batches_kwargs=_own_iter_batches_kwargs(config.iter_batches_kwargs),
                )

    def stop(self, learner_group: Any) -> None:
        """Ends the in-process readers' prefetching threads, or closes the Learners' Ray
        Data shard streams (before their cluster goes)."""
        for reader in self.readers.values():
            reader.close()
        if self.on_learners and self._streams is None:  # the Learners hold them
            from rlmod.offline.ray_data import close_streams

            learner_group.foreach_learner(close_streams)

    def update_on_learners(
        self, learner_group: Any, *, timesteps: Mapping[str, int]
    ) -> tuple[dict[str, Any], int]:
        """One update of every Learner on a batch it draws from its own shards; returns
        the results (means over Learners, counts summed) and the rows trained on."""
        # LearnerGroup.update's own reduction (means over Learners, counts summed).
        from rlmod.core.learner_group import _reduce_results
        from rlmod.offline.ray_data import update_from_shards

        streams, self._streams = self._streams, None  # sent once; the Learners keep them
        out = learner_group.foreach_learner(
            update_from_shards, streams=streams, timesteps=timesteps
        )
        return _reduce_results([r for r, _ in out]), sum(n for _, n in out)

    def sample(self) -> dict[str, Columns_]:
        """The next batch of every trained module: `{module_id: columns}`."""
        return {mid: reader.next_batch() for mid, reader in self.readers.items()}

    @staticmethod
    def num_rows(batches: Mapping[str, Columns_]) -> int:
        return sum(len(b[Columns.REWARDS]) for b in batches.values())


def _shape(space: gym.Space) -> ObsShape:
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return space  # a struct column: its parts give the shapes (struct_obs)
    return tuple(getattr(space, "shape", None) or ())


__all__ = ["ModuleView", "OfflineData"]


def _own_iter_batches_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`iter_batches_kwargs` without what rlmod sets itself (batch size, format, shuffling,
    drop_last): those are refused with a message rather than overridden."""
    own = {
        "batch_size",
        "batch_format",
        "drop_last",
        "local_shuffle_buffer_size",
        "local_shuffle_seed",
    }
    clash = sorted(own & set(kwargs))
    if clash:
        raise OfflineDataError(
            f"offline_data(iter_batches_kwargs=...) sets {clash}, which rlmod sets itself "
            "(train_batch_size_per_learner, shuffle_buffer_size); drop them."
        )
    return dict(kwargs)
