"""Reading run dirs back for `rlmod plot` and `rlmod compare`: each run's progress.csv, and
runs grouped as they were given (a run dir, or a parent such as `--seeds` makes).

Used by `rlmod.cli.plot` and `rlmod.cli.compare`; reads files only, imports no torch.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from rlmod.cli.errors import CLIError

RETURN_KEY = "env_runners/episode_return_mean"
EVAL_RETURN_KEY = "evaluation/env_runners/episode_return_mean"
STEPS_KEY = "num_env_steps_sampled_lifetime"
TIME_KEY = "time_total_s"


@dataclass
class Run:
    """One run dir's progress.csv as columns of floats (NaN where empty)."""

    path: Path
    columns: dict[str, list[float]] = field(default_factory=dict)

    def column(self, key: str) -> list[float]:
        if key not in self.columns:
            known = ", ".join(k for k in self.columns if "episode_return" in k)
            raise CLIError(f"{self.path / 'progress.csv'} has no column {key!r} (has: {known}).")
        return self.columns[key]

    def points(self, key: str, x: str = STEPS_KEY) -> tuple[list[float], list[float]]:
        """(x, value) of the rows where `key` has a value."""
        xs, ys = self.column(x), self.column(key)
        pairs = [(a, b) for a, b in zip(xs, ys, strict=True) if not math.isnan(b)]
        return [a for a, _ in pairs], [b for _, b in pairs]


@dataclass
class Group:
    """Runs compared as one (the seeds of one setting); `label` names it in plots and tables."""

    label: str
    runs: list[Run]


def read_run(path: Path) -> Run:
    with (path / "progress.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    columns: dict[str, list[float]] = {}
    for key in rows[0] if rows else []:
        columns[key] = [_number(r.get(key)) for r in rows]
    return Run(path, columns)


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "", "null") else math.nan
    except ValueError:
        return math.nan


def read_groups(paths: list[Path]) -> list[Group]:
    """One group per path: a run dir alone, or the run dirs right inside it."""
    groups = []
    for path in paths:
        if (path / "progress.csv").is_file():
            groups.append(Group(path.name or str(path), [read_run(path)]))
            continue
        inside = sorted(p for p in path.glob("*/progress.csv")) if path.is_dir() else []
        if not inside:
            raise CLIError(
                f"{path} is neither a run dir (no progress.csv) nor a directory of run dirs "
                "(such as rlmod train --seeds makes)."
            )
        groups.append(Group(path.name or str(path), [read_run(p.parent) for p in inside]))
    return groups
