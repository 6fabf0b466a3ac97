"""ProgressBar: what `rlmod train` shows after each iteration (iteration, env steps,
return, env steps/s and, when a stop criterion is bounded, the ETA).

Used by `rlmod.cli.train`; reads result dicts only. rich is optional and imported lazily.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any


def estimate_eta_s(
    *,
    elapsed_s: float,
    done: Sequence[tuple[float, float]],
    seconds_left: float | None = None,
) -> float | None:
    """Seconds until the first bounded stop criterion is met, or None if none is bounded
    or no progress was made yet.

    `done`: (progress so far, progress needed) of each count criterion (env steps,
    iterations), both counted from where this run started (a resume's restored counters
    excluded), extrapolated at the rate so far; `seconds_left`: a wall-time bound's
    remainder. Training stops at the first criterion met, so the ETA is the smallest.
    """
    candidates = [] if seconds_left is None else [max(seconds_left, 0.0)]
    for so_far, needed in done:
        if so_far > 0:
            candidates.append(elapsed_s * max(needed - so_far, 0.0) / so_far)
    return min(candidates) if candidates else None


def format_eta(seconds: float | None) -> str:
    """'0:01:23' for 83 s, '-' when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class ProgressBar:
    """Shows iteration, env steps, episode_return_mean, env steps/s and the ETA.

    On a terminal with `rich` installed it is one live bar (with a total when
    `total_env_steps` is given); otherwise (a log file, CI) one plain line per `every`
    iterations goes to `stream`. The ETA is shown whenever one of `total_env_steps`,
    `total_iterations` or `total_seconds` bounds the run. After a resume, pass the
    restored counters as `start_env_steps` / `start_iteration`, so throughput and ETA count
    only this run's work; the totals stay totals (as the stop criteria count them).
    `start_time` is the `time.perf_counter()` that `total_seconds` counts from (default: now).
    """

    def __init__(
        self,
        *,
        total_env_steps: int | None = None,
        total_iterations: int | None = None,
        total_seconds: float | None = None,
        start_env_steps: int = 0,
        start_iteration: int = 0,
        start_time: float | None = None,
        every: int = 1,
        stream: IO[str] | None = None,
        use_rich: bool | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total_env_steps = total_env_steps
        self.total_iterations = total_iterations
        self.total_seconds = total_seconds
        self.start_env_steps = start_env_steps
        self.start_iteration = start_iteration
        self.every = every
        self._created = time.perf_counter()
        self._start_time = self._created if start_time is None else start_time
        self._last_time = self._created
        self._last_steps = start_env_steps
        self._progress: Any = None
        if use_rich is None:
            use_rich = bool(getattr(self.stream, "isatty", lambda: False)())
        if use_rich:
            self._start_rich()

    @property
    def bounded(self) -> bool:
        return any(
            b is not None for b in (self.total_env_steps, self.total_iterations, self.total_seconds)
        )

    def _start_rich(self) -> None:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return  # the plain lines it is
        columns: list[Any] = [TextColumn("iter {task.fields[iteration]:>4}")]
        if self.total_env_steps is not None:
            columns.append(BarColumn())
        columns += [
            TextColumn("{task.completed:>9,.0f} env steps"),
            TextColumn("return {task.fields[ret]:>8}"),
            TextColumn("{task.fields[speed]:>7,.0f} steps/s"),
            TimeElapsedColumn(),
        ]
        if self.bounded:
            columns.append(TextColumn("ETA {task.fields[eta]}"))
        self._progress = Progress(*columns, console=Console(file=self.stream))
        self._task = self._progress.add_task(
            "train",
            total=self.total_env_steps,
            completed=self.start_env_steps,
            iteration=self.start_iteration,
            ret="nan",
            speed=0.0,
            eta="-",
        )
        self._progress.start()

    def eta_s(self, *, env_steps: int, iteration: int, now: float) -> float | None:
        """Seconds left until the first bounded stop criterion (see estimate_eta_s)."""
        done = []
        if self.total_env_steps is not None:
            done.append(
                (env_steps - self.start_env_steps, self.total_env_steps - self.start_env_steps)
            )
        if self.total_iterations is not None:
            done.append(
                (iteration - self.start_iteration, self.total_iterations - self.start_iteration)
            )
        left = None if self.total_seconds is None else self.total_seconds - (now - self._start_time)
        return estimate_eta_s(elapsed_s=now - self._created, done=done, seconds_left=left)

    def update(self, result: Mapping[str, Any]) -> None:
        now = time.perf_counter()
        steps = int(result.get("num_env_steps_sampled_lifetime", 0))
        iteration = int(result.get("training_iteration", 0))
        if self._progress is None and (iteration - self.start_iteration) % self.every:
            return  # plain lines: one per `every` iterations
        speed = (steps - self._last_steps) / max(now - self._last_time, 1e-9)
        self._last_time, self._last_steps = now, steps
        ret = result.get("env_runners", {}).get("episode_return_mean", math.nan)
        ret_text = f"{ret:.2f}" if isinstance(ret, numbers.Real) else str(ret)
        eta = format_eta(self.eta_s(env_steps=steps, iteration=iteration, now=now))
        if self._progress is not None:
            self._progress.update(
                self._task, completed=steps, iteration=iteration, ret=ret_text, speed=speed, eta=eta
            )
            return
        total = f"/{self.total_env_steps:,}" if self.total_env_steps is not None else ""
        self.stream.write(
            f"iter {iteration:>4}  env steps {steps:>9,}{total}  "
            f"episode_return_mean {ret_text:>8}  {speed:>7,.0f} env steps/s"
            + (f"  ETA {eta}" if self.bounded else "")
            + "\n"
        )
        self.stream.flush()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
