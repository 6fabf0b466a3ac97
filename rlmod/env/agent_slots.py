"""AgentSlots: a MultiAgentEnvRunner's per-(env, agent) bookkeeping in flat numpy arrays.

A "slot" is `env_index * len(possible_agents) + agent_index`; every array here has one entry
per slot, so a step's bookkeeping is array operations over all agents of all envs, and
Python touches an agent only to read the env's dicts. Also maps agents to modules: once
per agent and env episode (policy_mapping_fn), with the IDs and spaces checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array, IntArray
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import AgentID, MultiAgentEnv, unknown_agent_error
from rlmod.env.multi_agent_rows import EpisodeInfo
from rlmod.errors import UnknownModuleIDError

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig


class AgentSlots:
    """Per slot: the agent's module, episode and row state.

    Attributes:
        module_of: The agent's module index, valid in the env episode `episode_of` names
            (-1 there: not mapped yet).
        episode_of: The env episode the agent was last mapped in.
        agent_episode_of: The agent-episode ID (the batch's eps_id column).
        open_row: The row awaiting its outcome (its ID in its group's buffer), or -1.
        pending_reward: Reward since the agent last acted.
        episode_return: The agent's return in its current episode.
        observed: The agent has observed in its current episode.
    """

    def __init__(
        self,
        config: AlgorithmConfig,
        *,
        agents: list[AgentID],
        num_envs: int,
        module_index: dict[ModuleID, int],
        spaces: ModuleSpaces,
        envs: list[MultiAgentEnv],
    ) -> None:
        self.config = config
        self.agents = agents
        self.agent_index = {a: i for i, a in enumerate(agents)}
        self.module_index = module_index
        self.spaces = spaces
        self.envs = envs  # the runner's list (a restarted env replaces its entry)
        n = num_envs * len(agents)
        self.module_of = np.zeros(n, np.int64)
        self.episode_of = np.full(n, -1, np.int64)
        self.agent_episode_of = np.zeros(n, np.int64)
        self.open_row = np.full(n, -1, np.int64)
        self.pending_reward = np.zeros(n)
        self.episode_return = np.zeros(n)
        self.observed = np.zeros(n, bool)
        self.next_agent_episode_id = 0  # one per (env episode, agent)

    def __len__(self) -> int:
        return len(self.module_of)

    def block(self, e: int) -> slice[int, int, None]:
        """Env e's slots."""
        return slice(e * len(self.agents), (e + 1) * len(self.agents))

    def locate(self, slot: int) -> tuple[int, AgentID]:
        """(env index, agent ID) of a slot."""
        return slot // len(self.agents), self.agents[slot % len(self.agents)]

    def clear_episode(self, where: slice[int, int, None] | Array) -> None:
        """Forgets rewards, returns and observations of these slots (a new episode)."""
        self.pending_reward[where] = 0.0
        self.episode_return[where] = 0.0
        self.observed[where] = False

    def slots_for(self, e: int, keys: tuple, episode: EpisodeInfo) -> IntArray:
        """Slots of `keys` in env `e`; maps the agents that are new to the episode."""
        try:
            local = np.fromiter(map(self.agent_index.__getitem__, keys), np.int64, len(keys))
        except KeyError as err:
            raise unknown_agent_error(self.config.env, e, err.args[0], self.agents) from None
        slots = local + e * len(self.agents)
        stale = self.episode_of[slots] != episode.id_
        if stale.any():
            new = np.flatnonzero(stale)
            self._map_agents(e, episode, [keys[i] for i in new.tolist()], local[new], slots[new])
        return slots

    def _map_agents(
        self, e: int, episode: EpisodeInfo, agents: list, local: Array, slots: Array
    ) -> None:
        """Calls policy_mapping_fn once for each of these agents (new to the episode) and
        caches the answers for the episode; checks IDs and spaces."""
        fn, index = self.config.policy_mapping_fn, self.module_index
        mids = [fn(agent, episode) for agent in agents]
        try:
            mods = np.fromiter(map(index.__getitem__, mids), np.int64, len(mids))
        except (KeyError, TypeError):
            bad = next(i for i, mid in enumerate(mids) if mid not in index)
            raise UnknownModuleIDError(
                self.config.mapping_error_message(agents[bad], mids[bad])
            ) from None
        self.spaces.check_new_agents(e, self.envs[e], agents, mids, mods, local)
        self.module_of[slots] = mods
        self.episode_of[slots] = episode.id_
        first_id = self.next_agent_episode_id
        self.agent_episode_of[slots] = np.arange(first_id, first_id + len(slots))
        self.next_agent_episode_id += len(slots)
