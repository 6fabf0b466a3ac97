"""EnvRunners, their group, multi-agent envs (and the PettingZoo adapter) and env creation.

`ParallelPettingZooEnv` imports pettingzoo only when an env is wrapped, so this package
imports without it."""

from rlmod.env.env_runner import ENV_SPACES_KEY, EnvRunner
from rlmod.env.env_runner_group import EnvRunnerGroup
from rlmod.env.episodes import EpisodeInfo, MultiAgentEpisode, SingleAgentEpisode
from rlmod.env.multi_agent_env import MultiAgentEnv, make_multi_agent
from rlmod.env.multi_agent_env_runner import MultiAgentEnvRunner
from rlmod.env.pettingzoo_env import ParallelPettingZooEnv
from rlmod.env.registry import make_env, register_env
from rlmod.env.single_agent_env_runner import SingleAgentEnvRunner

__all__ = [
    "ENV_SPACES_KEY",
    "EnvRunner",
    "EnvRunnerGroup",
    "EpisodeInfo",
    "MultiAgentEnv",
    "MultiAgentEnvRunner",
    "MultiAgentEpisode",
    "ParallelPettingZooEnv",
    "SingleAgentEnvRunner",
    "SingleAgentEpisode",
    "make_env",
    "make_multi_agent",
    "register_env",
]
