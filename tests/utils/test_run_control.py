"""How `rlmod train` starts and ends a run (rlmod.utils.run_control), without the CLI: which
run dirs are refused (a file at or above it, a used one: each named with its fix), default
run dir names (sanitized, unique within a second), SIGTERM as Ctrl-C sent to this very
process (once; ignored while finishing; the previous handler restored; a no-op off the
main thread), the stop-reward rule and the summary's lines.

`rlmod train` end to end (a real SIGTERM to a child process included) is tested in
tests/test_cli.py.
"""

from __future__ import annotations

import math
import os
import signal
import threading
from pathlib import Path

import pytest

from rlmod.utils import run_control
from rlmod.utils.run_control import (
    SigtermAsInterrupt,
    Terminated,
    check_run_dir,
    default_run_dir,
    format_summary,
    make_default_run_dir,
    reward_reached,
)


def test_a_new_or_empty_run_dir_passes(tmp_path: Path):
    check_run_dir(tmp_path / "new" / "deeper")
    check_run_dir(tmp_path)
    (tmp_path / "checkpoint_000001").mkdir()  # other content: not a run's logs
    check_run_dir(tmp_path)


def test_a_file_at_or_above_the_run_dir_is_refused(tmp_path: Path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match=r"--run-dir .*f: .*f is a file, not a directory"):
        check_run_dir(tmp_path / "f")
    with pytest.raises(ValueError, match=r"--run-dir .*f/sub: .*/f is a file"):
        check_run_dir(tmp_path / "f" / "sub")


@pytest.mark.parametrize("log", ["progress.csv", "result.jsonl", "params.json"])
def test_a_run_dir_with_a_runs_logs_is_refused_with_resume_as_the_fix(tmp_path: Path, log: str):
    (tmp_path / log).write_text("")
    with pytest.raises(
        ValueError, match=rf"already holds a run \({log}\); rlmod never overwrites.*--resume"
    ):
        check_run_dir(tmp_path)


class MyEnv:
    pass


def test_default_run_dir_names_are_sanitized(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(run_control.time, "strftime", lambda fmt: "20260101-000000")
    assert default_run_dir("PPO", "ALE/Pong v5") == Path("runs/PPO-ALE_Pong_v5-20260101-000000")
    assert default_run_dir("DQN", MyEnv) == Path("runs/DQN-MyEnv-20260101-000000")
    assert default_run_dir("SAC", MyEnv()) == Path("runs/SAC-MyEnv-20260101-000000")


def test_runs_started_in_the_same_second_get_their_own_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_control.time, "strftime", lambda fmt: "20260101-000000")
    dirs = [make_default_run_dir("PPO", "CartPole-v1") for _ in range(3)]
    assert [d.name for d in dirs] == [
        "PPO-CartPole-v1-20260101-000000",
        "PPO-CartPole-v1-20260101-000000-2",
        "PPO-CartPole-v1-20260101-000000-3",
    ]
    assert all((tmp_path / d).is_dir() for d in dirs)


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def test_the_first_sigterm_interrupts_later_ones_are_ignored(caplog: pytest.LogCaptureFixture):
    before = signal.getsignal(signal.SIGTERM)
    with SigtermAsInterrupt():
        with pytest.raises(Terminated):
            _sigterm()
        _sigterm()  # already stopping: logged, not raised
    assert "SIGTERM: already stopping" in caplog.text
    assert signal.getsignal(signal.SIGTERM) == before
    assert issubclass(Terminated, KeyboardInterrupt)  # no `except Exception` swallows it


def test_sigterm_while_finishing_does_not_interrupt():
    with SigtermAsInterrupt() as sigterm:
        sigterm.finishing()
        _sigterm()  # would raise Terminated without finishing()


def test_outside_the_main_thread_nothing_is_installed():
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def run() -> None:
        with SigtermAsInterrupt() as sigterm:
            seen.append(sigterm._installed)
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [False, before]


@pytest.mark.parametrize(
    ("ret", "stop_reward", "reached"),
    [(200.0, 200.0, True), (199.9, 200.0, False), (math.nan, -1e9, False), (500.0, None, False)],
)
def test_reward_reached(ret: float, stop_reward: float | None, reached: bool):
    result = {"env_runners": {"episode_return_mean": ret}}
    assert reward_reached(result, stop_reward) is reached
    assert reward_reached({}, stop_reward) is False


def test_the_summary_lines():
    result = {
        "training_iteration": 12,
        "num_env_steps_sampled_lifetime": 48_000,
        "env_runners": {"episode_return_mean": 187.456},
    }
    text = format_summary(
        "PPO on CartPole-v1",
        result,
        reason="the reward was reached",
        wall_s=12.34,
        run_dir=Path("runs/x"),
        window=100,
        checkpoint="runs/x/checkpoint_000012",
        stop_reward=150,
    )
    assert text.splitlines() == [
        "Done: PPO on CartPole-v1, stopped because the reward was reached.",
        "  iterations           12",
        "  env steps            48,000",
        "  episode_return_mean  187.46 (mean of the last 100 episodes)",
        "  wall time            12.3 s",
        "  stop reward 150      reached",
        "  logs                 runs/x/ (progress.csv, result.jsonl, params.json; "
        "tensorboard --logdir runs/x)",
        "  checkpoint           runs/x/checkpoint_000012",
    ]
    bare = format_summary(
        "DQN", {}, reason="", wall_s=0.0, run_dir=Path("r"), window=5, tensorboard=False
    )
    assert bare.splitlines()[0] == "Done: DQN, stopped because no result."
    assert "episode_return_mean  nan" in bare
    assert (
        bare.splitlines()[-1]
        == "  logs                 r/ (progress.csv, result.jsonl, params.json)"
    )
