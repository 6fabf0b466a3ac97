"""Replay buffers for off-policy algorithms: uniform, prioritized, one per module, n-step."""

from rlmod.replay.multi_agent import MultiAgentReplayBuffer, check_replay_buffer_config
from rlmod.replay.n_step import N_STEP, NStepCollector, compute_n_step
from rlmod.replay.replay_buffer import WEIGHTS, PrioritizedReplayBuffer, ReplayBuffer
from rlmod.replay.sum_tree import MinTree, SumTree

__all__ = [
    "N_STEP",
    "WEIGHTS",
    "MinTree",
    "MultiAgentReplayBuffer",
    "NStepCollector",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "SumTree",
    "check_replay_buffer_config",
    "compute_n_step",
]
