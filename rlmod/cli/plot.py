"""`rlmod plot RUN_DIR... --output curves.png`: return against env steps (or wall time) for
runs and groups of runs, the mean as a line and the spread (min to max over a group's runs)
as a band, into a PNG, SVG or PDF.

Uses `rlmod.cli.runs` to read progress.csv and matplotlib (the optional `plot` extra:
`pip install 'rlmod[plot]'`), imported only here.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from rlmod.cli.errors import EXIT_OK, CLIError
from rlmod.cli.runs import EVAL_RETURN_KEY, RETURN_KEY, STEPS_KEY, TIME_KEY, Group

X_AXES = {"steps": (STEPS_KEY, "env steps"), "time": (TIME_KEY, "wall time (s)")}


def add_parser(commands: Any) -> None:
    plot = commands.add_parser(
        "plot",
        help="Plot return curves of runs into an image (needs matplotlib).",
        description="One curve per RUN_DIR: a run dir, or a directory of run dirs (e.g. what "
        "rlmod train --seeds makes) drawn as their mean with a band from min to max. Needs "
        "matplotlib: pip install 'rlmod[plot]'.",
    )
    plot.set_defaults(command="plot", run=run)
    plot.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR")
    plot.add_argument(
        "--output",
        "-o",
        type=Path,
        default=Path("curves.png"),
        help="The image file; its suffix picks the format (.png, .svg, .pdf). Default: curves.png.",
    )
    plot.add_argument(
        "--metric",
        default=RETURN_KEY,
        help=f"The progress.csv column on the y axis (default: {RETURN_KEY}; evaluation: "
        f"{EVAL_RETURN_KEY}).",
    )
    plot.add_argument(
        "--x", choices=sorted(X_AXES), default="steps", help="The x axis (default: steps)."
    )
    plot.add_argument("--title", help="The figure's title (default: the metric).")


def curve(
    group: Group, metric: str, x_key: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A group's (x, mean, low, high): each run's values interpolated onto a common x grid
    up to where the shortest run ends (one run: its own points)."""
    points = [
        (np.asarray(xs), np.asarray(ys))
        for xs, ys in (r.points(metric, x=x_key) for r in group.runs)
        if xs
    ]
    if not points:
        raise CLIError(f"{group.label}: no values of {metric!r} to plot yet.")
    if len(points) == 1:
        xs, ys = points[0]
        return xs, ys, ys, ys
    end = min(xs[-1] for xs, _ in points)
    start = max(xs[0] for xs, _ in points)
    grid = np.unique(np.concatenate([xs[(xs >= start) & (xs <= end)] for xs, _ in points]))
    if grid.size == 0:
        grid = np.asarray([end])
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in points])
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError(
            "rlmod plot needs matplotlib: pip install 'rlmod[plot]' (or pip install matplotlib)."
        ) from None
    return plt


def draw(
    groups: list[Group], *, metric: str = RETURN_KEY, x: str = "steps", title: str = ""
) -> Any:
    """A matplotlib Figure of the groups' curves (the caller saves and closes it)."""
    plt = _pyplot()
    x_key, x_label = X_AXES[x]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for group in groups:
        xs, mean, low, high = curve(group, metric, x_key)
        label = group.label if len(group.runs) == 1 else f"{group.label} ({len(group.runs)} runs)"
        (line,) = ax.plot(xs, mean, label=label)
        if len(group.runs) > 1:
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(x_label)
    ax.set_ylabel(metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def run(args: argparse.Namespace) -> int:
    from rlmod.cli.runs import read_groups

    if args.output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise CLIError(f"--output {args.output}: use a .png, .svg or .pdf file name.")
    plt = _pyplot()
    groups = read_groups(args.runs)
    fig = draw(groups, metric=args.metric, x=args.x, title=args.title or "")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output)
    plt.close(fig)
    print(
        f"Wrote {args.output} ({len(groups)} curve(s) of {args.metric} against {X_AXES[args.x][1]})."
    )
    return EXIT_OK
