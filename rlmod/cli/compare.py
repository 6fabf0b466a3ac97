"""`rlmod compare RUN_DIR...`: a results table of runs and groups of runs (the seeds of one
setting): final and best return, steps and time to a threshold, mean +- std over runs.

Uses `rlmod.cli.runs` to read progress.csv; plain text, no third-party package.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path
from typing import Any

from rlmod.cli import arguments as a
from rlmod.cli.errors import EXIT_OK
from rlmod.cli.runs import EVAL_RETURN_KEY, RETURN_KEY, STEPS_KEY, TIME_KEY, Group, Run


def add_parser(commands: Any) -> None:
    compare = commands.add_parser(
        "compare",
        help="Print a results table of runs (final and best return, steps to a threshold).",
        description="One row per RUN_DIR: a run dir, or a directory of run dirs (e.g. what "
        "rlmod train --seeds makes) whose runs are one group, shown as mean +- std over "
        "them.",
    )
    compare.set_defaults(command="compare", run=run)
    compare.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR")
    compare.add_argument(
        "--metric",
        default=RETURN_KEY,
        help=f"The progress.csv column to compare (default: {RETURN_KEY}; "
        f"evaluation: {EVAL_RETURN_KEY}).",
    )
    compare.add_argument(
        "--threshold",
        type=a.finite(),
        metavar="R",
        help="Also show the env steps and seconds until the metric first reached R.",
    )
    compare.add_argument(
        "--per-run", action="store_true", help="Also show one row per run of each group."
    )


def run(args: argparse.Namespace) -> int:
    from rlmod.cli.runs import read_groups

    print_table(
        read_groups(args.runs), metric=args.metric, threshold=args.threshold, per_run=args.per_run
    )
    return EXIT_OK


def run_stats(run: Run, metric: str, threshold: float | None) -> dict[str, float]:
    """One run's numbers: final and best of `metric`, env steps and seconds to the
    threshold (NaN if never reached), total env steps and seconds."""
    steps, values = run.points(metric)
    has_time = TIME_KEY in run.columns
    times = run.points(metric, x=TIME_KEY)[0] if has_time else [math.nan] * len(values)
    out = {
        "final": values[-1] if values else math.nan,
        "best": max(values, default=math.nan),
        "steps": max(run.column(STEPS_KEY), default=math.nan),
        "time": max(run.column(TIME_KEY), default=math.nan) if has_time else math.nan,
        "steps_to": math.nan,
        "time_to": math.nan,
    }
    if threshold is not None:
        for i, value in enumerate(values):
            if value >= threshold:
                out["steps_to"], out["time_to"] = steps[i], times[i]
                break
    return out


def _mean_std(values: list[float], fmt: str) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(statistics.mean(values), fmt)} +- {format(statistics.stdev(values), fmt)}"


def table_rows(
    groups: list[Group], *, metric: str, threshold: float | None, per_run: bool
) -> list[list[str]]:
    """Header and rows of the table."""
    header = ["run", "runs", "final", "best", "env steps", "time s"]
    if threshold is not None:
        header[4:4] = [f"steps to {threshold:g}", f"time to {threshold:g}", "reached"]
    rows = [header]

    def row(label: str, stats: list[dict[str, float]]) -> list[str]:
        cells = [
            label,
            str(len(stats)),
            _mean_std([s["final"] for s in stats], ".2f"),
            _mean_std([s["best"] for s in stats], ".2f"),
            _mean_std([s["steps"] for s in stats], ",.0f"),
            _mean_std([s["time"] for s in stats], ".1f"),
        ]
        if threshold is not None:
            reached = sum(not math.isnan(s["steps_to"]) for s in stats)
            cells[4:4] = [
                _mean_std([s["steps_to"] for s in stats], ",.0f"),
                _mean_std([s["time_to"] for s in stats], ".1f"),
                f"{reached}/{len(stats)}",
            ]
        return cells

    for group in groups:
        stats = [run_stats(r, metric, threshold) for r in group.runs]
        rows.append(row(group.label, stats))
        if per_run and len(group.runs) > 1:
            rows += [row(f"  {r.path.name}", [s]) for r, s in zip(group.runs, stats, strict=True)]
    return rows


def print_table(
    groups: list[Group],
    *,
    metric: str = RETURN_KEY,
    threshold: float | None = None,
    per_run: bool = False,
) -> None:
    rows = table_rows(groups, metric=metric, threshold=threshold, per_run=per_run)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"metric: {metric}")
    for r in rows:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
