"""PPOLearnerWithCuriosity: PPO's Learner with an intrinsic curiosity model, set up the
way RLlib's ICM example sets it up (`learner_class` + `learner_config_dict`).

Used through `config.training(learner_class=PPOLearnerWithCuriosity,
learner_config_dict={...})`; rlmod's own wiring (`learner_connector=
IntrinsicCuriosityModelConnector`, see examples/curiosity) does the same from the config.
"""

from __future__ import annotations

import dataclasses

from rlmod.algorithms.ppo.ppo_learner import PPOLearner
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.curiosity import ICM_MODULE_ID, IntrinsicCuriosityModelConnector

RLLIB_ICM_MODULE_ID = "_intrinsic_curiosity_model"
"""The curiosity module's ID in RLlib's example; rlmod's own examples call it "icm"."""


class PPOLearnerWithCuriosity(PPOLearner):
    """RLlib's `PPOTorchLearnerWithCuriosity` (ray 2.60,
    `ray/rllib/examples/learners/classes/intrinsic_curiosity_learners.py`): after building,
    puts an IntrinsicCuriosityModelConnector with `learner_config_dict["intrinsic_reward_coeff"]`
    in front of PPO's learner pipeline (so GAE sees the extrinsic plus intrinsic reward), and
    trains the curiosity module with `learner_config_dict["forward_loss_weight"]` as beta.

    The curiosity module is the learner-only module named "_intrinsic_curiosity_model"
    (RLlib's ID) or "icm" (rlmod's), next to `default_policy`.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> from rlmod.core import MultiRLModuleSpec, RLModuleSpec
        >>> from rlmod.curiosity import IntrinsicCuriosityModel
        >>> config = PPOConfig().environment("FrozenLake-v1").training(
        ...     learner_class=PPOLearnerWithCuriosity,
        ...     learner_config_dict={"intrinsic_reward_coeff": 0.05, "forward_loss_weight": 0.2},
        ... ).rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={
        ...     "default_policy": RLModuleSpec(),
        ...     "_intrinsic_curiosity_model": RLModuleSpec(
        ...         module_class=IntrinsicCuriosityModel, learner_only=True)}))
    """

    def build(self) -> None:
        super().build()
        assert self.module is not None
        settings = self.config.learner_config_dict
        missing = [
            k for k in ("intrinsic_reward_coeff", "forward_loss_weight") if k not in settings
        ]
        if missing:
            raise KeyError(
                f"{type(self).__name__} needs {missing} in the config's learner_config_dict, "
                "as RLlib's PPOTorchLearnerWithCuriosity does: config.training(learner_config"
                "_dict={'forward_loss_weight': 0.2, 'intrinsic_reward_coeff': 0.05})."
            )
        icm_id = next((m for m in (RLLIB_ICM_MODULE_ID, ICM_MODULE_ID) if m in self.module), None)
        if icm_id is None or DEFAULT_MODULE_ID not in self.module:
            raise KeyError(
                f"{type(self).__name__} needs the modules {DEFAULT_MODULE_ID!r} and "
                f"{RLLIB_ICM_MODULE_ID!r} (or {ICM_MODULE_ID!r}) in rl_module_spec; the "
                f"Learner holds {list(self.module.keys())[:10]}."
            )
        icm = self.module[icm_id]
        if hasattr(icm, "config") and dataclasses.is_dataclass(icm.config):
            icm.config = dataclasses.replace(
                icm.config, forward_loss_weight=float(settings["forward_loss_weight"])
            )
        self._learner_connector.connectors.insert(
            0,
            IntrinsicCuriosityModelConnector(
                intrinsic_reward_coeff=float(settings["intrinsic_reward_coeff"]), module_id=icm_id
            ),
        )


PPOTorchLearnerWithCuriosity = PPOLearnerWithCuriosity
"""RLlib's name (rlmod is PyTorch only)."""
