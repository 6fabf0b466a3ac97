"""DQN: config, algorithm, learner and default module."""

from rlmod.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule
from rlmod.algorithms.dqn.dqn import DQN, DQNConfig
from rlmod.algorithms.dqn.dqn_learner import DQNLearner

__all__ = ["DQN", "DQNConfig", "DQNLearner", "DefaultDQNRLModule"]
