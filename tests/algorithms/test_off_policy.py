"""OffPolicyAlgorithm checkpoints: the replay buffer as an optional component, exact resume."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlmod.algorithms import Algorithm
from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.off_policy import OffPolicyAlgorithm
from rlmod.algorithms.sac import SACConfig
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.replay import PrioritizedReplayBuffer


def _dqn(**training: Any) -> DQNConfig:
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
            **training,
        )
    )


def _sac(**training: Any) -> SACConfig:
    return (
        SACConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("Pendulum-v1")
        .debugging(seed=0)
        .env_runners(rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .training(
            num_steps_sampled_before_learning_starts=16,
            train_batch_size=8,
            replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 1000},
            **training,
        )
    )


class _RngStream:
    """Two algorithms in one process share torch's global RNG; each gets its own stream."""

    def __init__(self) -> None:
        self.state = torch.get_rng_state()

    def train(self, algo: Algorithm) -> None:
        torch.set_rng_state(self.state)
        algo.train()
        self.state = torch.get_rng_state()


@pytest.mark.parametrize("make", [_dqn, _sac], ids=["DQN", "SAC"])
def test_a_resumed_algorithm_makes_the_same_updates_as_the_uninterrupted_one(
    make: Any, tmp_path: Path
) -> None:
    # training_intensity 3 with 4 new rows and batches of 8: 1.5 gradient steps per
    # iteration, so the owed half step must survive the checkpoint too.
    algo = make(store_buffer_in_checkpoints=True, training_intensity=3).build_algo()
    restored = None
    try:
        for _ in range(6):
            algo.train()
        algo.save_to_path(tmp_path / "ckpt")
        assert (tmp_path / "ckpt" / "replay_buffer" / "state.safetensors").is_file()
        restored = Algorithm.from_checkpoint(tmp_path / "ckpt")
        assert isinstance(restored, OffPolicyAlgorithm)
        buf, buf2 = algo.replay_buffer.buffers, restored.replay_buffer.buffers
        assert len(buf2[DEFAULT_MODULE_ID]) == len(buf[DEFAULT_MODULE_ID]) > 0
        # Both get the same new env data (envs themselves are not saved mid-episode).
        count = algo.env_runner.num_env_steps_sampled_lifetime
        new_samples = [algo.env_runner_group.sample() for _ in range(3)]
        algo.env_runner.num_env_steps_sampled_lifetime = count  # as if not sampled yet
        streams = _RngStream(), _RngStream()
        for samples in new_samples:
            for a, stream in zip((algo, restored), streams, strict=True):
                a.env_runner_group.sample = lambda s=samples, **kw: s  # type: ignore[method-assign]
                a.env_runner_group.last_sampled_worker_indices = [0]  # what sample() sets
                stream.train(a)
        a_state = algo.learner_group.learner.module[DEFAULT_MODULE_ID].state_dict()
        b_state = restored.learner_group.learner.module[DEFAULT_MODULE_ID].state_dict()
        assert a_state.keys() == b_state.keys()
        for k in a_state:
            assert torch.equal(a_state[k], b_state[k]), k
        a_buf, b_buf = buf[DEFAULT_MODULE_ID], buf2[DEFAULT_MODULE_ID]
        assert isinstance(a_buf, PrioritizedReplayBuffer)
        assert isinstance(b_buf, PrioritizedReplayBuffer)
        assert a_buf.tree.leaves.tobytes() == b_buf.tree.leaves.tobytes()
        assert a_buf.rng.bit_generator.state == b_buf.rng.bit_generator.state
        assert algo._train_credit == restored._train_credit
    finally:
        algo.stop()
        if restored is not None:
            restored.stop()


