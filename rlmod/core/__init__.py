"""Modules and their specs, distributions, Learner and LearnerGroup."""

from rlmod.core.apis import ValueFunctionAPI
from rlmod.core.columns import ALL_MODULES, DEFAULT_MODULE_ID, Columns
from rlmod.core.learner import Learner
from rlmod.core.learner_group import LearnerGroup
from rlmod.core.models import DefaultModelConfig
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule, MultiRLModuleSpec
from rlmod.core.rl_module import RLModule, RLModuleSpec, TorchRLModule

# The curiosity modules live in rlmod.curiosity (with their connector, which builds on
# this package); offered here as before, imported on first use.
_CURIOSITY = ("IntrinsicCuriosityModel", "RandomNetworkDistillation")


def __getattr__(name: str) -> object:
    if name in _CURIOSITY:
        import rlmod.curiosity

        return getattr(rlmod.curiosity, name)
    raise AttributeError(f"module 'rlmod.core' has no attribute {name!r}")


__all__ = [
    "ALL_MODULES",
    "DEFAULT_MODULE_ID",
    "Columns",
    "DefaultModelConfig",
    "IntrinsicCuriosityModel",
    "Learner",
    "LearnerGroup",
    "ModuleID",
    "MultiRLModule",
    "MultiRLModuleSpec",
    "RLModule",
    "RLModuleSpec",
    "RandomNetworkDistillation",
    "TorchRLModule",
    "ValueFunctionAPI",
]
