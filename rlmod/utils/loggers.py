"""Result loggers: each iteration's result dict to CSV, JSONL and TensorBoard (the progress
bar, `ProgressBar`, lives in `rlmod.utils.progress` and is re-exported here).

Used by `rlmod train` (and anyone with a loop over `algo.train()`); they read result dicts
only, never the Algorithm. TensorBoard and rich are optional and imported lazily.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from rlmod.utils.progress import ProgressBar as ProgressBar  # re-exported

logger = logging.getLogger(__name__)


PROGRESS_CSV = "progress.csv"
RESULT_JSONL = "result.jsonl"
PARAMS_JSON = "params.json"


def flatten_result(result: Mapping[str, Any], *, sep: str = "/") -> dict[str, Any]:
    """Nested dicts to one level: `{"env_runners": {"x": 1}}` -> `{"env_runners/x": 1}`.

    Example:
        >>> flatten_result({"a": {"b": 1, "c": {"d": 2.0}}, "e": "x"})
        {'a/b': 1, 'a/c/d': 2.0, 'e': 'x'}
    """
    flat: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, Mapping):
            for sub, v in flatten_result(value, sep=sep).items():
                flat[f"{key}{sep}{sub}"] = v
        else:
            flat[str(key)] = value
    return flat


def _as_number(value: Any) -> float | int | None:
    """The value as a Python int/float if it is a real number (numpy and 0-d tensors too)."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def to_jsonable(value: Any) -> Any:
    """A copy of `value` that `json.dumps(..., allow_nan=False)` accepts: NaN and inf become
    None, numpy values plain ones, anything else unknown its repr.

    Example:
        >>> to_jsonable({"r": float("nan"), "n": [1, 2.5], 3: (True, None)})
        {'r': None, 'n': [1, 2.5], '3': [True, None]}
    """
    if value is None or isinstance(value, bool | str):
        return value
    number = _as_number(value)
    if number is not None:
        return None if isinstance(number, float) and not math.isfinite(number) else number
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays, tensors
        return to_jsonable(value.tolist())
    return repr(value)


