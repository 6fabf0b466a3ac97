"""Prefetch: items in order, made one ahead in a background thread; errors reach the
caller; the thread ends when the Prefetch is closed or dropped. And the OfflineReader
gives the same batches, bit for bit, with and without it."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline import OfflineReader
from rlmod.offline.prefetch import Prefetch
from rlmod.offline.reader import resolve_files


def _threads() -> int:
    return sum(t.name == "rlmod-prefetch" and t.is_alive() for t in threading.enumerate())


def _wait_for(condition: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_items_come_in_order_one_ahead_in_another_thread() -> None:
    made_in: list[str] = []
    made = threading.Event()

    def items() -> Iterator[int]:
        for i in range(5):
            made_in.append(threading.current_thread().name)
            made.set()
            yield i

    prefetch = Prefetch(items())
    assert not made_in  # nothing made before the first next()
    assert next(prefetch) == 0
    assert _wait_for(lambda: len(made_in) == 2)  # the next one, made while we work
    time.sleep(0.05)
    assert len(made_in) == 2  # ... and no further
    assert list(prefetch) == [1, 2, 3, 4]
    assert set(made_in) == {"rlmod-prefetch"}


def test_an_error_reaches_the_caller_at_its_item_and_after() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise OfflineDataError("bad.parquet is corrupt")

    prefetch = Prefetch(items())
    assert next(prefetch) == 1
    for _ in range(2):
        with pytest.raises(OfflineDataError, match="bad.parquet"):
            next(prefetch)


def test_the_thread_ends_when_closed_or_dropped() -> None:
    before = _threads()
    closed = Prefetch(iter(range(10)))
    next(closed)
    dropped = Prefetch(iter(range(10)))
    next(dropped)
    assert _threads() == before + 2
    closed.close()
    del dropped
    gc.collect()
    assert _wait_for(lambda: _threads() == before)


def test_reader_batches_do_not_depend_on_prefetching(expert_dir: Path) -> None:
    files = resolve_files(expert_dir)
    batches = {}
    for prefetch in (True, False):
        reader = OfflineReader(
            files,
            batch_size=300,
            shuffle_buffer_size=500,
            seed=3,
            obs_shape=(4,),
            gamma=0.99,
            prefetch=prefetch,
        )
        batches[prefetch] = [reader.next_batch() for _ in range(40)]  # several passes
        reader.close()
    for with_thread, without in zip(batches[True], batches[False], strict=True):
        assert with_thread.keys() == without.keys()
        for key, value in with_thread.items():
            assert value.tobytes() == without[key].tobytes(), key
    assert sum(len(b[Columns.REWARDS]) for b in batches[True]) > 3 * 1000
    assert not np.array_equal(batches[True][0][Columns.OBS], batches[True][1][Columns.OBS])
