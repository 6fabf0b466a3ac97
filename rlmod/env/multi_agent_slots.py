"""AgentSlots and ActingAgents: the vectorized MultiAgentEnvRunner's per-agent state.

A slot is one (env, agent) pair, `env_index * len(possible_agents) + agent_index`.
AgentSlots holds, per slot, the agent's module and agent-episode in its env's current
episode, the reward it received since it last acted, its return and whether it observed;
ActingAgents says who acts in the next step and where their actions sit in the step's
acting order. Used by MultiAgentEnvRunner (rlmod/env/multi_agent_env_runner.py, whose
docstring has the row lifecycle and the table of index spaces); rows live in RowStore
(rlmod/env/multi_agent_rows.py).
"""

from __future__ import annotations

from itertools import chain, compress
from typing import TYPE_CHECKING

import numpy as np

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array, BoolArray, FloatArray, IntArray
from rlmod.env.episodes import EpisodeInfo
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import AgentID, MultiAgentEnv, unknown_agent_error
from rlmod.env.multi_agent_observations import ObservationIntake
from rlmod.errors import UnknownModuleIDError

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig
    from rlmod.env.multi_agent_rows import EnvReturns

_NO_SLOTS: IntArray = np.zeros(0, np.int64)
"""An env's acting slots when none of its agents acts next."""


class AgentSlots:
    """Per slot: the agent's module, episode and row state.

    Arrays indexed by slot (`env_index * len(agents) + agent_index`), written by these
    methods and by MultiAgentEnvRunner only.

    Attributes:
        module_of: The agent's module index, valid in the env episode `episode_of` names
            (-1 there: not mapped yet).
        episode_of: The env episode the agent was last mapped in.
        agent_episode_of: The agent-episode ID (the batch's eps_id column).
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
        intake: ObservationIntake,
    ) -> None:
        self.config = config
        self.agents = agents
        self.agent_index = {a: i for i, a in enumerate(agents)}
        self.module_index = module_index
        self.module_ids = list(module_index)
        self.spaces = spaces
        self.intake = intake
        self.envs = envs  # the runner's list (a restarted env replaces its entry)
        n = num_envs * len(agents)
        self.module_of = np.zeros(n, np.int64)
        self.episode_of = np.full(n, -1, np.int64)
        self.agent_episode_of = np.zeros(n, np.int64)
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

    def modules_of(self, keys: tuple, slots: IntArray) -> dict[AgentID, ModuleID]:
        """Agent ID -> module ID of `keys` (agent IDs) at `slots`."""
        mods = self.module_of[slots].tolist()
        return {a: self.module_ids[m] for a, m in zip(keys, mods, strict=True)}

    def add_rewards(self, slots: IntArray, rewards: FloatArray) -> None:
        """Adds rewards to what these agents received since they last acted, and to their
        episode returns (after checking they are finite: one check per call)."""
        if self.intake.check_finite and not np.isfinite(rewards).all():
            self.intake.raise_non_finite(slots[~np.isfinite(rewards)], "rewards")
        self.pending_reward[slots] += rewards
        self.episode_return[slots] += rewards

    def book_rewards(self, returns: EnvReturns, slots: IntArray) -> None:
        """Adds the rewards of the agents that observed (all envs' in one array);
        `slots` are the slots of all observing agents, in env order."""
        if not returns.reward_dicts:
            return
        rewards = np.fromiter(
            chain.from_iterable(r.values() for r in returns.reward_dicts),
            np.float64,
            sum(map(len, returns.reward_dicts)),
        )
        # Usually every env rewarded all agents that observed: their slots are `slots`.
        self.add_rewards(
            slots
            if len(returns.reward_dicts) == len(self.envs)
            else np.concatenate(returns.reward_slots),
            rewards,
        )

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


class ActingAgents:
    """The agents that act in the next step: per env, their IDs (in the env's order) and
    slots, and the offset of their actions in the step's acting order (envs in the order
    of `add` calls); `num` in all. A fresh one per step: nobody in an env acts until `add`
    says so (an env whose observers were all done acts with nobody)."""

    def __init__(self, num_envs: int) -> None:
        self.agents: list[tuple] = [()] * num_envs
        self.slots: list[IntArray] = [_NO_SLOTS] * num_envs
        self.offset = [0] * num_envs
        self.num = 0

    def add(self, e: int, keys: tuple, slots: IntArray) -> None:
        """Env `e`'s agents `keys` (at `slots`) act next, after those added before."""
        self.agents[e], self.slots[e] = keys, slots
        self.offset[e] = self.num
        self.num += len(keys)

    def add_observers(self, returns: EnvReturns, acts_next: BoolArray, ended: set[int]) -> None:
        """Who acts next in each env whose episode goes on (not in `ended`): all that
        observed where no flag is set, else those not done (`acts_next`, per observation)."""
        first_flagged_obs = {f.env: f.first_obs for f in returns.flagged}
        for e, (obs_agents, slots) in enumerate(
            zip(returns.obs_agents, returns.slots, strict=True)
        ):
            if e in ended:
                continue  # reset (or restarted): its new agents act
            start = first_flagged_obs.get(e)
            if start is None:
                self.add(e, obs_agents, slots)
                continue
            mask = acts_next[start : start + len(obs_agents)]
            if mask.any():
                self.add(e, tuple(compress(obs_agents, mask.tolist())), slots[mask])
