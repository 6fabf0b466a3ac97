"""`rlmod train --seeds`, `rlmod compare` and `rlmod plot` (rlmod/cli/seeds.py, compare.py,
plot.py, runs.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlmod.cli import main
from rlmod.cli.compare import table_rows
from rlmod.cli.runs import read_groups
from rlmod.utils.loggers import RunLogger

SMALL = '{"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}'


def rlmod(*args: str | Path, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    """The real `rlmod` entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "rlmod.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _fake_run(path: Path, returns: list[float], *, steps: int = 100, secs: float = 2.0) -> None:
    """A run dir whose progress.csv holds `returns` at steps, 2 x steps, ... (what
    RunLogger writes after each train())."""
    with RunLogger(path, tensorboard=False) as run:
        for i, ret in enumerate(returns, start=1):
            run.log(
                {
                    "training_iteration": i,
                    "num_env_steps_sampled_lifetime": i * steps,
                    "time_total_s": i * secs,
                    "env_runners": {"episode_return_mean": ret},
                }
            )


def test_compare_shows_final_best_and_steps_to_a_threshold_over_seeds(tmp_path: Path) -> None:
    _fake_run(tmp_path / "ppo" / "seed_0", [10, 50, 40])  # reaches 45 at 200 steps, 4 s
    _fake_run(tmp_path / "ppo" / "seed_1", [20, 30, 60])  # at 300 steps, 6 s
    _fake_run(tmp_path / "dqn", [5, math.nan, 8])  # never
    rows = table_rows(
        read_groups([tmp_path / "ppo", tmp_path / "dqn"]),
        metric="env_runners/episode_return_mean",
        threshold=45,
        per_run=True,
    )
    header, ppo, seed_0, seed_1, dqn = rows
    assert header == [
        "run", "runs", "final", "best", "steps to 45", "time to 45", "reached", "env steps",
        "time s",
    ]  # fmt: skip
    assert ppo == ["ppo", "2", "50.00 +- 14.14", "55.00 +- 7.07", "250 +- 71", "5.0 +- 1.4",
                   "2/2", "300 +- 0", "6.0 +- 0.0"]  # fmt: skip
    assert seed_0[:5] == ["  seed_0", "1", "40.00", "50.00", "200"]
    assert seed_1[:5] == ["  seed_1", "1", "60.00", "60.00", "300"]
    assert dqn == ["dqn", "1", "8.00", "8.00", "-", "-", "0/1", "300", "6.0"]


def test_compare_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _fake_run(tmp_path / "a", [1, 2])
    assert main(["compare", str(tmp_path / "a"), "--threshold", "2"]) == 0
    out = capsys.readouterr().out
    assert "metric: env_runners/episode_return_mean" in out and "1/1" in out
    assert main(["compare", str(tmp_path / "nothing-here")]) == 2
    assert "neither a run dir" in capsys.readouterr().err


def test_plot_draws_each_group_over_its_data_range(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from rlmod.cli.plot import draw

    _fake_run(tmp_path / "g" / "seed_0", [10, 50, 40], steps=100)
    _fake_run(tmp_path / "g" / "seed_1", [20, 30, 60, 70], steps=100)
    _fake_run(tmp_path / "one", [-5, 90], steps=400)
    fig = draw(read_groups([tmp_path / "g", tmp_path / "one"]))
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["g (2 runs)", "one"]
    # The group: the mean of the two seeds up to where the shorter one ends.
    assert list(lines[0].get_xdata()) == [100, 200, 300]
    assert list(lines[0].get_ydata()) == [15, 40, 50]
    band = ax.collections[0].get_paths()[0].vertices  # min..max over the seeds
    assert band[:, 1].min() == 10 and band[:, 1].max() == 60
    x_low, x_high = ax.get_xlim()
    y_low, y_high = ax.get_ylim()
    assert x_low <= 100 and x_high >= 800 and y_low <= -5 and y_high >= 90
    assert ax.get_xlabel() == "env steps"


def test_plot_writes_an_image_through_the_entry_point(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _fake_run(tmp_path / "a", [1, 2, 3])
    out = rlmod("plot", tmp_path / "a", "--x", "time", "--output", tmp_path / "c.svg")
    assert out.returncode == 0, out.stderr
    svg = (tmp_path / "c.svg").read_text()
    assert svg.startswith("<?xml") and "wall time (s)" in svg


def test_plot_without_matplotlib_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    _fake_run(tmp_path / "a", [1.0])
    assert main(["plot", str(tmp_path / "a"), "-o", str(tmp_path / "c.png")]) == 2
    assert "pip install 'rlmod[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


def test_seeds_train_one_run_dir_each_and_print_their_table(tmp_path: Path) -> None:
    parent = tmp_path / "seeds"
    out = rlmod(
        "train", "--env", "CartPole-v1", "--seeds", "3", "4", "--stop-iters", "2",
        "--no-tensorboard", "--config", SMALL, "--run-dir", parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for seed in (3, 4):
        params = json.loads((parent / f"seed_{seed}" / "params.json").read_text())
        assert params["seed"] == seed
        assert list((parent / f"seed_{seed}" / "checkpoints").iterdir())
    assert "Runs of 2 seeds in" in out.stdout
    assert "  seed_3" in out.stdout and "  seed_4" in out.stdout
    curves = [r.column("env_runners/episode_return_mean") for r in read_groups([parent])[0].runs]
    assert curves[0] != curves[1]  # two seeds, two runs


def test_seed_workers_train_seeds_in_parallel_processes(tmp_path: Path) -> None:
    parent = tmp_path / "seeds"
    out = rlmod(
        "train", "--env", "CartPole-v1", "--seeds", "0", "1", "--seed-workers", "2",
        "--stop-iters", "1", "--no-tensorboard", "--config", SMALL, "--run-dir", parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for seed in (0, 1):
        log = (parent / f"seed_{seed}" / "train.log").read_text()
        assert f"with seed {seed}" in log and "Done: PPO on CartPole-v1" in log
    assert "2 at a time" in out.stderr and "  seed_1" in out.stdout


def test_seeds_refuse_a_repeated_seed_and_a_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["train", "--env", "CartPole-v1", "--seeds", "1", "1"]) == 2
    assert "a seed is repeated" in capsys.readouterr().err
    assert main(["train", "--seeds", "1", "--resume", str(tmp_path)]) == 2
    assert "does not go with --resume" in capsys.readouterr().err
    assert main(["train", "--env", "CartPole-v1", "--seed-workers", "2"]) == 2
    assert "pass --seeds too" in capsys.readouterr().err
