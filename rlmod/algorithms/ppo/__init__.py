"""PPO: config, algorithm, learner and default module."""

from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from rlmod.algorithms.ppo.ppo import PPO, PPOConfig
from rlmod.algorithms.ppo.ppo_learner import PPOLearner

__all__ = ["PPO", "DefaultPPORLModule", "PPOConfig", "PPOLearner"]