class CSVLogger:
    """Writes the numeric entries of each flattened result as one row of `progress.csv`.

    The header comes from the first row. A key that first appears later (an evaluation
    result, a new module) extends the header: the file is rewritten once with the new
    column, earlier rows leaving it empty (into a temporary file that then replaces it, so
    an interrupted rewrite loses nothing). With `append=True` an existing file is continued
    (a resumed run), its header and rows kept.
    """

    def __init__(self, path: str | Path, *, append: bool = False) -> None:
        self.path = Path(path)
        self._fields: list[str] = []
        self._file: IO[str] | None = None
        self._writer: csv.DictWriter | None = None
        self._keep_old = append and self.path.is_file()
        if self._keep_old:
            with self.path.open(newline="") as f:
                self._fields = next(csv.reader(f), [])

    def log(self, result: Mapping[str, Any]) -> None:
        row = {}
        for key, value in flatten_result(result).items():
            number = _as_number(value)
            if number is not None:
                row[key] = number
        known = set(self._fields)
        new = [k for k in row if k not in known]
        if self._writer is None or new:
            self._reopen(self._fields + new)
        assert self._writer is not None and self._file is not None
        self._writer.writerow(row)
        self._file.flush()

    def _reopen(self, fields: list[str]) -> None:
        if self._file is not None:
            self._file.close()
        if self._keep_old and fields == self._fields:  # continue as it is
            self._file = self.path.open("a", newline="")
        else:  # a new file, or a wider header: rewrite it with the rows written so far
            old_rows: list[dict[str, str]] = []
            if self._keep_old:
                with self.path.open(newline="") as f:
                    old_rows = list(csv.DictReader(f))
            tmp = self.path.with_name(self.path.name + ".tmp")
            with tmp.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields, restval="")
                writer.writeheader()
                writer.writerows(old_rows)
            os.replace(tmp, self.path)
            self._file = self.path.open("a", newline="")
        self._fields = fields
        self._keep_old = True  # from now on the file holds this run's rows
        self._writer = csv.DictWriter(self._file, fieldnames=fields, restval="")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class JsonlLogger:
    """Writes each whole result as one JSON line of `result.jsonl` (NaN as null); with
    `append=True` after the lines already there (a resumed run)."""

    def __init__(self, path: str | Path, *, append: bool = False) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = self.path.open("a" if append else "w")

    def log(self, result: Mapping[str, Any]) -> None:
        assert self._file is not None, "JsonlLogger.log() after close()"
        self._file.write(json.dumps(to_jsonable(result), allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardLogger:
    """Writes every numeric entry of each result as a TensorBoard scalar.

    The x-axis is `num_env_steps_sampled_lifetime`, so runs with different batch sizes
    compare. Without the `tensorboard` package it warns once and writes nothing.
    """

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self._writer: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            logger.warning(
                "tensorboard is not installed, so no TensorBoard logs are written to %s "
                "(progress.csv and result.jsonl still are); pip install 'rlmod[logging]'.",
                self.log_dir,
            )
            return
        self._writer = SummaryWriter(log_dir=str(self.log_dir))

    @property
    def enabled(self) -> bool:
        return self._writer is not None

    def log(self, result: Mapping[str, Any]) -> None:
        if self._writer is None:
            return
        step = int(
            result.get("num_env_steps_sampled_lifetime", result.get("training_iteration", 0))
        )
        for key, value in flatten_result(result).items():
            number = _as_number(value)
            if number is not None and math.isfinite(number):  # NaN: no episode ended yet
                self._writer.add_scalar(key, number, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def config_to_jsonable(config: Any) -> dict[str, Any]:
    """`config.to_dict()`; if a setting cannot be stored as JSON (a lambda, a local class),
    the others still are, that one as its repr, and a warning names it."""
    try:
        return config.to_dict()
    except ValueError:
        pass
    from rlmod.algorithms.algorithm_config import dict_key

    out: dict[str, Any] = {}
    skipped: list[str] = []
    for name in config.settings():
        probe = type(config)()  # fresh defaults are JSON-able; test this one setting alone
        key = dict_key(name)  # as to_dict() names it
        try:
            setattr(probe, name, vars(config).get(name, getattr(config, name)))  # raw value
            out[key] = probe.to_dict()[key]
        except (ValueError, TypeError):
            out[key] = {"__repr__": repr(getattr(config, name))}
            skipped.append(name)
    logger.warning(
        "The settings %s cannot be stored as JSON (a lambda or local function/class?), so "
        "params.json holds only their repr and cannot rebuild this config; define them at "
        "module level to fix this.",
        skipped,
    )
    return out


def write_params(run_dir: str | Path, config: Any) -> Path:
    """Writes `config` as `params.json` in `run_dir`; returns the file's path."""
    path = Path(run_dir) / PARAMS_JSON
    path.write_text(
        json.dumps(
            to_jsonable(config_to_jsonable(config)), indent=2, sort_keys=True, allow_nan=False
        )
        + "\n"
    )
    return path


class RunLogger:
    """All of a run's logs in one directory: params.json, progress.csv, result.jsonl and
    TensorBoard event files.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d, RunLogger(d, tensorboard=False) as run:
        ...     run.log({"training_iteration": 1, "env_runners": {"episode_return_mean": 9.5}})
        ...     print(open(f"{d}/progress.csv").read().splitlines())
        ['training_iteration,env_runners/episode_return_mean', '1,9.5']
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        config: Any = None,
        tensorboard: bool = True,
        trackers: Sequence[str] = (),
        append: bool = False,
    ) -> None:
        """`trackers`: names in `rlmod.utils.trackers.TRACKERS` ("wandb", "mlflow") to log
        to as well; each gets the config once (as params.json holds it). `append`: continue
        the run dir's progress.csv and result.jsonl (a run resumed in place); its
        params.json is kept."""
        from rlmod.utils.trackers import TRACKERS

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if config is not None and not (append and (self.run_dir / PARAMS_JSON).is_file()):
            write_params(self.run_dir, config)
        self._loggers: list[Any] = [
            CSVLogger(self.run_dir / PROGRESS_CSV, append=append),
            JsonlLogger(self.run_dir / RESULT_JSONL, append=append),
        ]
        if tensorboard:
            tb = TensorBoardLogger(self.run_dir)
            if tb.enabled:
                self._loggers.append(tb)
        params = to_jsonable(config_to_jsonable(config)) if config is not None else {}
        try:
            for name in trackers:
                self._loggers.append(TRACKERS[name](self.run_dir, params=params))
        except BaseException:
            self.close()  # the ones already open
            raise

    def log(self, result: Mapping[str, Any]) -> None:
        for one in self._loggers:
            one.log(result)

    def log_checkpoint(self, path: str | Path, *, alias: str) -> None:
        """Hands a checkpoint to the trackers that store artifacts (W&B, MLflow)."""
        for one in self._loggers:
            if hasattr(one, "log_checkpoint"):
                one.log_checkpoint(Path(path), alias=alias)

    def close(self) -> None:
        for one in self._loggers:
            one.close()

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
