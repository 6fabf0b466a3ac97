"""Tests of NormalizeRewards (rlmod/connectors/learner_rewards.py) by hand.

gamma = 0.5. A first batch holds episode 7's first three steps (rewards 1, 1, 1; cut by the
fragment end) and episode 8 whole (rewards 2, 2; terminated). Running discounted returns
ret_t = 0.5 * ret_{t-1} + r_t:

    episode 7: 1, 1.5, 1.75          episode 8: 2, 3

A second batch holds episode 7's last step (reward 1, terminated): its return goes on from
1.75, so 0.5 * 1.75 + 1 = 1.875 (1 if the carry were lost). Each batch's rewards are
divided by the standard deviation of all returns pushed so far.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmod.connectors import NormalizeRewards
from rlmod.core import Columns

FIRST_RETURNS = [1.0, 1.5, 1.75, 2.0, 3.0]


def _batch(rewards, eps_ids, seq_ends, terminateds):
    return {
        "default_policy": {
            Columns.REWARDS: torch.tensor(rewards, dtype=torch.float32),
            Columns.EPS_ID: torch.tensor(eps_ids),
            Columns.SEQ_ENDS: torch.tensor(seq_ends),
            Columns.TERMINATEDS: torch.tensor(terminateds),
            Columns.TRUNCATEDS: torch.zeros(len(rewards), dtype=torch.bool),
        }
    }


def _first():
    return _batch(
        [1.0, 1.0, 1.0, 2.0, 2.0],
        [7, 7, 7, 8, 8],
        [False, False, True, False, True],
        [False, False, False, False, True],
    )


def _second():
    return _batch([1.0], [7], [True], [True])


def test_rewards_are_divided_by_the_std_of_the_discounted_returns():
    conn = NormalizeRewards(gamma=0.5, epsilon=1e-12)
    out = conn(_first(), rl_module=None)["default_policy"][Columns.REWARDS]
    std = np.std(FIRST_RETURNS)  # population variance, as a running mean/var keeps it
    np.testing.assert_allclose(out.numpy(), np.array([1, 1, 1, 2, 2]) / std, rtol=1e-6)
    assert out.dtype == torch.float32


def test_an_unfinished_episode_carries_its_return_into_the_next_batch():
    conn = NormalizeRewards(gamma=0.5, epsilon=1e-12)
    conn(_first(), rl_module=None)
    out = conn(_second(), rl_module=None)["default_policy"][Columns.REWARDS]
    std = np.std([*FIRST_RETURNS, 1.875])
    np.testing.assert_allclose(out.numpy(), [1.0 / std], rtol=1e-6)
    assert conn.get_state()["default_policy"]["open_eps_ids"].size == 0  # 7 ended


def test_a_finished_episode_is_not_carried_on():
    conn = NormalizeRewards(gamma=0.5, epsilon=1e-12)
    conn(_first(), rl_module=None)
    assert conn.get_state()["default_policy"]["open_eps_ids"].tolist() == [7]
    truncated = _batch([1.0], [9], [True], [False])
    truncated["default_policy"][Columns.TRUNCATEDS][:] = True
    conn(truncated, rl_module=None)
    assert conn.get_state()["default_policy"]["open_eps_ids"].tolist() == [7]


def test_scaled_rewards_are_clipped():
    conn = NormalizeRewards(gamma=0.5, clip=3.0)
    # One return so far: variance 0, so the reward over sqrt(epsilon) is far above the clip.
    out = conn(_batch([-1.0], [1], [True], [True]), rl_module=None)
    assert out["default_policy"][Columns.REWARDS].tolist() == [-3.0]


def test_state_round_trip_continues_as_the_uninterrupted_connector():
    conn = NormalizeRewards(gamma=0.5)
    conn(_first(), rl_module=None)
    restored = NormalizeRewards(gamma=0.5)
    restored.set_state(conn.get_state())
    a = conn(_second(), rl_module=None)["default_policy"][Columns.REWARDS]
    b = restored(_second(), rl_module=None)["default_policy"][Columns.REWARDS]
    assert torch.equal(a, b)


def test_bad_arguments_and_missing_columns_are_errors():
    with pytest.raises(ValueError, match="gamma must be in"):
        NormalizeRewards(gamma=1.5)
    with pytest.raises(ValueError, match="both must be > 0"):
        NormalizeRewards(clip=0.0)
    batch = _first()
    del batch["default_policy"][Columns.EPS_ID]
    with pytest.raises(ValueError, match="needs the 'eps_id' column"):
        NormalizeRewards()(batch, rl_module=None)


class _Recording(NormalizeRewards):
    """NormalizeRewards that keeps the rewards it hands on to GAE."""

    seen: list[torch.Tensor] = []

    def __call__(self, batch, **kwargs):
        out = super().__call__(batch, **kwargs)
        _Recording.seen.append(out["default_policy"][Columns.REWARDS].clone())
        return out


def _recording(obs_space, act_space):
    return _Recording(gamma=0.9)


def test_ppo_trains_on_scaled_rewards_reports_raw_returns_and_checkpoints_the_state(tmp_path):
    from rlmod.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(
            train_batch_size=256,
            minibatch_size=128,
            num_epochs=1,
            gamma=0.9,
            learner_connector=_recording,
        )
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .debugging(seed=0)
    )
    algo = config.build_algo()
    result = algo.train()
    runners = result["env_runners"]
    # CartPole pays 1 per step: raw episode returns are the episode lengths.
    assert runners["episode_return_mean"] == pytest.approx(runners["episode_len_mean"])
    # The Learner trained on rewards of 1 / std(return), std well above 1 for gamma 0.9.
    assert _Recording.seen and float(_Recording.seen[-1].max()) < 0.9
    algo.save_to_path(str(tmp_path))
    fresh = config.build_algo()
    fresh.restore_from_path(str(tmp_path))

    def stats(a):
        piece = a.learner_group.learner._learner_connector.connectors[0]
        return piece.get_state()["default_policy"]

    saved, restored = stats(algo), stats(fresh)
    assert restored["n"] == saved["n"] > 0
    np.testing.assert_array_equal(restored["open_eps_ids"], saved["open_eps_ids"])
    # Restoring into a Learner without the connector would drop its statistics: refused.
    bare = config.copy().training(learner_connector=None).build_algo()
    with pytest.raises(Exception, match="does not fit this pipeline") as err:
        bare.restore_from_path(str(tmp_path))
    assert "learner_connector" in str(err.value)
    for a in (algo, fresh, bare):
        a.stop()
