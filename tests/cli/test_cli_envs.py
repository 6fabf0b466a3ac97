"""Any env from the command line (rlmod/cli/envs.py, rlmod/env/registry.py): gymnasium's
module:Env-v0, --gym-packages, namespaced and user-registered IDs, module:Class with
--trust, and the errors that say how to pass an env."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from rlmod.algorithms import Algorithm
from rlmod.algorithms.ppo import PPOConfig
from rlmod.cli import main
from rlmod.errors import CheckpointError
from rlmod.utils.trust import UntrustedImportError

SMALL = '{"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1}'
PACKAGE = "rlmod_cli_test_envs"
"""A package the tests write: it registers LineWalk-v0 and Walks/Line-v1 with gymnasium."""

SOURCE = '''
import gymnasium as gym
import numpy as np


class LineWalk(gym.Env):
    """Walk left or right on a line; 8 steps, reward 1 per step right."""

    def __init__(self, env_config=None):
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t, self.x = 0, 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, 0.0
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.t += 1
        self.x += 1.0 if action == 1 else -1.0
        obs = np.array([self.x], np.float32)
        return obs, float(action == 1), False, self.t >= 8, {}


class NoConfigWalk(LineWalk):
    def __init__(self):
        super().__init__()


gym.register("LineWalk-v0", entry_point=f"{__name__}:LineWalk")
gym.register("Walks/Line-v1", entry_point=f"{__name__}:LineWalk")
'''


@pytest.fixture(scope="module")
def package_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The directory holding PACKAGE, on sys.path for this module's in-process runs."""
    root = tmp_path_factory.mktemp("envs")
    (root / f"{PACKAGE}.py").write_text(textwrap.dedent(SOURCE))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


def _train(env: str, run_dir: Path, *extra: str) -> int:
    return main(
        [
            "train", "--env", env, "--stop-iters", "1", "--no-tensorboard", "--seed", "0",
            "--config", SMALL, "--run-dir", str(run_dir), *extra,
        ]
    )  # fmt: skip


def test_gymnasiums_module_colon_id_through_the_entry_point(
    package_dir: Path, tmp_path: Path
) -> None:
    """`--env pkg:LineWalk-v0`: gymnasium imports pkg (which registers the ID); then
    `rlmod evaluate` loads the checkpoint only with pkg trusted."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_dir), *sys.path])}
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable, "-m", "rlmod.cli", "train", "--env", f"{PACKAGE}:LineWalk-v0",
            "--stop-iters", "1", "--no-tensorboard", "--config", SMALL, "--run-dir", str(run_dir),
        ],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"PPO on {PACKAGE}:LineWalk-v0" in out.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "rlmod.cli", "evaluate", str(run_dir), "--episodes", "1"],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert refused.returncode == 2
    assert f"gymnasium would import '{PACKAGE}'" in refused.stderr
    assert f"--trust {PACKAGE}" in refused.stderr
    trusted = subprocess.run(
        [
            sys.executable, "-m", "rlmod.cli", "evaluate", str(run_dir), "--episodes", "1",
            "--trust", PACKAGE,
        ],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert trusted.returncode == 0, trusted.stderr
    assert "episode_return_mean" in trusted.stdout


@pytest.mark.parametrize("env", ["LineWalk-v0", "Walks/Line-v1"])
def test_gym_packages_register_plain_and_namespaced_ids(
    package_dir: Path, tmp_path: Path, env: str
) -> None:
    assert _train(env, tmp_path / "run", "--gym-packages", PACKAGE) == 0
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_a_class_by_import_path_needs_trust_and_says_so(
    package_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert _train(f"{PACKAGE}:LineWalk", tmp_path / "refused") == 2
    err = capsys.readouterr().err
    assert "names a class or function by import path" in err
    assert f"add --trust {PACKAGE}" in err
    assert not (tmp_path / "refused").exists()
    assert _train(f"{PACKAGE}:LineWalk", tmp_path / "run", "--trust", PACKAGE) == 0
    assert "PPO on LineWalk" in capsys.readouterr().out


def test_an_env_class_without_env_config_says_how_to_pass_it(
    package_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = _train(f"{PACKAGE}:NoConfigWalk", tmp_path / "run", "--trust", PACKAGE)
    assert code == 2
    err = capsys.readouterr().err
    assert "is called as NoConfigWalk(env_config)" in err
    assert "def __init__(self, env_config=None)" in err
    assert f"--env {PACKAGE}:NoConfigWalk-v0" in err


def test_an_env_instance_says_to_pass_its_id() -> None:
    with pytest.raises(TypeError, match=r"Pass its ID, env='CartPole-v1', or a creator"):
        PPOConfig().environment(gym.make("CartPole-v1"))


@pytest.mark.parametrize(
    ("env", "extra", "phrase"),
    [
        ("Nowhere/Thing-v0", (), "No package registered the namespace 'Nowhere'"),
        ("LineWalkk-v0", (), "--gym-packages PACKAGE"),
        ("CartPole-v1", ("--gym-packages", "no_such_pkg_xyz"), "--gym-packages no_such_pkg_xyz"),
        ("no_such_pkg_xyz:Thing-v0", (), "cannot import 'no_such_pkg_xyz'"),
        ("bad name:Thing-v0", (), "expected an env ID"),
    ],
)
def test_env_errors_are_one_line_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture, env: str, extra: tuple[str, ...], phrase: str
) -> None:
    assert _train(env, tmp_path / "run", *extra) == 2
    err = capsys.readouterr().err
    assert phrase in err and len(err.strip().splitlines()) == 1, err


def test_a_stored_module_colon_id_is_refused_before_anything_is_imported(tmp_path: Path) -> None:
    """Loading a config or checkpoint runs no code the user did not choose: gymnasium's
    module:Env-v0 would import the module when the env is made."""
    with pytest.raises(UntrustedImportError, match="trusted_modules=\\['never_imported_pkg'\\]"):
        PPOConfig.from_dict({"env": "never_imported_pkg.envs:Thing-v0"})
    assert "never_imported_pkg" not in sys.modules
    config = PPOConfig.from_dict(
        {"env": "never_imported_pkg.envs:Thing-v0"}, trusted_modules=["never_imported_pkg"]
    )
    assert config.env == "never_imported_pkg.envs:Thing-v0"


def test_a_checkpoint_of_a_module_colon_id_loads_with_its_module_trusted(
    package_dir: Path, tmp_path: Path
) -> None:
    config = (
        PPOConfig()
        .environment(f"{PACKAGE}:LineWalk-v0")
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
    )
    algo = config.build_algo()
    path = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    with pytest.raises(CheckpointError, match=f"--trust {PACKAGE}"):
        Algorithm.from_checkpoint(path)
    Algorithm.from_checkpoint(path, trusted_modules=[PACKAGE]).stop()
