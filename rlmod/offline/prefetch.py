"""Prefetch: an iterator's next item made in a background thread while the caller works.

Used by the OfflineReader, so that decoding Parquet and computing returns (pyarrow and
numpy release the GIL for both) run on one core while the reader's shuffle pool and the
Learner run on another, as data loaders do. One item ahead at most: memory grows by one
read chunk, not by a queue of them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Prefetch(Generic[T]):
    """Iterates `items` one item ahead in a daemon thread, started at the first `next()`.

    Items come in `items`' order, so what the caller sees does not depend on timing. An
    exception raised by `items` is raised by the `next()` that would have returned its
    item (and by every later one). `close()` ends the thread; dropping the Prefetch does
    too (the thread holds `items` but not this object).

    Example:
        >>> squares = Prefetch(x * x for x in range(3))
        >>> list(squares)
        [0, 1, 4]
    """

    def __init__(self, items: Iterator[T]) -> None:
        self._items: Iterator[T] | None = items
        self._out: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()
        self._wanted = threading.Semaphore(0)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def __iter__(self) -> Prefetch[T]:
        return self

    def __next__(self) -> T:
        if self._error is not None:
            raise self._error
        if self._thread is None:
            if self._items is None:
                raise RuntimeError("Prefetch was closed")
            self._thread = threading.Thread(
                target=_produce,
                args=(self._items, self._out, self._wanted, self._stop),
                name="rlmod-prefetch",
                daemon=True,
            )
            self._items = None
            self._thread.start()
            self._wanted.release()
        ok, value = self._out.get()
        if not ok:
            self._error = value  # type: ignore[assignment]
            raise value  # type: ignore[misc]
        self._wanted.release()  # the next item, made while the caller uses this one
        return value  # type: ignore[return-value]

    def close(self) -> None:
        """Ends the background thread and waits for it (it finishes the item it may be
        making: one read chunk), so nothing reads on after this returns."""
        self._signal_stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _signal_stop(self) -> None:
        self._stop.set()
        self._wanted.release()

    def __del__(self) -> None:
        self._signal_stop()  # no wait here: the thread ends by itself


def _produce(
    items: Iterator[T],
    out: queue.SimpleQueue[tuple[bool, object]],
    wanted: threading.Semaphore,
    stop: threading.Event,
) -> None:
    """The thread: one item per request, until `stop` or the end of `items`."""
    while True:
        wanted.acquire()
        if stop.is_set():
            return
        try:
            item = next(items)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            out.put((False, StopIteration() if isinstance(e, StopIteration) else e))
            return
        out.put((True, item))
