"""Algorithm, AlgorithmConfig, and one sub-package per algorithm (ppo, ...)."""

from rlmod.algorithms.algorithm import Algorithm
from rlmod.algorithms.algorithm_config import AlgorithmConfig

__all__ = ["Algorithm", "AlgorithmConfig"]