def test_by_default_a_checkpoint_has_no_buffer_and_loads_with_an_empty_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    algo = _dqn().build_algo()
    try:
        for _ in range(5):
            algo.train()
        assert "replay_buffer" not in algo.get_state()
        algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    assert not (tmp_path / "ckpt" / "replay_buffer").exists()
    restored = Algorithm.from_checkpoint(tmp_path / "ckpt")
    try:
        assert len(restored.replay_buffer) == 0
        assert restored.iteration == 5
    finally:
        restored.stop()
    # Asked to store buffers, a checkpoint without one says the buffer starts empty.
    with caplog.at_level(logging.WARNING, logger="rlmod.algorithms.off_policy"):
        restored = Algorithm.from_checkpoint(tmp_path / "ckpt", store_buffer_in_checkpoints=True)
    restored.stop()
    assert "holds no replay buffer" in caplog.text and "empty buffer" in caplog.text


def test_a_stored_buffer_is_skipped_with_a_warning_unless_asked_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    algo = _dqn(store_buffer_in_checkpoints=True).build_algo()
    try:
        for _ in range(5):
            algo.train()
        algo.save_to_path(tmp_path / "ckpt")
        size = len(algo.replay_buffer)
    finally:
        algo.stop()
    with caplog.at_level(logging.WARNING, logger="rlmod.algorithms.off_policy"):
        restored = Algorithm.from_checkpoint(tmp_path / "ckpt", store_buffer_in_checkpoints=False)
    try:
        assert "store_buffer_in_checkpoints=False" in caplog.text
        assert len(restored.replay_buffer) == 0
        # Asked for by name, the buffer is restored whatever the setting.
        restored.restore_from_path(tmp_path / "ckpt", component="replay_buffer")
        assert len(restored.replay_buffer) == size
    finally:
        restored.stop()


def test_store_buffer_in_checkpoints_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="store_buffer_in_checkpoints"):
        DQNConfig().training(store_buffer_in_checkpoints="yes")  # type: ignore[arg-type]


def test_buffers_of_several_modules_are_saved(tmp_path: Path) -> None:
    from rlmod.testing import MultiAgentCartPole

    config = (
        _dqn(store_buffer_in_checkpoints=True, n_step=3)
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
    )
    algo = config.build_algo()
    try:
        for _ in range(3):
            algo.train()
        algo.save_to_path(tmp_path / "ckpt")
        restored = Algorithm.from_checkpoint(
            tmp_path / "ckpt", policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
    finally:
        algo.stop()
    try:
        for mid in ("p0", "p1"):
            a, b = algo.replay_buffer.buffers[mid], restored.replay_buffer.buffers[mid]
            # n=3: rows whose window was open are stored with the window they have.
            assert len(b) >= len(a) > 0
            np.testing.assert_array_equal(a.columns["obs"][: len(a)], b.columns["obs"][: len(a)])
    finally:
        restored.stop()


@pytest.mark.parametrize(
    "make, kept", [(_dqn, ("q.", "epsilon")), (_sac, ("pi_encoder.", "pi."))], ids=["DQN", "SAC"]
)
def test_weight_sync_sends_only_what_the_env_runner_module_holds(make: Any, kept: tuple) -> None:
    """Rule 1: EnvRunners get the online Q head (DQN) or the actor (SAC), never target
    networks or critics, while `get_weights()` without `inference_only` has everything."""
    algo = make().build_algo()
    sent: list[dict[str, Any]] = []
    runner = algo.env_runner
    set_state = runner.set_state

    def spy(state: dict[str, Any]) -> None:
        sent.append(state)
        set_state(state)

    runner.set_state = spy  # type: ignore[method-assign]
    try:
        for _ in range(6):
            algo.train()
        synced = [s["rl_module"][DEFAULT_MODULE_ID] for s in sent if "rl_module" in s]
        assert synced, "no weights reached the EnvRunner"
        runner_keys = set(runner.module.state_dict())
        for weights in synced:
            assert set(weights) == runner_keys
            assert all(k.startswith(kept) for k in weights), sorted(weights)
        full = set(algo.learner_group.get_weights()[DEFAULT_MODULE_ID])
        assert any("target" in k for k in full) and runner_keys < full
    finally:
        algo.stop()
