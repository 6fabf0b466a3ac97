"""Checkpoint files edited by hand or by an attacker: each is a CheckpointError naming what
is wrong, and the live Algorithm is unchanged (issue 30's adversarial pass)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from rlmod.algorithms import Algorithm
from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors.env_to_module import MeanStdFilter
from rlmod.errors import CheckpointError
from rlmod.utils.state_files import read_state, write_state


def _mean_std_filter(env: Any, *args: Any, **kwargs: Any) -> MeanStdFilter:
    return MeanStdFilter()


def _load(path: Path) -> Algorithm:
    """The test module is not a trusted package: its connector is passed at load."""
    return Algorithm.from_checkpoint(path, env_to_module_connector=_mean_std_filter)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of a run with a MeanStdFilter (a stateful connector)."""
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(env_to_module_connector=_mean_std_filter)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
        .build_algo()
    )
    algo.train()
    path = Path(algo.save_to_path(tmp_path_factory.mktemp("good") / "ck"))
    algo.stop()
    return path


@pytest.fixture
def ck(good: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(good, tmp_path / "ck"))


def _edit(file: Path, edit: Any) -> None:
    data = json.loads(file.read_text())
    edit(data)
    file.write_text(json.dumps(data))


def test_a_metadata_file_that_is_a_directory(ck: Path) -> None:
    os.remove(ck / "metadata.json")
    (ck / "metadata.json").mkdir()
    with pytest.raises(CheckpointError, match=r"metadata.json cannot be read"):
        _load(ck)


def test_a_file_in_place_of_the_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "ck").write_text("x")
    with pytest.raises(CheckpointError, match="is a file; a checkpoint is a directory"):
        Algorithm.from_checkpoint(tmp_path / "ck")


def test_integer_weights_are_refused_not_cast(ck: Path) -> None:
    """A float weight stored as int64 was cast silently (its fractions lost)."""
    directory = ck / "learner_group" / "learner" / "rl_module" / "default_policy"
    state = {k: v.to(torch.int64) for k, v in read_state(directory).items()}
    os.remove(directory / "state.safetensors")  # a module's weights: its only state file
    write_state(directory, state)
    with pytest.raises(
        CheckpointError,
        match=r"is stored as int64, the module.s is "
        r"torch.float32",
    ):
        _load(ck)


def test_a_connector_state_the_pipeline_lacks_is_refused(
    ck: Path, cartpole_config: PPOConfig
) -> None:
    """Restoring a MeanStdFilter run into one without the filter dropped the statistics:
    the policy then acted on unnormalized observations."""
    algo = cartpole_config.build_algo()
    with pytest.raises(
        CheckpointError,
        match=r"Connector state for \['\d+:MeanStdFilter'\] "
        r"does not fit this pipeline",
    ):
        algo.restore_from_path(ck)
    algo.stop()


@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s.update(mean=[0.5]),  # broadcast into every dimension before
        lambda s: s.update(m2=[-1.0, 0.0, 0.0, 0.0]),
        lambda s: s.update(n=-4),
    ],
)
def test_bad_mean_std_statistics_are_refused(ck: Path, edit: Any) -> None:
    def change(data: dict[str, Any]) -> None:
        (key,) = data["env_to_module"]
        base = data["env_to_module"][key]["base"]
        if "mean" in base and isinstance(base["mean"], dict):  # stored as an array reference
            base["mean"] = [0.0, 0.0, 0.0, 0.0]
            base["m2"] = [1.0, 1.0, 1.0, 1.0]
        edit(base)

    _edit(ck / "env_runner" / "state.json", change)
    with pytest.raises(CheckpointError, match="MeanStdFilter state 'base' must hold"):
        _load(ck)


def test_a_negative_env_step_counter_is_refused(ck: Path) -> None:
    _edit(ck / "env_runner" / "state.json", lambda d: d.update(num_env_steps_sampled_lifetime=-5))
    with pytest.raises(
        CheckpointError, match="'num_env_steps_sampled_lifetime' must be an int >= 0"
    ):
        _load(ck)


def test_a_checkpoint_reached_through_a_symlinked_root_loads(ck: Path, tmp_path: Path) -> None:
    """The user's own link to a checkpoint is theirs to make; links inside it are not."""
    os.symlink(ck, tmp_path / "latest")
    algo = _load(tmp_path / "latest")
    assert algo.iteration == 1
    algo.stop()
