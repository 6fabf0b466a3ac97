"""`rlmod train --resume` (rlmod/cli/resume.py) through the real entry point: a run dir
continued in place, --stop-iters counting totals, progress after a resume."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

SMALL = '{"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}'


def rlmod(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real `rlmod` entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "rlmod.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _iterations(run: Path) -> list[str]:
    with (run / "progress.csv").open(newline="") as f:
        return [row["training_iteration"] for row in csv.DictReader(f)]


def test_resume_of_a_run_dir_appends_in_place_and_counts_totals(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = rlmod(
        "train", "--env", "CartPole-v1", "--stop-iters", "3", "--seed", "1", "--config", SMALL,
        "--no-tensorboard", "--checkpoint-every", "2", "--run-dir", run,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    # as if killed -9 after iteration 3's row but before its checkpoint: resume from 2
    (run / "checkpoints" / "checkpoint_000003" / "metadata.json").unlink()

    refused = rlmod("train", "--resume", run, "--stop-iters", "2")
    assert refused.returncode == 2
    assert "--stop-iters 2 counts all iterations, the 2 restored included" in refused.stderr

    again = rlmod("train", "--resume", run, "--stop-iters", "5", "--no-tensorboard")
    assert again.returncode == 0, again.stderr
    assert f"logs appended to {run}" in again.stderr
    assert _iterations(run) == ["1", "2", "3", "4", "5"]  # iteration 3's old row replaced
    jsonl = (run / "result.jsonl").read_text().splitlines()
    assert [json.loads(line)["training_iteration"] for line in jsonl] == [1, 2, 3, 4, 5]
    assert (run / "checkpoints" / "checkpoint_000005").is_dir()
    assert not list(run.glob("*.tmp"))
    # progress lines (no TTY here): this run's iterations, with an ETA (throughput from the
    # restored counters: tests/utils/test_loggers.py)
    lines = [ln for ln in again.stderr.splitlines() if ln.startswith("iter ")]
    assert [ln.split()[1] for ln in lines] == ["3", "4", "5"]
    assert all(" ETA " in ln for ln in lines)


def test_resume_into_a_new_run_dir_leaves_the_old_one(tmp_path: Path) -> None:
    run, new = tmp_path / "run", tmp_path / "new"
    first = rlmod(
        "train", "--env", "CartPole-v1", "--stop-iters", "1", "--config", SMALL,
        "--no-tensorboard", "--progress-every", "2", "--run-dir", run,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert not re.search(r"^iter ", first.stderr, re.M)  # every 2: none for iteration 1
    out = rlmod("train", "--resume", run, "--stop-iters", "2", "--run-dir", new, "--no-tensorboard")
    assert out.returncode == 0, out.stderr
    assert _iterations(run) == ["1"] and _iterations(new) == ["2"]


def test_rows_after_the_checkpoint_and_cut_rows_are_dropped(tmp_path: Path) -> None:
    from rlmod.cli.resume import drop_rows_after

    (tmp_path / "progress.csv").write_text(
        "training_iteration,x\n1,0.5\n2,0.6\n3,0.7\n4,0."  # 4's row cut by a kill
    )
    (tmp_path / "result.jsonl").write_text(
        '{"training_iteration": 1}\n{"training_iteration": 2}\n{"training_iteration": 3}\n{"tr'
    )
    assert drop_rows_after(tmp_path, 2) == 2
    assert (tmp_path / "progress.csv").read_text() == "training_iteration,x\n1,0.5\n2,0.6\n"
    assert (tmp_path / "result.jsonl").read_text().count("\n") == 2
    assert not list(tmp_path.glob("*.tmp"))
