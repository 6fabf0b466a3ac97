"""What an RLlib or SB3 user types at the `rlmod` command line and gets back as one line:
old RLlib setting names in --config, envs whose optional dependency is missing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest


def rlmod(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real `rlmod` entry point in a subprocess, in `cwd` (where a default run dir
    would go)."""
    return subprocess.run(
        [sys.executable, "-m", "rlmod.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlmod train: error: "), out.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("config", "hint"),
    [
        ('{"fcnet_hiddens": [64]}', '{"model_config": {"fcnet_hiddens": ...}}'),
        ('{"num_rollout_workers": 2}', "renamed num_rollout_workers to num_env_runners"),
        ('{"num_sgd_iter": 5}', "renamed num_sgd_iter to num_epochs"),
    ],
)
def test_old_names_in_config_say_the_new_one(config: str, hint: str, tmp_path: Path) -> None:
    out = rlmod("train", "--env", "CartPole-v1", "--config", config, cwd=tmp_path)
    assert hint in _one_error_line(out)


@pytest.mark.parametrize(
    ("module", "algo", "env", "fix"),
    [
        ("Box2D", "PPO", "LunarLander-v3", "gymnasium[box2d]"),
        ("mujoco", "SAC", "HalfCheetah-v5", "gymnasium[mujoco]"),
    ],
)
def test_a_missing_env_dependency_is_one_line_with_the_install_command(
    module: str, algo: str, env: str, fix: str, tmp_path: Path
) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    out = rlmod("train", "--algo", algo, "--env", env, "--stop-iters", "1", cwd=tmp_path)
    line = _one_error_line(out)
    assert env in line and fix in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
