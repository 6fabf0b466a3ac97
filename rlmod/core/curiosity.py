"""The curiosity modules' old import path: they live in `rlmod.curiosity` (with their
connector); configs and checkpoints saved with this path (`module_class` of a spec) still
load through these names."""

from rlmod.curiosity import (
    ICM_MODULE_ID,
    CuriosityModelConfig,
    IntrinsicCuriosityModel,
    RandomNetworkDistillation,
)

__all__ = [
    "ICM_MODULE_ID",
    "CuriosityModelConfig",
    "IntrinsicCuriosityModel",
    "RandomNetworkDistillation",
]
