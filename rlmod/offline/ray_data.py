"""Ray Data shards of recorded episodes, read on the Learners themselves.

Used by OfflineData with `offline_data(input_read_method="read_parquet")`. Ray Data tasks
read the same Parquet files the in-process OfflineReader reads, with the same code
(`episode_chunks`: whole files, so episodes stay whole for the returns and for stateful
connectors), and `streaming_split` hands each Learner an equal shard. Each Learner draws
its batches from its own shard (`update_from_shards`), so no rows pass through the driver.
Only rlmod.utils.ray_utils imports Ray.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline.checks import ColumnCheck
from rlmod.offline.parquet_chunks import ObsShape
from rlmod.offline.reader import MAX_READ_ROWS, Transform, episode_chunks
from rlmod.offline.returns import Columns_, bootstrap_obs_per_row


class FileReader:
    """The map_batches function: `{"path": [path]}` -> that file's training rows of one
    module, in chunks of whole episodes (picklable: it travels to Ray Data's tasks), with
    the columns an OfflineReader's batches have (`bootstrap_obs` per row for MARWIL)."""

    def __init__(
        self,
        *,
        columns: Sequence[str],
        module_id: str | None,
        obs_shape: ObsShape,
        gamma: float | None,
        transform: Transform,
        check: ColumnCheck | None = None,
    ) -> None:
        self.columns = list(columns)
        self.check = check
        self.module_id = module_id
        self.obs_shape = obs_shape
        self.gamma = gamma
        self.transform = transform

    def __call__(self, batch: Mapping[str, Any]) -> Iterator[Columns_]:
        for path in batch["path"].tolist():
            for cols in episode_chunks(
                Path(path),
                columns=self.columns,
                module_id=self.module_id,
                obs_shape=self.obs_shape,
                rows=MAX_READ_ROWS,
                gamma=self.gamma,
                transform=self.transform,
                check=self.check,
            ):
                if len(cols[Columns.REWARDS]):  # Ray Data shuffles rows: one s_T per row
                    yield bootstrap_obs_per_row(cols)


class ShardStream:
    """Endless batches of `batch_size` rows from one Learner's shard of one module's data:
    a new pass over the shard starts when one ends (every Learner's shard holds as many
    rows, so data-parallel Learners run out, and start again, at the same step)."""

    def __init__(
        self,
        shard: Any,
        *,
        batch_size: int,
        shuffle_buffer_size: int,
        seed: int | None,
        module_id: str,
        iter_batches_kwargs: dict | None = None,
    ) -> None:
        self.shard = shard
        self.iter_batches_kwargs = dict(iter_batches_kwargs or {})
        self.batch_size = batch_size
        self.shuffle_buffer_size = shuffle_buffer_size
        self.seed = seed
        self.module_id = module_id
        self._batches: Iterator[Columns_] | None = None
        self._passes = 0
        self.num_rows_read = 0

    def next_batch(self) -> Columns_:
        for _ in range(2):
            if self._batches is None:
                self._passes += 1
                self._batches = iter(
                    self.shard.iter_batches(
                        batch_size=self.batch_size,
                        batch_format="numpy",
                        drop_last=True,
                        local_shuffle_buffer_size=self.shuffle_buffer_size or None,
                        local_shuffle_seed=None if self.seed is None else self.seed + self._passes,
                        **self.iter_batches_kwargs,
                    )
                )
            try:
                batch = dict(next(self._batches))
            except StopIteration:
                self._batches = None
                continue
            self.num_rows_read += len(batch[Columns.REWARDS])
            return batch
        raise OfflineDataError(
            f"A Learner's Ray Data shard of module {self.module_id!r} holds fewer than "
            f"train_batch_size_per_learner={self.batch_size} rows: lower it, use fewer "
            "Learners, or record more data."
        )

    def close(self) -> None:
        """Ends the pass under way (while Ray still runs: Ray Data's iterator reports to
        its cluster when closed)."""
        batches, self._batches = self._batches, None
        if batches is not None:
            batches.close()  # type: ignore[attr-defined]


def close_streams(learner: Any) -> None:
    """Run on each Learner before it stops: closes the shard streams it reads."""
    for stream in getattr(learner, "offline_streams", {}).values():
        stream.close()


def update_from_shards(
    learner: Any,
    *,
    streams: Sequence[Mapping[str, ShardStream]] | None,
    timesteps: Mapping[str, int],
) -> tuple[dict[str, Any], int]:
    """Run on each Learner (`LearnerGroup.foreach_learner`): the first call keeps this
    Learner's streams (`streams[rank]`); every call draws one batch per module from them
    and updates. Returns the Learner's results and the rows it trained on."""
    if streams is not None:
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        learner.offline_streams = streams[rank]
    own: Mapping[str, ShardStream] = learner.offline_streams
    batches = {mid: stream.next_batch() for mid, stream in own.items()}
    results = learner.update([batches], timesteps=timesteps)
    return results, sum(len(b[Columns.REWARDS]) for b in batches.values())
