"""Tests of the module APIs and the optional-method seams (rlmod/core/apis.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from rlmod.core.apis import (
    ValueFunctionAPI,
    find_compute_values,
    find_intrinsic_rewards,
    find_self_supervised_loss,
)
from rlmod.curiosity import IntrinsicCuriosityModel

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


class DuckValues:
    """Offers compute_values without inheriting ValueFunctionAPI (a duck-typed module)."""

    def compute_values(self, batch, embeddings=None):
        return batch["obs"].sum(-1)


def test_ppo_module_offers_values_and_no_loss_of_its_own():
    module = DefaultPPORLModule(observation_space=BOX, action_space=ACT)
    assert isinstance(module, ValueFunctionAPI)
    values = find_compute_values(module)
    assert values is not None and values({"obs": torch.zeros(3, 4)}).shape == (3,)
    assert find_self_supervised_loss(module) is None
    assert find_intrinsic_rewards(module) is None


def test_curiosity_module_offers_its_loss_and_intrinsic_rewards():
    icm = IntrinsicCuriosityModel(observation_space=BOX, action_space=ACT)
    assert find_self_supervised_loss(icm) is not None
    rewards = find_intrinsic_rewards(icm)
    assert rewards is not None
    batch = {
        "obs": torch.zeros(5, 4),
        "new_obs": torch.ones(5, 4),
        "actions": torch.zeros(5, dtype=torch.int64),
    }
    assert rewards(batch).shape == (5,)


def test_a_duck_typed_module_is_found_without_inheriting():
    values = find_compute_values(DuckValues())
    assert values is not None
    assert values({"obs": torch.ones(2, 3)}).tolist() == [3.0, 3.0]
    assert find_intrinsic_rewards(object()) is None
