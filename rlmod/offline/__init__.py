"""Offline data: episodes to Parquet (EpisodeWriter, record_episodes) and back as training
batches (OfflineReader; OfflineData per module, in-process or through Ray Data), for BC
and MARWIL."""

from rlmod.offline.offline_data import OfflineData
from rlmod.offline.reader import OfflineReader, read_spaces, resolve_files
from rlmod.offline.writer import EpisodeWriter, record_episodes

__all__ = [
    "EpisodeWriter",
    "OfflineData",
    "OfflineReader",
    "read_spaces",
    "record_episodes",
    "resolve_files",
]
