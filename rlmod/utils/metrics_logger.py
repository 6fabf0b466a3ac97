"""MetricsLogger: custom metrics that callbacks log, reduced once per training iteration.

Used by EnvRunners (`env_runner.metrics`, shipped to the Algorithm with `get_metrics()`
and shown under `result["env_runners"][key]`) and by the Algorithm
(`algorithm.metrics_logger`, shown under `result[key]`); callbacks get it as their
`metrics_logger` argument, as in RLlib.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

REDUCE_METHODS = ("mean", "ema", "sum", "lifetime_sum", "min", "max", "item")
"""What `log_value(reduce=...)` accepts: RLlib 2.60's `DEFAULT_STATS_CLS_LOOKUP` keys
without "percentiles" and "item_series"."""

DEFAULT_EMA_COEFF = 0.01
"""RLlib's EMA coefficient when `reduce` is left None and no `window` is given."""

Key = str | tuple[str, ...]


def _scalar(value: Any) -> Any:
    """A logged number as a plain float (torch and numpy scalars included)."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool | int | float | np.number):
        return float(value)
    return value


class _Stat:
    """The values of one key and how they reduce (one per key and logger)."""

    __slots__ = ("reduce", "window", "ema_coeff", "clear", "values", "ema", "total")

    def __init__(
        self, *, reduce: str, window: int | None, ema_coeff: float | None, clear: bool
    ) -> None:
        self.reduce = reduce
        self.window = window
        self.ema_coeff = ema_coeff
        self.clear = clear
        self.values: deque[Any] = deque(maxlen=window)
        self.ema: float | None = None
        self.total = 0.0

    def spec(self) -> dict[str, Any]:
        return {
            "reduce": self.reduce,
            "window": self.window,
            "ema_coeff": self.ema_coeff,
            "clear": self.clear,
        }

    def push(self, value: Any) -> None:
        if self.reduce == "ema":
            coeff = self.ema_coeff if self.ema_coeff is not None else DEFAULT_EMA_COEFF
            self.ema = value if self.ema is None else (1.0 - coeff) * self.ema + coeff * value
        elif self.reduce == "lifetime_sum":
            self.total += value
        self.values.append(value)

    def peek(self) -> Any:
        if self.reduce == "ema":
            return math.nan if self.ema is None else self.ema
        if self.reduce == "lifetime_sum":
            return self.total
        if self.reduce == "item":
            return self.values[-1] if self.values else None
        if self.reduce == "sum":
            return float(sum(self.values))
        if not self.values:
            return math.nan
        values = np.asarray(self.values, dtype=np.float64)
        if self.reduce == "min":
            return float(np.nanmin(values))
        if self.reduce == "max":
            return float(np.nanmax(values))
        return float(np.nanmean(values))

    def reduce_now(self) -> Any:
        out = self.peek()
        if self.clear or self.reduce in ("ema", "lifetime_sum", "item"):
            self.values.clear()  # ema/lifetime_sum carry their own running value
        return out


class MetricsLogger:
    """Logs values under (nested) keys; `reduce()` turns them into a nested result dict.

    RLlib's `MetricsLogger.log_value(key, value, *, reduce=None, window=None,
    ema_coeff=None, clear_on_reduce=...)` semantics (ray 2.60,
    `ray/rllib/utils/metrics/metrics_logger.py`): `reduce=None` means "mean" over the last
    `window` values if a window is given, else an EMA with coefficient 0.01. With a
    `window`, a reduce keeps the most recent `window` values, so the window moves across
    iterations (RLlib: "after reduction the internal values list is shortened to hold at
    most `window` items"); without one, "min", "max" and "sum" reduce the values logged
    since the last `reduce()` and then start afresh. `clear_on_reduce` (RLlib's deprecated
    flag) overrides either; `reduce="sum", clear_on_reduce=False` is "lifetime_sum", as in
    RLlib. The first call for a key fixes how it reduces. Keys may be tuples
    (`("my", "nested")` shows as `result[...]["my"]["nested"]`).

    Deliberate difference: RLlib's percentiles and throughput options are refused with
    a ValueError rather than accepted (rlmod does not compute them).

    Example:
        >>> logger = MetricsLogger()
        >>> for x in (1.0, 2.0, 3.0):
        ...     logger.log_value("pole_angle", x, reduce="mean", window=2)
        >>> logger.log_value(("counts", "resets"), 1, reduce="sum")
        >>> logger.reduce()
        {'pole_angle': 2.5, 'counts': {'resets': 1.0}}
    """

    def __init__(self) -> None:
        self._stats: dict[tuple[str, ...], _Stat] = {}

    def log_value(
        self,
        key: Key,
        value: Any,
        *,
        reduce: str | None = None,
        window: int | None = None,
        ema_coeff: float | None = None,
        clear_on_reduce: bool | None = None,
        percentiles: Any = None,
        with_throughput: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """Adds `value` under `key` (see the class docstring for how it reduces)."""
        path = (key,) if isinstance(key, str) else tuple(key)
        stat = self._stats.get(path)
        if stat is None:
            stat = self._stats[path] = self._new_stat(
                path,
                reduce=reduce,
                window=window,
                ema_coeff=ema_coeff,
                clear_on_reduce=clear_on_reduce,
                percentiles=percentiles,
                with_throughput=with_throughput,
            )
        value = _scalar(value)
        if stat.reduce != "item" and not isinstance(value, float):
            raise TypeError(
                f"log_value({key!r}, {value!r}): reduce={stat.reduce!r} needs a number; "
                "log other objects with reduce='item'."
            )
        stat.push(value)

    def log_dict(
        self, value_dict: Mapping[str, Any], *, key: Key | None = None, **kwargs: Any
    ) -> None:
        """Logs every (nested) entry of `value_dict`, under `key` if given (RLlib's)."""
        prefix = () if key is None else ((key,) if isinstance(key, str) else tuple(key))
        for k, v in value_dict.items():
            if isinstance(v, Mapping):
                self.log_dict(v, key=(*prefix, k), **kwargs)
            else:
                self.log_value((*prefix, k), v, **kwargs)

    @staticmethod
    def _new_stat(
        path: tuple[str, ...],
        *,
        reduce: str | None,
        window: int | None,
        ema_coeff: float | None,
        clear_on_reduce: bool | None,
        percentiles: Any,
        with_throughput: bool | None,
    ) -> _Stat:
        name = "/".join(path)
        if percentiles or with_throughput:
            raise ValueError(
                f"log_value({name!r}): rlmod's MetricsLogger computes no percentiles or "
                "throughputs; drop percentiles=/with_throughput=, or log the values with "
                "reduce='min'/'max'/'mean'."
            )
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ValueError(
                f"log_value({name!r}, window={window!r}): window must be an int >= 1 or None."
            )
        if reduce is None:
            reduce = "mean" if window is not None else "ema"
        if reduce not in REDUCE_METHODS:
            raise ValueError(
                f"log_value({name!r}, reduce={reduce!r}): reduce must be one of "
                f"{list(REDUCE_METHODS)}."
            )
        if ema_coeff is not None and (
            reduce != "ema" and not (reduce == "mean" and window is None)
        ):
            raise ValueError(
                f"log_value({name!r}): ema_coeff goes with reduce='mean' (or "
                "'ema') and no window, as in RLlib."
            )
        if ema_coeff is not None:
            reduce = "ema"
        if reduce == "sum" and clear_on_reduce is False:
            reduce = "lifetime_sum"  # RLlib 2.60's mapping of the deprecated flag
        # RLlib: with a window, a reduce keeps the most recent `window` values (a moving
        # window across iterations); without one, "mean"/"min"/"max"/"sum" start afresh.
        clear = clear_on_reduce if clear_on_reduce is not None else window is None
        return _Stat(reduce=reduce, window=window, ema_coeff=ema_coeff, clear=clear)

    def peek(self, key: Key, *, default: Any = None) -> Any:
        """The value `key` would reduce to now, without reducing (RLlib's `peek`)."""
        path = (key,) if isinstance(key, str) else tuple(key)
        stat = self._stats.get(path)
        if stat is None:
            if default is not None:
                return default
            raise KeyError(
                f"MetricsLogger.peek({key!r}): nothing logged under this key; "
                f"logged: {sorted('/'.join(p) for p in self._stats)[:10]}."
            )
        return stat.peek()

    def reduce(self) -> dict[str, Any]:
        """Every key's reduced value as a nested dict; starts the next period."""
        out: dict[str, Any] = {}
        for path, stat in self._stats.items():
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = stat.reduce_now()
        return out

    def __bool__(self) -> bool:
        return bool(self._stats)

    # ------------------------------------------------------------------ across processes
    def export_period(self) -> dict[tuple[str, ...], tuple[dict[str, Any], list[Any]]]:
        """What was logged since the last export, as plain containers (key -> (how it
        reduces, the values)); an EnvRunner sends this to the Algorithm, which merges it
        with `merge_period` into one logger over all EnvRunners."""
        out = {}
        for path, stat in self._stats.items():
            if stat.values:
                out[path] = (stat.spec(), list(stat.values))
                stat.values.clear()
        return out

    def merge_period(self, exported: Mapping[tuple[str, ...], tuple[dict[str, Any], list]]) -> None:
        """Adds an `export_period()` of another logger (an EnvRunner's)."""
        for path, (spec, values) in exported.items():
            stat = self._stats.get(path)
            if stat is None:
                stat = self._stats[path] = _Stat(**spec)
            for v in values:
                stat.push(v)
