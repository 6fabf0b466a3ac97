"""K gradient steps in one Learner call (`num_gradient_steps`) against K calls on the blocks.

DQN computes the target network's Q-values for the steps after a target update in one
forward pass; weights, targets, TD errors and the result dict must be those of the
step-by-step path (within float32 rounding: the batched matmul may round differently).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.dqn import DQNConfig, DQNLearner
from rlmod.algorithms.off_policy import TD_ERROR, OffPolicyLearner
from rlmod.algorithms.sac import SACConfig
from rlmod.algorithms.sac.sac_learner import SACLearner
from rlmod.core.columns import ALL_MODULES, DEFAULT_MODULE_ID, Columns
from rlmod.replay import N_STEP, WEIGHTS

STEPS, ROWS = 4, 16
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _batch(rng: np.random.Generator, obs_dim: int, actions: np.ndarray) -> dict[str, Any]:
    n = len(actions)
    return {
        DEFAULT_MODULE_ID: {
            Columns.OBS: rng.normal(size=(n, obs_dim)).astype(np.float32),
            Columns.ACTIONS: actions,
            Columns.REWARDS: rng.normal(size=n).astype(np.float32),
            Columns.NEXT_OBS: rng.normal(size=(n, obs_dim)).astype(np.float32),
            Columns.TERMINATEDS: rng.random(n) < 0.2,
            N_STEP: np.ones(n, np.int64),
            WEIGHTS: np.ones(n, np.float32),
        }
    }


def _dqn(**training: Any) -> OffPolicyLearner:
    config = (
        DQNConfig()
        .rl_module(model_config={"fcnet_hiddens": [32, 32]})
        .training(lr=1e-2, **training)
    )
    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    spec = config.get_multi_rl_module_spec(
        spaces={DEFAULT_MODULE_ID: (box, gym.spaces.Discrete(3))}
    )
    learner = DQNLearner(config=config, module_spec=spec)
    learner.build()
    return learner


def _sac(**training: Any) -> OffPolicyLearner:
    config = SACConfig().rl_module(model_config={"fcnet_hiddens": [32, 32]}).training(**training)
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    act = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    spec = config.get_multi_rl_module_spec(spaces={DEFAULT_MODULE_ID: (box, act)})
    learner = SACLearner(config=config, module_spec=spec)
    learner.build()
    return learner


def _compare(learner: OffPolicyLearner, batch: dict[str, Any], now: int) -> OffPolicyLearner:
    """Runs `learner` one call of STEPS steps and a copy STEPS calls; asserts they agree."""
    stepwise = copy.deepcopy(learner)
    ts = {"num_env_steps_sampled_lifetime": now}
    torch.manual_seed(0)  # SAC samples actions: the same draws in both paths
    together = learner.update(batch, timesteps=ts, num_gradient_steps=STEPS)
    torch.manual_seed(0)
    parts = [
        stepwise.update(
            {
                mid: {c: v[i * ROWS : (i + 1) * ROWS] for c, v in cols.items()}
                for mid, cols in batch.items()
            },
            timesteps=ts,
        )
        for i in range(STEPS)
    ]
    assert learner.module is not None and stepwise.module is not None
    for (name, a), (_, b) in zip(
        learner.module.state_dict().items(), stepwise.module.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, **TOL, msg=name)
    mine, theirs = together[DEFAULT_MODULE_ID], [p[DEFAULT_MODULE_ID] for p in parts]
    np.testing.assert_allclose(
        mine[TD_ERROR], np.concatenate([p[TD_ERROR] for p in theirs]), rtol=1e-5, atol=1e-5
    )
    for key, value in mine.items():
        if key == TD_ERROR:
            continue
        if key.startswith("num_") and key != "num_trainable_parameters":
            assert value == sum(p[key] for p in theirs), key
        else:
            assert value == pytest.approx(np.mean([p[key] for p in theirs]), rel=1e-5), key
    assert together[ALL_MODULES]["num_module_steps_trained"] == STEPS * ROWS
    return stepwise


@pytest.mark.parametrize(
    ("freq", "tau", "now"),
    [
        (10, 1.0, 256),  # due at the first step: later steps precompute with the new target
        (1000, 1.0, 256),  # not due: all steps precompute with the old target
        (0, 0.3, 256),  # moves after every step: no precomputing
    ],
)
def test_dqn_steps_in_one_call_match_step_by_step(freq: int, tau: float, now: int) -> None:
    rng = np.random.default_rng(0)
    learner = _dqn(target_network_update_freq=freq, tau=tau)
    batch = _batch(rng, 4, rng.integers(0, 3, STEPS * ROWS))
    _compare(learner, batch, now)
    assert learner.module is not None
    target = learner.module[DEFAULT_MODULE_ID].target_q
    online = learner.module[DEFAULT_MODULE_ID].q
    moved = [
        not torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters(), strict=True)
    ]
    # freq 10: copied after the first step, not again; freq 0 and tau 1 would end equal
    assert any(moved) == (freq != 0 or tau != 1.0)


def test_dqn_precomputes_target_values_only_while_the_target_is_fixed() -> None:
    learner = _dqn(target_network_update_freq=10, tau=1.0)
    assert learner.module is not None
    calls: list[int] = []
    target = learner.module[DEFAULT_MODULE_ID].target_q
    target.register_forward_hook(lambda mod, args, out: calls.append(len(args[0])))
    rng = np.random.default_rng(1)
    batch = _batch(rng, 4, rng.integers(0, 3, STEPS * ROWS))
    learner.update(
        batch, timesteps={"num_env_steps_sampled_lifetime": 256}, num_gradient_steps=STEPS
    )
    # step 0 by the module (the target moves after it), then steps 1..3 in one pass
    assert calls == [ROWS, (STEPS - 1) * ROWS]
    calls.clear()
    learner.update(
        batch, timesteps={"num_env_steps_sampled_lifetime": 260}, num_gradient_steps=STEPS
    )
    assert calls == [STEPS * ROWS]  # 4 env steps since the last move: not due, one pass


def test_sac_steps_in_one_call_match_step_by_step() -> None:
    rng = np.random.default_rng(2)
    learner = _sac(target_network_update_freq=0, tau=0.005)
    batch = _batch(rng, 3, rng.uniform(-2, 2, (STEPS * ROWS, 1)).astype(np.float32))
    _compare(learner, batch, 500)


def test_rows_must_split_into_equal_blocks() -> None:
    learner = _dqn()
    rng = np.random.default_rng(3)
    batch = _batch(rng, 4, rng.integers(0, 3, 10))
    with pytest.raises(ValueError, match="not a multiple of num_gradient_steps=4"):
        learner.update(batch, num_gradient_steps=4)
    with pytest.raises(ValueError, match="num_gradient_steps=0"):
        learner.update(batch, num_gradient_steps=0)


def test_dqn_training_iteration_samples_once_with_uniform_replay() -> None:
    config = (
        DQNConfig()
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
        .environment("CartPole-v1")
        .debugging(seed=0)
        .env_runners(rollout_fragment_length=32)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .training(
            num_steps_sampled_before_learning_starts=32,
            train_batch_size=8,
            training_intensity=2,
            target_network_update_freq=10,
            replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 1000},
        )
    )
    algo = config.build_algo()
    try:
        sizes: list[int] = []
        sample = algo.replay_buffer.sample
        algo.replay_buffer.sample = lambda n, **kw: sizes.append(n) or sample(n, **kw)  # type: ignore[method-assign]
        result = algo.train()
        assert sizes == [64]  # 2 x 32 rows / 8 per step = 8 steps, one draw of 8 x 8
        assert result["learners"][ALL_MODULES]["num_gradient_steps"] == 8
    finally:
        algo.stop()


def test_without_double_q_the_module_skips_the_online_pass_over_new_obs() -> None:
    learner = _dqn(double_q=False, target_network_update_freq=1000)
    assert learner.module is not None
    calls: list[int] = []
    module = learner.module[DEFAULT_MODULE_ID]
    module.q.register_forward_hook(lambda mod, args, out: calls.append(len(args[0])))
    rng = np.random.default_rng(4)
    batch = _batch(rng, 4, rng.integers(0, 3, STEPS * ROWS))
    learner.update(
        batch, timesteps={"num_env_steps_sampled_lifetime": 100}, num_gradient_steps=STEPS
    )
    assert calls == [ROWS] * STEPS  # Q(obs) only; with double Q also Q(new_obs)
    _compare(_dqn(double_q=False, target_network_update_freq=10), batch, 256)
