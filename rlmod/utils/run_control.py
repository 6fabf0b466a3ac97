"""How `rlmod train` starts and ends a run: a run dir that is new, SIGTERM as Ctrl-C, and
the summary.

Used by `rlmod.cli`. A run dir is checked before anything is built (a used one or a file is
refused; rlmod never overwrites either), and while training, SIGTERM, what `kill`,
`docker stop`, Kubernetes and Slurm send, stops the run the way Ctrl-C does: the loop ends,
the final checkpoint is written and the summary printed.
"""

from __future__ import annotations

import logging
import math
import re
import signal
import threading
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlmod.utils.loggers import PARAMS_JSON, PROGRESS_CSV, RESULT_JSONL

logger = logging.getLogger(__name__)


def check_run_dir(given: Path) -> None:
    """Raises ValueError (naming --run-dir and the fix) if `given` cannot hold a new run:
    it, or a directory above it, is a file; or it already holds a run's logs."""
    for path in (given, *given.parents):
        if path.exists() and not path.is_dir():
            raise ValueError(
                f"--run-dir {given}: {path} is a file, not a directory; pass a new directory "
                "for the run (rlmod creates it) or an empty one."
            )
    taken = [n for n in (PROGRESS_CSV, RESULT_JSONL, PARAMS_JSON) if (given / n).exists()]
    if taken:
        raise ValueError(
            f"--run-dir {given} already holds a run ({taken[0]}); rlmod never overwrites one. "
            f"Pass a new --run-dir, or continue it with --resume {given} (in place) or "
            f"--resume {given} --run-dir NEW_DIR."
        )


def default_run_dir(algo: str, env: Any) -> Path:
    """runs/ALGO-ENV-YYYYmmdd-HHMMSS (not created)."""
    name = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))
    return Path("runs") / f"{algo}-{safe}-{time.strftime('%Y%m%d-%H%M%S')}"


def make_default_run_dir(algo: str, env: Any) -> Path:
    """A new default run dir, made here, atomically: runs started in the same second get
    their own (`-2`, `-3`, ...)."""
    base = default_run_dir(algo, env)
    base.parent.mkdir(parents=True, exist_ok=True)
    run_dir, i = base, 1
    while True:
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            i += 1
            run_dir = base.with_name(f"{base.name}-{i}")


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stop as after Ctrl-C. A KeyboardInterrupt, so that no
    `except Exception` (in an env guard, a callback) swallows it and every cleanup that
    Ctrl-C runs runs."""


class SigtermAsInterrupt:
    """While inside, the first SIGTERM raises `Terminated` in the main thread (as Ctrl-C
    raises KeyboardInterrupt there); after `finishing()`, or after the first, SIGTERM is
    logged and ignored so that the final checkpoint is written whole (SIGKILL still stops
    it). The previous handler is restored on exit. Outside the main thread (where Python
    cannot set handlers) it does nothing.

    Example:
        >>> with SigtermAsInterrupt() as sigterm:
        ...     try:
        ...         pass  # the training loop
        ...     finally:
        ...         sigterm.finishing()  # the final save
    """

    def __init__(self) -> None:
        self._previous: Any = None
        self._installed = False
        self._raised = False
        self._finishing = False

    def finishing(self) -> None:
        """From here on, SIGTERM no longer interrupts (the run is writing its last files)."""
        self._finishing = True

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        if self._raised or self._finishing:
            logger.warning("SIGTERM: already stopping; writing the final checkpoint.")
            return
        self._raised = True
        raise Terminated

    def __enter__(self) -> SigtermAsInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            # None: a handler not set from Python; the default is the closest we can restore.
            signal.signal(
                signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous
            )
            self._installed = False


def reward_reached(result: Mapping[str, Any], stop_reward: float | None) -> bool:
    """Whether a stop reward was given and episode_return_mean reached it (NaN: no episode
    has ended yet)."""
    ret = result.get("env_runners", {}).get("episode_return_mean", math.nan)
    return stop_reward is not None and not math.isnan(ret) and ret >= stop_reward


def format_summary(
    what: str,
    result: Mapping[str, Any],
    *,
    reason: str,
    wall_s: float,
    run_dir: Path,
    window: int,
    checkpoint: str = "",
    stop_reward: float | None = None,
    tensorboard: bool = True,
    reached: bool | None = None,
    extra_lines: Sequence[str] = (),
) -> str:
    """What the run did, for the end of `rlmod train`: why it stopped, iterations, env
    steps, the smoothed return over `window` episodes, time, `extra_lines` (evaluation),
    logs and the last checkpoint. `reached` says whether the stop reward was reached (by
    default: the training return reached it)."""
    ret = result.get("env_runners", {}).get("episode_return_mean", math.nan)
    lines = [
        f"Done: {what}, stopped because {reason or 'no result'}.",
        f"  iterations           {result.get('training_iteration', 0)}",
        f"  env steps            {result.get('num_env_steps_sampled_lifetime', 0):,}",
        f"  episode_return_mean  {ret:.2f} (mean of the last {window} episodes)",
        f"  wall time            {wall_s:.1f} s",
    ]
    lines += extra_lines
    if stop_reward is not None:
        label = f"stop reward {stop_reward:g}"
        if reached is None:
            reached = reward_reached(result, stop_reward)
        lines.append(f"  {label:<21}{'reached' if reached else 'NOT reached'}")
    tb = f"; tensorboard --logdir {run_dir}" if tensorboard else ""
    lines.append(f"  logs                 {run_dir}/ (progress.csv, result.jsonl, params.json{tb})")
    if checkpoint:
        lines.append(f"  checkpoint           {checkpoint}")
    return "\n".join(lines)
