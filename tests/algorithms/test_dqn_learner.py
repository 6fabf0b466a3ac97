"""DQNLearner's loss (rlmod.algorithms.dqn.dqn_learner) against a hand computation on a
batch of three rows with Q-values given: the importance-weighted TD loss (Huber and
squared), double Q's argmax from the online network, precomputed TD targets taking
precedence, the per-row TD errors kept for the priorities, and no gradient through the
targets.

DQN's targets alone (q_learning_targets), the target network, epsilon and learning are
tested in tests/algorithms/test_dqn.py and tests/algorithms/test_off_policy*.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.dqn.default_dqn_rl_module import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS
from rlmod.algorithms.dqn.dqn_learner import TD_TARGETS, DQNLearner
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.replay import N_STEP, WEIGHTS

MID = DEFAULT_MODULE_ID
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
G = 0.5


def _learner(**training: object) -> tuple[DQNLearner, object]:
    config = DQNConfig().training(gamma=G, **training)
    spec = config.get_multi_rl_module_spec(spaces={MID: (BOX, gym.spaces.Discrete(2))})
    learner = DQNLearner(config=config, module_spec=spec)
    learner.build()
    return learner, config.get_config_for_module(MID)


def _inputs() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    batch = {
        Columns.ACTIONS: torch.tensor([0, 1, 1]),
        Columns.REWARDS: torch.tensor([1.0, 0.0, -1.0]),
        Columns.TERMINATEDS: torch.tensor([False, True, False]),
        N_STEP: torch.tensor([1, 1, 2]),
        WEIGHTS: torch.tensor([1.0, 0.5, 2.0]),
    }
    fwd = {
        QF_PREDS: torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, -0.5]], requires_grad=True),
        QF_TARGET_NEXT_PREDS: torch.tensor([[4.0, 2.0], [9.0, 9.0], [0.0, 6.0]]),
        QF_NEXT_PREDS: torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]),
    }
    return batch, fwd


# Q(s, a) of the taken actions: 2.0, 3.0, -0.5
# targets, target argmax:      1 + G * 4 = 3,  0 (terminated),  -1 + G**2 * 6 = 0.5
# targets, double Q (online):  1 + G * 2 = 2,  0,               -1 + G**2 * 0 = -1
PLAIN_TD = torch.tensor([2.0 - 3.0, 3.0 - 0.0, -0.5 - 0.5])
DOUBLE_TD = torch.tensor([2.0 - 2.0, 3.0 - 0.0, -0.5 + 1.0])
W = torch.tensor([1.0, 0.5, 2.0])


def _huber(td: torch.Tensor) -> torch.Tensor:
    return torch.where(td.abs() <= 1.0, 0.5 * td**2, td.abs() - 0.5)


@pytest.mark.parametrize(
    ("double_q", "loss_fn", "td", "per_row"),
    [
        (False, "huber", PLAIN_TD, _huber),
        (True, "huber", DOUBLE_TD, _huber),
        (False, "mse", PLAIN_TD, lambda td: 0.5 * td**2),
    ],
)
def test_the_weighted_td_loss_by_hand(double_q, loss_fn, td, per_row):
    learner, config = _learner(double_q=double_q, td_error_loss_fn=loss_fn)
    batch, fwd = _inputs()
    loss = learner.compute_loss_for_module(module_id=MID, config=config, batch=batch, fwd_out=fwd)
    torch.testing.assert_close(loss, (W * per_row(td)).mean())
    [recorded] = learner._td_errors[MID]
    torch.testing.assert_close(recorded, td)
    assert not recorded.requires_grad


def test_gradients_flow_to_the_taken_q_values_only():
    learner, config = _learner(double_q=False, td_error_loss_fn="mse")
    batch, fwd = _inputs()
    loss = learner.compute_loss_for_module(module_id=MID, config=config, batch=batch, fwd_out=fwd)
    loss.backward()
    grad = fwd[QF_PREDS].grad
    taken = batch[Columns.ACTIONS]
    # d/dq of mean(w * 0.5 * (q - y)^2) = w * (q - y) / B at the taken action, 0 elsewhere
    torch.testing.assert_close(grad[torch.arange(3), taken], W * PLAIN_TD / 3)
    torch.testing.assert_close(grad[torch.arange(3), 1 - taken], torch.zeros(3))


def test_precomputed_td_targets_take_precedence():
    learner, config = _learner(double_q=False, td_error_loss_fn="mse")
    batch, fwd = _inputs()
    batch[TD_TARGETS] = torch.tensor([2.0, 3.0, -0.5])  # exactly the Q-values: no error
    loss = learner.compute_loss_for_module(module_id=MID, config=config, batch=batch, fwd_out=fwd)
    assert float(loss.detach()) == 0.0
