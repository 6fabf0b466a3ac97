"""Connector pipelines: env-to-module, module-to-env and learner."""

from rlmod.connectors.connector_v2 import ConnectorV2, SingleAgentObservationPreprocessor
from rlmod.connectors.curiosity import IntrinsicCuriosityModelConnector
from rlmod.connectors.env_to_module import (
    EnvToModule,
    FlattenObservations,
    FrameStacking,
    FrameStackingEnvToModule,
    MeanStdFilter,
    OneHotObservations,
)
from rlmod.connectors.learner import GeneralAdvantageEstimation, LearnerConnector, compute_gae
from rlmod.connectors.module_to_env import ActionsToEnvSpace, GetActions, ModuleToEnv
from rlmod.connectors.pipeline import Connector, ConnectorPipeline

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
    "OneHotObservations",
    "SingleAgentObservationPreprocessor",
    "compute_gae",
]
