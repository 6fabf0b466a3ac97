"""Evaluation-driven training from the command line (rlmod/cli/train.py, evaluation.py):
--eval-every, --eval-episodes, --stop-on eval|train, --stop-window, RUN_DIR/best."""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlmod.cli import main
from rlmod.cli.evaluation import BestCheckpoint
from rlmod.cli.train import _overrides

SMALL = '{"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}'


def rlmod(*args: str | Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """The real `rlmod` entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "rlmod.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_eval_every_keeps_the_best_checkpoint_and_reports_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = rlmod(
        "train", "--env", "CartPole-v1", "--eval-every", "1", "--eval-episodes", "3",
        "--stop-iters", "3", "--seed", "0", "--no-tensorboard", "--config", SMALL,
        "--run-dir", run_dir,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    params = json.loads((run_dir / "params.json").read_text())
    assert params["evaluation_interval"] == 1 and params["evaluation_duration"] == 3
    assert params["evaluation_explore"] is False  # the CLI evaluates greedily
    with (run_dir / "progress.csv").open(newline="") as f:
        evals = [float(r["evaluation/env_runners/episode_return_mean"]) for r in csv.DictReader(f)]
    assert len(evals) == 3
    best = json.loads((run_dir / "best.json").read_text())
    assert best["evaluation_return_mean"] == max(evals)
    assert best["training_iteration"] == evals.index(max(evals)) + 1
    assert best["num_episodes"] >= 3  # 16 sub-envs may end a few more at once
    assert (
        "evaluation return" in out.stdout and f"best evaluation      {max(evals):.2f}" in out.stdout
    )
    assert str(run_dir / "best") in out.stdout
    evaluated = rlmod("evaluate", run_dir / "best", "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "episode_return_mean" in evaluated.stdout


def test_stop_on_eval_reads_the_evaluation_return(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = main(
        [
            "train", "--env", "CartPole-v1", "--stop-reward", "5", "--stop-on", "eval",
            "--eval-episodes", "2", "--stop-iters", "5", "--as-test", "--no-tensorboard",
            "--seed", "0", "--config", SMALL, "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr()
    # No --eval-every: --stop-on eval evaluates every iteration, and stops at the first.
    assert "the evaluation episode_return_mean reached --stop-reward 5" in out.out
    assert "iterations           1" in out.out
    assert re.search(r"stop reward 5 +reached", out.out)
    assert "Evaluating every 1 iteration(s) over 2 episodes" in out.err
    assert (tmp_path / "run" / "best" / "metadata.json").is_file()


def test_stop_on_train_does_not_read_the_evaluation(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A greedy evaluation above R does not stop a run told to read the training return."""
    code = main(
        [
            "train", "--env", "CartPole-v1", "--stop-reward", "1000", "--eval-every", "1",
            "--eval-episodes", "1", "--stop-iters", "2", "--as-test", "--no-tensorboard",
            "--seed", "0", "--config", SMALL, "--stop-window", "7",
            "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    assert code == 1  # --as-test: not reached
    out = capsys.readouterr().out
    assert "--stop-iters 2 iterations done" in out and "NOT reached" in out
    params = json.loads((tmp_path / "run" / "params.json").read_text())
    assert params["metrics_num_episodes_for_smoothing"] == 7


def _args(**kw: object) -> argparse.Namespace:
    base = {"eval_every": None, "eval_episodes": None, "stop_on": "train", "stop_window": None}
    return argparse.Namespace(**{**base, **kw})


def test_the_config_keeps_its_own_evaluation_choices() -> None:
    assert _overrides(_args(), {}) == {}
    assert _overrides(_args(stop_on="eval"), {}) == {
        "evaluation_interval": 1,
        "evaluation_explore": False,
    }
    # An interval and an explore choice from --config stay as they are.
    assert _overrides(_args(stop_on="eval"), {"evaluation_interval": 4}) == {}
    assert _overrides(_args(eval_every=2), {"evaluation_explore": True}) == {
        "evaluation_interval": 2
    }
    assert _overrides(_args(eval_every=2), {"evaluation_config": {"explore": True}}) == {
        "evaluation_interval": 2
    }


def test_best_checkpoint_is_replaced_only_by_a_better_evaluation(
    tmp_path: Path, cartpole_config: object
) -> None:
    algo = cartpole_config.build_algo()  # type: ignore[attr-defined]
    best = BestCheckpoint(tmp_path)

    def result(ret: float, iteration: int) -> dict:
        evaluation = {"env_runners": {"episode_return_mean": ret, "num_episodes": 2}}
        return {
            "evaluation": evaluation,
            "training_iteration": iteration,
            "num_env_steps_sampled_lifetime": 100 * iteration,
        }

    try:
        first = result(20.0, 1)
        best.update(algo, first)
        saved = (tmp_path / "best" / "metadata.json").stat().st_mtime_ns
        best.update(algo, first)  # the same evaluation again (kept in later results)
        best.update(algo, result(15.0, 2))  # worse
        assert (tmp_path / "best" / "metadata.json").stat().st_mtime_ns == saved
        assert json.loads((tmp_path / "best.json").read_text())["training_iteration"] == 1
        assert best.last is not None and best.last["training_iteration"] == 2
        best.update(algo, result(30.0, 3))
        assert json.loads((tmp_path / "best.json").read_text())["evaluation_return_mean"] == 30.0
    finally:
        algo.stop()
