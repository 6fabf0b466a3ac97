"""`rlmod export RUN_DIR --format onnx|torch-export` (rlmod/cli/export.py) through the real
entry point: one quiet file per format that computes the checkpoint's greedy actions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlmod.algorithms import InferencePolicy

SMALL = '{"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}'


def rlmod(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real `rlmod` entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "rlmod.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("export") / "run"
    out = rlmod(
        "train", "--env", "CartPole-v1", "--stop-iters", "2", "--seed", "0", "--config", SMALL,
        "--no-tensorboard", "--run-dir", run,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return run


def _observations() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)


def test_onnx_export_is_one_quiet_file_with_the_policys_actions(run_dir: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    out = rlmod("export", run_dir, "--format", "onnx")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no warnings or log lines of torch.onnx / torch.export
    path = run_dir / "exported" / "checkpoint_000002.onnx"
    assert str(path) in out.stdout
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no side .data file
    actions = ort.InferenceSession(str(path)).run(None, {"obs": _observations()})[0]
    expected = InferencePolicy.from_checkpoint(run_dir / "checkpoints" / "checkpoint_000002")
    np.testing.assert_array_equal(actions, expected.compute_actions(_observations()))
    again = rlmod("export", run_dir, "--format", "onnx")
    assert again.returncode == 2 and "already exists" in again.stderr  # never overwritten


def test_torch_export_loads_and_acts_as_the_policy(run_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "policy.pt2"
    out = rlmod("export", run_dir, "--format", "torch-export", "--output", path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    program = torch.export.load(str(path)).module()
    actions = program(torch.as_tensor(_observations())).numpy()
    expected = InferencePolicy.from_checkpoint(run_dir)
    np.testing.assert_array_equal(actions, expected.compute_actions(_observations()))
