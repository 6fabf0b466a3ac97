"""Algorithm, AlgorithmConfig, and one sub-package per algorithm (ppo, ...)."""

from rlmod.algorithms.algorithm import Algorithm
from rlmod.algorithms.algorithm_config import AlgorithmConfig
from rlmod.algorithms.inference import InferencePolicy
from rlmod.algorithms.policy_spec import PolicySpec

__all__ = ["Algorithm", "AlgorithmConfig", "InferencePolicy", "PolicySpec"]
