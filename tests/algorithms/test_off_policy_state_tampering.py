"""A DQN checkpoint whose replay buffer or optimizer state was edited on disk: loading it
is a CheckpointError naming the module and the field, and restoring it into a running
Algorithm changes nothing (issue 30, item 6). Before, a pointer of 500 in a buffer of 32
rows and a `[1]` first moment of a `(16, 4)` weight both loaded silently."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlmod.algorithms import Algorithm
from rlmod.algorithms.dqn import DQNConfig
from rlmod.errors import CheckpointError
from rlmod.utils.state_files import read_state, write_state

MODULE = "default_policy"


def _config() -> DQNConfig:
    return (
        DQNConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("CartPole-v1")
        .debugging(seed=0)
        .env_runners(rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [16], "fcnet_activation": "relu"})
        .training(
            num_steps_sampled_before_learning_starts=16,
            train_batch_size=8,
            target_network_update_freq=8,
            store_buffer_in_checkpoints=True,
        )
    )


def _trained() -> Algorithm:
    algo = _config().build_algo()
    for _ in range(8):
        algo.train()
    assert algo.learner_group.learner._optimizers[MODULE].step_count > 0  # moments exist
    return algo


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    algo = _trained()
    path = Path(algo.save_to_path(tmp_path_factory.mktemp("good") / "ck"))
    algo.stop()
    return path


@pytest.fixture
def ck(good: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(good, tmp_path / "ck"))


def _edit_state(directory: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrites a component's state.json + state.safetensors after `edit`."""
    state = read_state(directory)
    edit(state)
    for name in ("state.json", "state.safetensors"):
        if (directory / name).exists():
            os.remove(directory / name)
    write_state(directory, state)


def _pointer_500(ck: Path) -> None:
    """Only the JSON number changes, as a hand edit would."""
    file = ck / "replay_buffer" / "state.json"
    data = json.loads(file.read_text())
    assert data["buffers"][MODULE]["size"] == 32
    data["buffers"][MODULE]["next_index"] = 500
    file.write_text(json.dumps(data))


def _one_element_moment(ck: Path) -> None:
    def edit(state: dict[str, Any]) -> None:
        assert state[MODULE]["exp_avg"][0].shape == (16, 4)
        state[MODULE]["exp_avg"][0] = torch.tensor([0.5])

    _edit_state(ck / "learner_group" / "learner" / "optimizer", edit)


def _nan_priority(ck: Path) -> None:
    def edit(state: dict[str, Any]) -> None:
        state["buffers"][MODULE]["priorities"][3] = np.nan

    _edit_state(ck / "replay_buffer", edit)


def _negative_second_moment(ck: Path) -> None:
    def edit(state: dict[str, Any]) -> None:
        state[MODULE]["exp_avg_sq"][1][0] = -1.0

    _edit_state(ck / "learner_group" / "learner" / "optimizer", edit)


TAMPERED = [
    (
        "replay-pointer-500",
        _pointer_500,
        r"replay_buffer: module 'default_policy': The saved replay buffer's next_index=500 "
        r"differs from its size=32",
    ),
    (
        "optimizer-moment-of-one-element",
        _one_element_moment,
        r"Optimizer state of module 'default_policy': exp_avg\[0\] \(parameter "
        r"'q.encoder.0.weight'\) has shape \(1,\), the parameter \(16, 4\)",
    ),
    (
        "replay-priority-nan",
        _nan_priority,
        r"module 'default_policy': The saved prioritized replay buffer's priorities must be "
        r"finite and > 0",
    ),
    (
        "optimizer-second-moment-negative",
        _negative_second_moment,
        r"exp_avg_sq\[1\] \(parameter 'q.encoder.0.bias'\) holds negative values",
    ),
]


@pytest.mark.parametrize("name, tamper, message", TAMPERED, ids=[c[0] for c in TAMPERED])
def test_a_tampered_checkpoint_does_not_load(
    ck: Path, name: str, tamper: Any, message: str
) -> None:
    tamper(ck)
    with pytest.raises(CheckpointError, match=message):
        Algorithm.from_checkpoint(ck)


def _live_state(algo: Algorithm) -> tuple[dict[str, Any], dict[str, Any]]:
    optimizer = algo.learner_group.learner._optimizers[MODULE].state_dict()
    return optimizer, algo.replay_buffer.get_state()


@pytest.mark.parametrize("name, tamper, message", TAMPERED[:2], ids=[c[0] for c in TAMPERED[:2]])
def test_restoring_a_tampered_checkpoint_changes_nothing(
    ck: Path, name: str, tamper: Any, message: str
) -> None:
    tamper(ck)
    algo = _trained()
    algo.train()  # differs from the checkpoint's state
    optimizer, buffer = _live_state(algo)
    with pytest.raises(CheckpointError, match=message):
        algo.restore_from_path(ck)
    after_optimizer, after_buffer = _live_state(algo)
    assert after_optimizer["step"] == optimizer["step"]
    for a, b in zip(
        after_optimizer["exp_avg"] + after_optimizer["exp_avg_sq"],
        optimizer["exp_avg"] + optimizer["exp_avg_sq"],
        strict=True,
    ):
        assert torch.equal(a, b)
    for a, b in zip(after_buffer["buffers"].values(), buffer["buffers"].values(), strict=True):
        assert a["size"] == b["size"] and a["next_index"] == b["next_index"]
        np.testing.assert_array_equal(a["columns"]["obs"], b["columns"]["obs"])
    algo.train()  # and it still trains
    algo.stop()


def test_the_untampered_checkpoint_loads(ck: Path) -> None:
    algo = Algorithm.from_checkpoint(ck)
    assert len(algo.replay_buffer) == 32
    assert algo.learner_group.learner._optimizers[MODULE].step_count > 0
    algo.train()
    algo.stop()
