"""DQN and SAC on Ray: remote EnvRunners fill the replay buffer and hold the inference-only
module; data-parallel Learners return one TD error per replayed row for the priorities.

One Ray session (2 CPUs) for this module; each test stops what it builds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.off_policy import TD_ERROR
from rlmod.algorithms.sac import SACConfig
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.replay import PrioritizedReplayBuffer

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_local")]


def _dqn() -> DQNConfig:
    return (
        DQNConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("CartPole-v1")
        .debugging(seed=0)
        .env_runners(rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [16], "fcnet_activation": "relu"})
        .training(num_steps_sampled_before_learning_starts=16, train_batch_size=8)
    )


def _sac() -> SACConfig:
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
        )
    )


@pytest.mark.parametrize(
    "make, kept", [(_dqn, ("q.", "epsilon")), (_sac, ("pi_encoder.", "pi."))], ids=["DQN", "SAC"]
)
def test_two_remote_env_runners_fill_the_buffer_and_hold_the_inference_only_module(
    make: Any, kept: tuple
) -> None:
    algo = make().env_runners(num_env_runners=2).build_algo()
    try:
        for _ in range(6):
            result = algo.train()
        assert algo.env_runner_group.last_sampled_worker_indices == [1, 2]
        assert len(algo.replay_buffer) == 6 * 2 * 4  # iterations x runners x fragment
        assert result["learners"][DEFAULT_MODULE_ID]["num_module_steps_trained"] > 0
        learner_weights = algo.learner_group.get_weights()[DEFAULT_MODULE_ID]
        remote = algo.env_runner_group.foreach_env_runner(
            lambda runner: {k: v.numpy().copy() for k, v in runner.module.state_dict().items()},
            local_env_runner=False,
        )
        assert len(remote) == 2
        for weights in remote:  # no target network, no critic; the Learner's latest weights
            assert weights and all(k.startswith(kept) for k in weights), sorted(weights)
            for k, v in weights.items():
                np.testing.assert_array_equal(v, learner_weights[k])
        assert any("target" in k for k in learner_weights)
    finally:
        algo.stop()


@pytest.mark.parametrize("make", [_dqn, _sac], ids=["DQN", "SAC"])
def test_two_learners_return_one_td_error_per_replayed_row(make: Any) -> None:
    """Each Learner trains on its half of the replayed rows; the TD errors of both halves
    come back in row order, so each sampled item gets its own priority."""
    algo = make().learners(num_learners=2).build_algo()
    try:
        for _ in range(8):
            algo.train()
        batch, indices = algo.replay_buffer.sample(8, num_env_steps_sampled_lifetime=100)
        out = algo.learner_group.update(batch, timesteps={"num_env_steps_sampled_lifetime": 100})
        td = out[DEFAULT_MODULE_ID][TD_ERROR]
        assert isinstance(td, np.ndarray) and td.shape == (8,)
        assert len(np.unique(td)) > 1
        buf = algo.replay_buffer.buffers[DEFAULT_MODULE_ID]
        assert isinstance(buf, PrioritizedReplayBuffer)
        algo.replay_buffer.update_priorities(indices, {DEFAULT_MODULE_ID: td})
        idx = indices[DEFAULT_MODULE_ID]
        last = {i: t for i, t in zip(idx.tolist(), td.tolist(), strict=True)}  # repeats: last
        expected = (np.abs(list(last.values())) + buf.epsilon) ** buf.alpha
        np.testing.assert_allclose(buf.tree.leaves[list(last)], expected, rtol=1e-6)
        weights = algo.learner_group.get_weights()[DEFAULT_MODULE_ID]
        assert all(np.isfinite(v).all() for v in weights.values())
    finally:
        algo.stop()
