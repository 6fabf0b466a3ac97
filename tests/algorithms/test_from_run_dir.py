"""`Algorithm.from_checkpoint(run_dir)` loads the run's newest complete checkpoint, as the
CLI (`rlmod evaluate RUN_DIR`, `--resume RUN_DIR`) does (rlmod/utils/checkpoints.py
`resolve_checkpoint`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmod.algorithms import Algorithm
from rlmod.algorithms.ppo import PPO, PPOConfig
from rlmod.errors import CheckpointError


def test_from_checkpoint_of_a_run_dir_loads_its_newest_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1)
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            algo.train()
            algo.save_checkpoint_to_dir(run / "checkpoints")
    finally:
        algo.stop()
    (run / "checkpoints" / "checkpoint_000003").mkdir()  # a save killed early: not complete
    for cls in (Algorithm, PPO):
        restored = cls.from_checkpoint(run)
        try:
            assert isinstance(restored, PPO) and restored.iteration == 2
        finally:
            restored.stop()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError):
        Algorithm.from_checkpoint(empty)
