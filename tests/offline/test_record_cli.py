"""`rlmod record --checkpoint CKPT --episodes N --output DIR`: a checkpoint's policy
recorded to Parquet, ready for BC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.inference import InferencePolicy
from rlmod.algorithms.ppo import PPOConfig
from rlmod.cli import main
from rlmod.core.columns import Columns
from rlmod.offline.reader import read_columns, read_spaces, resolve_files


@pytest.fixture
def frozenlake_checkpoint(tmp_path: Path) -> str:
    """PPO after one iteration on FrozenLake (Discrete observations, one-hot for the module)."""
    algo = (
        PPOConfig()
        .environment("FrozenLake-v1", env_config={"is_slippery": False})
        .training(train_batch_size=256, minibatch_size=64)
        .debugging(seed=0)
        .build_algo()
    )
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    return path


def test_record_writes_the_policys_episodes(
    tmp_path: Path, frozenlake_checkpoint: str, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "data"
    assert (
        main(
            [
                "record",
                "--checkpoint",
                frozenlake_checkpoint,
                "--episodes",
                "5",
                "--output",
                str(out),
                "--seed",
                "3",
            ]
        )
        == 0
    )
    assert "Recorded 5 episodes" in capsys.readouterr().out
    files = resolve_files(out)
    cols = read_columns(files)
    ends = cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]
    assert int(ends.sum()) == 5 and len(np.unique(cols[Columns.EPS_ID])) == 5
    assert cols[Columns.OBS].ndim == 1  # raw cell indices, not the module's one-hot
    spaces = read_spaces(files)
    assert spaces is not None and spaces["__env__"][0].n == 16
    # Greedy: every recorded action is the policy's action for the recorded observation.
    policy = InferencePolicy.from_checkpoint(frozenlake_checkpoint)
    assert [int(policy.compute_single_action(o)) for o in cols[Columns.OBS]] == (
        cols[Columns.ACTIONS].tolist()
    )
    # ... and BC trains on them with no further setting.
    algo = (
        BCConfig()
        .offline_data(input_=str(out), shuffle_buffer_size=0)
        .training(train_batch_size=16, minibatch_size=8)
        .build_algo()
    )
    loss = algo.train()["learners"]["default_policy"]["policy_loss"]
    assert torch.isfinite(torch.tensor(loss))


def test_record_errors_name_the_problem(
    tmp_path: Path, frozenlake_checkpoint: str, capsys: pytest.CaptureFixture
) -> None:
    assert (
        main(
            [
                "record",
                "--checkpoint",
                str(tmp_path / "nothing"),
                "--episodes",
                "1",
                "--output",
                str(tmp_path / "d"),
            ]
        )
        == 2
    )
    assert "neither a checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --episodes is required, >= 1
        main(
            [
                "record",
                "--checkpoint",
                frozenlake_checkpoint,
                "--episodes",
                "0",
                "--output",
                str(tmp_path / "d"),
            ]
        )
    # A directory holding episodes of another env is refused, not mixed.
    other = tmp_path / "other"
    import gymnasium as gym

    from rlmod.offline import record_episodes

    record_episodes(gym.make("CartPole-v1"), lambda o: 0, num_episodes=1, output_dir=other)
    assert (
        main(
            [
                "record",
                "--checkpoint",
                frozenlake_checkpoint,
                "--episodes",
                "1",
                "--output",
                str(other),
            ]
        )
        == 2
    )
    assert "another env" in capsys.readouterr().err
