"""Connector pipelines: env-to-module, module-to-env and learner."""

from rlmod.connectors.connector_v2 import ConnectorV2, SingleAgentObservationPreprocessor
from rlmod.connectors.env_to_module import (
    EnvToModule,
    FlattenObservations,
    FrameStacking,
    FrameStackingEnvToModule,
    MeanStdFilter,
    OneHotObservations,
    PackObservations,
)
from rlmod.connectors.learner import GeneralAdvantageEstimation, LearnerConnector, compute_gae
from rlmod.connectors.learner_rewards import NormalizeRewards
from rlmod.connectors.module_to_env import ActionsToEnvSpace, GetActions, ModuleToEnv
from rlmod.connectors.pipeline import Connector, ConnectorPipeline


def __getattr__(name: str) -> object:
    # The curiosity connector lives in rlmod.curiosity, with the modules it calls (which
    # build on this package); offered here as before, imported on first use.
    if name == "IntrinsicCuriosityModelConnector":
        import rlmod.curiosity

        return rlmod.curiosity.IntrinsicCuriosityModelConnector
    raise AttributeError(f"module 'rlmod.connectors' has no attribute {name!r}")


__all__ = [
    "ActionsToEnvSpace",
    "Connector",
    "ConnectorPipeline",
    "ConnectorV2",
    "EnvToModule",
    "FlattenObservations",
    "FrameStacking",
    "FrameStackingEnvToModule",
    "GeneralAdvantageEstimation",
    "GetActions",
    "IntrinsicCuriosityModelConnector",
    "LearnerConnector",
    "MeanStdFilter",
    "ModuleToEnv",
    "NormalizeRewards",
    "OneHotObservations",
    "PackObservations",
    "SingleAgentObservationPreprocessor",
    "compute_gae",
]
