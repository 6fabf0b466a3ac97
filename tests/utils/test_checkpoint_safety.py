"""Checkpoints never lose data (issue 30): saves never delete what rlmod did not write,
keep_last_n prunes only the run's own checkpoints, a save killed between its two renames
is recovered, and a restore that fails changes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlmod.algorithms import Algorithm
from rlmod.algorithms.ppo import PPO, PPOConfig
from rlmod.errors import CheckpointError
from rlmod.utils import checkpoints


@pytest.fixture
def algo(cartpole_config: PPOConfig) -> PPO:
    algo = cartpole_config.build_algo()
    algo.train()
    yield algo
    algo.stop()


# ---------------------------------------------------------------- foreign directories
def test_save_refuses_a_non_empty_directory_that_is_not_a_checkpoint(
    algo: PPO, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('mine')")
    with pytest.raises(CheckpointError, match=r"not empty and is not an rlmod checkpoint"):
        algo.save_to_path(project)
    assert (project / "train.py").read_text() == "print('mine')"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]  # nothing left beside it


def test_save_to_the_current_directory_keeps_the_users_files(
    algo: PPO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text("x = 1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="not an rlmod checkpoint"):
        algo.save_to_path(".")
    assert (tmp_path / "train.py").read_text() == "x = 1"


def test_save_refuses_a_file(algo: PPO, tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("mine")
    with pytest.raises(CheckpointError, match="it is a file"):
        algo.save_to_path(tmp_path / "notes")
    assert (tmp_path / "notes").read_text() == "mine"


def test_save_replaces_its_own_checkpoint_and_fills_an_empty_directory(
    algo: PPO, tmp_path: Path
) -> None:
    (tmp_path / "ck").mkdir()
    algo.save_to_path(tmp_path / "ck")
    algo.train()
    algo.save_to_path(tmp_path / "ck")  # an rlmod checkpoint: replaced
    assert Algorithm.from_checkpoint(tmp_path / "ck").iteration == 2
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_periodic_checkpoints_never_touch_a_foreign_directory_of_the_same_name(
    cartpole_config: PPOConfig, tmp_path: Path
) -> None:
    directory = tmp_path / "ck"
    (directory / "checkpoint_000001").mkdir(parents=True)
    (directory / "checkpoint_000001" / "data.csv").write_text("1,2")
    algo = cartpole_config.checkpointing(
        checkpoint_frequency=1, checkpoint_dir=directory, keep_last_n=1
    ).build_algo()
    path = algo.train()["checkpoint_path"]
    algo.train()
    algo.stop()
    assert Path(path).name == "checkpoint_000001_2"
    assert (directory / "checkpoint_000001" / "data.csv").read_text() == "1,2"
    assert sorted(p.name for p in directory.iterdir()) == ["checkpoint_000001", "checkpoint_000002"]


def test_a_checkpoint_dir_that_is_a_file_is_refused(
    cartpole_config: PPOConfig, tmp_path: Path
) -> None:
    (tmp_path / "ck").write_text("mine")
    algo = cartpole_config.checkpointing(
        checkpoint_frequency=1, checkpoint_dir=tmp_path / "ck"
    ).build_algo()
    with pytest.raises(CheckpointError, match="checkpoint_dir .* is a file"):
        algo.train()
    algo.stop()
    assert (tmp_path / "ck").read_text() == "mine"


# ---------------------------------------------------------------- keep_last_n across runs
def test_keep_last_n_prunes_only_this_runs_checkpoints(
    cartpole_config: PPOConfig, tmp_path: Path
) -> None:
    config = cartpole_config.checkpointing(
        checkpoint_frequency=1, checkpoint_dir=tmp_path, keep_last_n=1
    )
    first = config.build_algo()
    paths = [first.train()["checkpoint_path"] for _ in range(3)]
    first.stop()
    assert [Path(p).name for p in paths] == [
        "checkpoint_000001",
        "checkpoint_000002",
        "checkpoint_000003",
    ]
    earlier = Algorithm.from_checkpoint(paths[-1])
    earlier_weights = earlier.get_module().state_dict()
    earlier.stop()

    second = config.build_algo()  # the same script run again
    path = second.train()["checkpoint_path"]
    assert Path(path).exists()  # the newest is never deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_000001", "checkpoint_000003"]
    for _ in range(3):  # iteration 3 is the earlier run's: saved beside it, not over it
        path = second.train()["checkpoint_path"]
    second.stop()
    assert Path(path).name == "checkpoint_000004"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_000003", "checkpoint_000004"]
    kept = Algorithm.from_checkpoint(tmp_path / "checkpoint_000003")
    assert all((kept.get_module().state_dict()[k] == v).all() for k, v in earlier_weights.items())
    kept.stop()


def test_the_same_iteration_twice_in_one_run_replaces_its_own_checkpoint(
    algo: PPO, tmp_path: Path
) -> None:
    first = algo.save_checkpoint_to_dir(tmp_path, keep_last_n=2)
    second = algo.save_checkpoint_to_dir(tmp_path, keep_last_n=2)
    assert first == second and Path(first).name == "checkpoint_000001"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_000001"]


# ---------------------------------------------------------------- killed between renames
_KILLED_BETWEEN_RENAMES = textwrap.dedent("""
    import os, sys
    from rlmod.algorithms.ppo import PPOConfig
    algo = (PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=64).debugging(seed=0).build_algo())
    algo.train()
    algo.save_to_path(sys.argv[1])                       # the last good checkpoint
    algo.train()
    rename = os.rename
    def rename_then_die(src, dst):
        rename(src, dst)
        if ".old-" in str(dst):                          # after the first of the two renames
            os.kill(os.getpid(), 9)
    os.rename = rename_then_die
    algo.save_to_path(sys.argv[1])
""")


def test_a_save_killed_between_its_renames_is_recovered_on_load(tmp_path: Path) -> None:
    target = tmp_path / "ck"
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_BETWEEN_RENAMES, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert not target.exists()
    assert {p.name.split("-")[0] for p in tmp_path.iterdir()} == {".ck.old", ".ck.tmp"}
    restored = Algorithm.from_checkpoint(target)  # the new save: complete and flushed
    assert restored.iteration == 2
    restored.save_to_path(target)  # the next save removes what the killed one left
    restored.stop()
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_a_failed_second_rename_puts_the_previous_checkpoint_back(
    algo: PPO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ck"
    algo.save_to_path(target)
    rename = os.rename

    def fail_on_tmp(src: str | Path, dst: str | Path) -> None:
        if ".tmp-" in str(src):
            raise OSError("disk gone")
        rename(src, dst)

    monkeypatch.setattr(os, "rename", fail_on_tmp)
    with pytest.raises(OSError, match="disk gone"):
        algo.save_to_path(target)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]
    Algorithm.from_checkpoint(target).stop()


def test_run_dir_resume_finds_a_checkpoint_killed_between_renames(
    algo: PPO, tmp_path: Path
) -> None:
    directory = tmp_path / "checkpoints"
    path = Path(algo.save_checkpoint_to_dir(directory))
    os.rename(path, directory / ".checkpoint_000001.old-deadbeef")
    assert checkpoints.complete_checkpoints(directory) == [path]
