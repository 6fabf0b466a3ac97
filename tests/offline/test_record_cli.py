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
from rlmod.offline.parquet_chunks import read_columns
from rlmod.offline.reader import read_spaces, resolve_files


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


def test_record_writes_dict_observations_that_bc_reads(tmp_path: Path) -> None:
    """A checkpoint of a Dict-observation env ({"image": uint8, "flip": Discrete}):
    `rlmod record` stores the parts in a struct column (the image as uint8) and the
    recorded actions are the policy's on the read-back observations."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlmod.offline import struct_obs
    from rlmod.testing.pixel_envs import BarOrientationEnv

    algo = (
        PPOConfig()
        .environment(BarOrientationEnv, env_config={"dict_obs": True})
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
        .debugging(seed=0)
        .build_algo()
    )
    algo.train()
    checkpoint = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    out = tmp_path / "data"
    args = ["record", "--checkpoint", checkpoint, "--episodes", "20", "--output", str(out)]
    assert main(args) == 0
    [file] = resolve_files(out)
    image = pq.read_schema(file).field(Columns.OBS).type.field("image").type
    assert image.value_type == pa.uint8()
    space = read_spaces([file])["__env__"][0]  # type: ignore[index]
    cols = read_columns([file], obs_shape=space)
    policy = InferencePolicy.from_checkpoint(checkpoint)
    tree = struct_obs.to_tree(space, cols[Columns.OBS])
    for i in range(20):  # one-step episodes
        obs = {"image": tree["image"][i], "flip": tree["flip"][i]}
        assert int(policy.compute_single_action(obs)) == int(cols[Columns.ACTIONS][i])
    bc = BCConfig().offline_data(input_=str(out)).training(train_batch_size_per_learner=8)
    algo = bc.build_algo()
    assert np.isfinite(algo.train()["learners"]["default_policy"]["total_loss"])
    algo.stop()
