"""Videos (rlmod/cli/videos.py, rlmod/algorithms/evaluation.py): `rlmod train --video-every N`
records greedy episodes during training, `rlmod evaluate --video-dir` after; a missing
package is one line naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlmod.cli import main

SMALL = '{"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1}'


def test_video_every_records_greedy_episodes_during_training(tmp_path: Path) -> None:
    pytest.importorskip("moviepy")
    pytest.importorskip("pygame")
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable, "-m", "rlmod.cli", "train", "--env", "CartPole-v1",
            "--stop-iters", "3", "--video-every", "2", "--no-tensorboard", "--seed", "0",
            "--config", SMALL, "--run-dir", str(run_dir),
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    videos = sorted(p.relative_to(run_dir / "videos") for p in run_dir.glob("videos/*/*.mp4"))
    # Every 2 iterations, and after the last one.
    assert [str(p.parent) for p in videos] == ["iteration_000002", "iteration_000003"]
    assert all((run_dir / "videos" / p).stat().st_size > 1000 for p in videos)


def test_video_every_without_moviepy_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "moviepy", None)  # import moviepy -> ImportError
    code = main(
        [
            "train", "--env", "CartPole-v1", "--stop-iters", "1", "--video-every", "1",
            "--config", SMALL, "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    assert code == 2
    assert "--video-every needs moviepy to write videos: pip install 'rlmod[video]'" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "run" / "progress.csv").exists()


def test_evaluate_without_the_renderers_package_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: a traceback ending in gymnasium's DependencyNotInstalled (pygame)."""
    pytest.importorskip("moviepy")
    assert main(
        [
            "train", "--env", "CartPole-v1", "--stop-iters", "1", "--no-tensorboard",
            "--config", SMALL, "--run-dir", str(tmp_path / "run"),
        ]
    ) == 0  # fmt: skip
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "pygame", None)  # import pygame -> ImportError
    code = main(
        [
            "evaluate", str(tmp_path / "run"), "--episodes", "1", "--render", "rgb_array",
            "--video-dir", str(tmp_path / "videos"),
        ]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "rendering 'CartPole-v1' needs a package" in err and "pygame" in err
    assert len(err.strip().splitlines()) == 1
