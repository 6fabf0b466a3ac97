"""SAC: config, algorithm, learner and default module (Box and Discrete actions)."""

from rlmod.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from rlmod.algorithms.sac.sac import SAC, SACConfig
from rlmod.algorithms.sac.sac_learner import SACLearner

__all__ = ["SAC", "DefaultSACRLModule", "SACConfig", "SACLearner"]
