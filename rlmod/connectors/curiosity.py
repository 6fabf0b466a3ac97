"""Curiosity learner connector: adds a learner-only module's intrinsic rewards to a batch.

Run by Learners once per `update()`, as `config.learner_connector`, so before GAE; the
curiosity modules are in `rlmod.core.curiosity`. EnvRunners never see any of this.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlmod.connectors.learner import LearnerConnector
from rlmod.core.apis import find_intrinsic_rewards
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.core.curiosity import ICM_MODULE_ID, CuriosityModelConfig
from rlmod.core.learner import TensorBatch
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.errors import UnknownModuleIDError

CURIOSITY_COLUMNS = (Columns.OBS, Columns.NEXT_OBS, Columns.ACTIONS)
"""What a curiosity module trains on: transitions (s_t, a_t, s_t+1)."""


class IntrinsicCuriosityModelConnector(LearnerConnector):
    """rewards += eta * r_int, with r_int from the curiosity module `module_id`.

    On each update, the module (an `IntrinsicCuriosityModel`, or any module with
    `compute_intrinsic_rewards`, e.g. `RandomNetworkDistillation`) runs without gradients on
    the policy's train batch; its raw output is stored as `intrinsic_rewards` and eta times
    it is added to `rewards`, so GAE, which runs after the user's learner connectors, sees
    the sum. The transition columns are then put under `module_id` in the batch (the same
    tensors, not copies), so the Learner trains the curiosity module on its own minibatches
    in the same `update()` as the policy.

    The class itself is a valid `config.learner_connector` (it is called with the
    observation and action spaces, which it does not need), so JSON configs can name it as
    `{"__import__": "rlmod.connectors.curiosity:IntrinsicCuriosityModelConnector"}`.

    Args:
        observation_space: Ignored; here so that the class is a learner-connector factory.
        action_space: Ignored, likewise.
        intrinsic_reward_coeff: eta. None (default) reads the curiosity module's
            `model_config["intrinsic_reward_coeff"]` (0.05 unless set), which keeps the whole
            curiosity setup in its spec, and so in JSON.
        module_id: The curiosity module's ID.
        policy_module_id: The module whose rewards get the bonus.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> from rlmod.core import MultiRLModuleSpec, RLModuleSpec
        >>> from rlmod.core.curiosity import IntrinsicCuriosityModel
        >>> config = PPOConfig().environment("FrozenLake-v1").training(
        ...     learner_connector=IntrinsicCuriosityModelConnector).rl_module(
        ...     rl_module_spec=MultiRLModuleSpec(rl_module_specs={
        ...         "default_policy": RLModuleSpec(),
        ...         "icm": RLModuleSpec(module_class=IntrinsicCuriosityModel, learner_only=True)}),
        ...     algorithm_config_overrides_per_module={"icm": {"lr": 5e-4}})
    """

    def __init__(self, observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, *,
                 intrinsic_reward_coeff: float | None = None,
                 module_id: ModuleID = ICM_MODULE_ID,
                 policy_module_id: ModuleID = DEFAULT_MODULE_ID) -> None:
        if intrinsic_reward_coeff is not None and intrinsic_reward_coeff < 0:
            raise ValueError(
                f"intrinsic_reward_coeff={intrinsic_reward_coeff} must be >= 0 (None reads "
                "the curiosity module's model_config)."
            )
        self.intrinsic_reward_coeff = intrinsic_reward_coeff
        self.module_id = module_id
        self.policy_module_id = policy_module_id

    def __call__(  # type: ignore[override]
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        if self.module_id not in rl_module:
            raise UnknownModuleIDError(
                f"IntrinsicCuriosityModelConnector(module_id={self.module_id!r}) found no such "
                f"module on the Learner (modules: {rl_module.keys()[:10]}). Add it to "
                "config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={..., "
                f"{self.module_id!r}: RLModuleSpec(module_class=IntrinsicCuriosityModel, "
                "learner_only=True)}))."
            )
        cols = batch.get(self.policy_module_id)
        if cols is None:  # this Learner got no rows of the policy this time
            return batch
        curiosity = rl_module[self.module_id]
        compute_intrinsic_rewards = find_intrinsic_rewards(curiosity)
        if compute_intrinsic_rewards is None:
            raise TypeError(
                f"Module {self.module_id!r} ({type(curiosity).__name__}) has no "
                "compute_intrinsic_rewards(batch) -> [B] tensor; use IntrinsicCuriosityModel, "
                "RandomNetworkDistillation or a module that defines it."
            )
        eta = self.intrinsic_reward_coeff
        if eta is None:
            eta = float(getattr(getattr(curiosity, "config", None), "intrinsic_reward_coeff",
                                CuriosityModelConfig.intrinsic_reward_coeff))
        with torch.no_grad():
            r_int = compute_intrinsic_rewards(cols)  # [B]
        cols[Columns.INTRINSIC_REWARDS] = r_int
        cols[Columns.REWARDS] = cols[Columns.REWARDS] + eta * r_int  # new tensor: no aliasing
        batch[self.module_id] = {c: cols[c] for c in CURIOSITY_COLUMNS}
        return batch
