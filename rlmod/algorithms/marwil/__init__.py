"""MARWIL: advantage-weighted imitation of recorded episodes (offline)."""

from rlmod.algorithms.marwil.marwil import MARWIL, MARWILConfig
from rlmod.algorithms.marwil.marwil_learner import MARWILLearner

__all__ = ["MARWIL", "MARWILConfig", "MARWILLearner"]
