"""`rlmod train --resume`: where a resumed run writes, restoring the Algorithm, and what
its stop criteria count.

`--resume RUN_DIR` alone (or with `--run-dir RUN_DIR`) continues the run in place: its
progress.csv and result.jsonl get the new rows after the restored iteration's (rows a
killed run logged after its newest checkpoint are dropped first, by rewriting each file
into a temporary one that replaces it, so an interruption loses nothing), its checkpoints
go on in RUN_DIR/checkpoints. With `--run-dir NEW_DIR`, or when a checkpoint directory is
given, the resumed run writes to a new run dir. `--stop-iters` and `--stop-timesteps` count
totals, the restored ones included (as RLlib's and Tune's stop criteria do).

Used by `rlmod.cli.train`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path
from typing import Any

from rlmod.cli.errors import CLIError
from rlmod.utils.loggers import PROGRESS_CSV, RESULT_JSONL


def resumes_in_place(args: argparse.Namespace) -> bool:
    """Whether --resume names a run dir (not a checkpoint) and no other --run-dir is given."""
    if args.resume is None or not (args.resume / PROGRESS_CSV).is_file():
        return False
    return args.run_dir is None or args.run_dir.resolve() == args.resume.resolve()


def restore(args: argparse.Namespace, overrides_for: Any) -> Any:
    """The Algorithm restored from --resume; settings come from the checkpoint, the
    evaluation and window options (`overrides_for(stored_settings)`) go on top."""
    from rlmod.algorithms import Algorithm
    from rlmod.algorithms.algorithm import CONFIG_FILE
    from rlmod.cli.checkpoint_paths import checkpoint_path
    from rlmod.errors import CheckpointError
    from rlmod.utils.state_files import read_json

    given = [
        f
        for f, v in (("--config", args.config), ("--env", args.env), ("--seed", args.seed))
        if v is not None
    ]
    if given:
        raise CLIError(f"--resume takes its settings from the checkpoint; drop {given[0]}.")
    path = checkpoint_path(args.resume)
    try:
        stored = read_json(path / CONFIG_FILE).get("settings", {})
        overrides = overrides_for(stored if isinstance(stored, dict) else {})
        return Algorithm.from_checkpoint(path, trusted_modules=args.trust, **overrides)
    except (CheckpointError, ValueError, TypeError) as e:
        raise CLIError(str(e)) from None


def class_name(path: Path) -> str:
    """The algorithm name stored in a checkpoint's metadata (for messages)."""
    from rlmod.cli.checkpoint_paths import checkpoint_path
    from rlmod.utils import checkpoints

    meta = checkpoints.read_metadata(checkpoint_path(path))
    return str(meta["class"]).rsplit(":", 1)[-1]


def check_stop_counts(args: argparse.Namespace, *, iteration: int, env_steps: int) -> None:
    """Refuses stop counts the restored run has already reached, and says they are totals."""
    for flag, bound, done, unit in (
        ("--stop-iters", args.stop_iters, iteration, "iterations"),
        ("--stop-timesteps", args.stop_timesteps, env_steps, "env steps"),
    ):
        if bound is not None and bound <= done:
            raise CLIError(
                f"{flag} {bound} counts all {unit}, the {done:,} restored included, so the "
                f"run is already there; pass more than {done} (e.g. {flag} {done + bound} for "
                f"{bound:,} more)."
            )
    print(
        f"Restored at iteration {iteration} ({env_steps:,} env steps); --stop-iters and "
        "--stop-timesteps count totals, the restored ones included.",
        file=sys.stderr,
    )


def drop_rows_after(run_dir: Path, iteration: int) -> int:
    """Drops the rows of progress.csv and result.jsonl past `iteration` (logged after the
    checkpoint being resumed); returns how many rows of progress.csv went."""
    dropped = 0
    csv_path, jsonl_path = run_dir / PROGRESS_CSV, run_dir / RESULT_JSONL
    if csv_path.is_file():
        lines = csv_path.read_text().splitlines(keepends=True)
        header = next(csv.reader(lines[:1]), [])
        column = header.index("training_iteration") if "training_iteration" in header else None
        kept = lines[:1] + [line for line in lines[1:] if _csv_row_kept(line, column, iteration)]
        dropped = len(lines) - len(kept)
        if dropped:
            _replace(csv_path, "".join(kept))
    if jsonl_path.is_file():
        lines = jsonl_path.read_text().splitlines(keepends=True)
        kept = [ln for ln in lines if ln.endswith("\n") and _jsonl_iteration(ln) <= iteration]
        if len(kept) != len(lines):
            _replace(jsonl_path, "".join(kept))
    return dropped


def _csv_row_kept(line: str, column: int | None, iteration: int) -> bool:
    """A whole row (a killed run may leave the last one cut) of an iteration up to
    `iteration`."""
    if not line.endswith("\n"):
        return False
    if column is None:
        return True
    fields = next(csv.reader([line]), [])
    return len(fields) > column and _int(fields[column]) <= iteration


def _int(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("inf")  # not a row of a finished iteration


def _jsonl_iteration(line: str) -> float:
    try:
        return float(json.loads(line).get("training_iteration", 0))
    except (ValueError, AttributeError):
        return float("inf")


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
