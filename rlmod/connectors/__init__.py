"""Connector pipelines: env-to-module, module-to-env and learner."""

from rlmod.connectors.curiosity import IntrinsicCuriosityModelConnector
from rlmod.connectors.env_to_module import (
    EnvToModule,
    FlattenObservations,
    FrameStacking,
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
    "EnvToModule",
    "FlattenObservations",
    "FrameStacking",
    "GeneralAdvantageEstimation",
    "GetActions",
    "IntrinsicCuriosityModelConnector",
    "LearnerConnector",
    "MeanStdFilter",
    "ModuleToEnv",
    "OneHotObservations",
    "compute_gae",
]
