"""MultiAgentEnv: rlmod's dict-based interface for environments with several agents.

MultiAgentEnvRunners step it; `ParallelPettingZooEnv` adapts PettingZoo envs to it and
`rlmod.env.env_checker.check_multi_agent_env` checks an implementation against it.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable, Hashable, Mapping
from typing import cast

import gymnasium as gym

from rlmod.errors import EnvError

AgentID = Hashable
"""The ID of one agent: any hashable value, usually a str or an int."""

MultiAgentDict = dict[AgentID, object]
"""A dict keyed by agent ID (plus `ALL_AGENTS` in terminateds and truncateds)."""

ALL_AGENTS = "__all__"
"""The key in terminateds and truncateds that says whether the whole episode is over."""


class MultiAgentEnv(abc.ABC):
    """MultiAgentEnv: an environment in which several agents act, all data keyed by agent ID.

    It follows the names of RLlib's `MultiAgentEnv`. Subclasses set `possible_agents`,
    `observation_spaces` and `action_spaces` in `__init__` and implement `reset` and `step`.

    The contract:

    - `reset()` returns `(obs, infos)`; `step(action_dict)` returns
      `(obs, rewards, terminateds, truncateds, infos)`, each a dict keyed by agent ID.
    - An agent that has an entry in `obs` acts in the next `step()` (its action goes into
      `action_dict`), unless `terminateds[aid]` or `truncateds[aid]` is True in the same
      step: then that obs is the agent's last and the agent has left the episode.
    - Agents may join mid-episode (they first appear in `obs`) and leave mid-episode.
    - `terminateds` and `truncateds` always hold the key `"__all__"` (`ALL_AGENTS`); the
      episode is over when either is True. rlmod's own envs set `truncateds["__all__"]`
      when an agent was truncated (and not terminated) in the final step, and
      `terminateds["__all__"]` otherwise.
    - `agents` lists the agents active now; all IDs come from `possible_agents`.

    Example:
        >>> from rlmod.testing import MultiAgentCartPole
        >>> env = MultiAgentCartPole({"num_agents": 2})
        >>> obs, infos = env.reset(seed=0)
        >>> sorted(obs), env.get_action_space(0)
        ([0, 1], Discrete(2))
        >>> obs, rewards, terminateds, truncateds, infos = env.step({0: 1, 1: 0})
        >>> rewards, terminateds["__all__"]
        ({0: 1.0, 1: 1.0}, False)
    """

    def __init__(self) -> None:
        """Initializes empty agent lists and space dicts for subclasses to fill."""
        self.possible_agents: list[AgentID] = []
        self.agents: list[AgentID] = []
        self.observation_spaces: dict[AgentID, gym.Space] = {}
        self.action_spaces: dict[AgentID, gym.Space] = {}

    @abc.abstractmethod
    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        """Starts a new episode.

        Args:
            seed: Seeds the env's random number generator when given.
            options: Env-specific reset options.

        Returns:
            The first observations and infos, keyed by agent ID.
        """

    @abc.abstractmethod
    def step(
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        """Applies one action per acting agent and advances the env by one step.

        Args:
            action_dict: One action for each agent that received an observation last step.

        Returns:
            `(obs, rewards, terminateds, truncateds, infos)`; terminateds and truncateds
            also hold the key `"__all__"`.
        """

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        """Returns the observation space of one agent."""
        return self._space(self.observation_spaces, "observation_spaces", agent_id)

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        """Returns the action space of one agent."""
        return self._space(self.action_spaces, "action_spaces", agent_id)

    @property
    def num_agents(self) -> int:
        """The number of agents active now."""
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        """The number of agents that can ever take part."""
        return len(self.possible_agents)

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Releases the env's resources (windows, processes); does nothing by default."""

    def _space(self, spaces: dict[AgentID, gym.Space], name: str, agent_id: AgentID) -> gym.Space:
        try:
            return spaces[agent_id]
        except KeyError:
            raise KeyError(
                f"{type(self).__name__}.{name} has no entry for agent {agent_id!r}; it has "
                f"{_preview(list(spaces))}. Set {name}[{agent_id!r}] in __init__ or use one "
                f"of possible_agents."
            ) from None


def make_multi_agent(
    env_name_or_creator: str | Callable[[dict[str, object]], gym.Env[object, object]],
) -> type[MultiAgentEnv]:
    """A MultiAgentEnv class whose agents each play their own copy of a single-agent env
    (RLlib's `make_multi_agent`, same arguments and behaviour).

    The class takes a config dict: `num_agents` (default 1) copies are made, by
    `gymnasium.make(env_name_or_creator)` or by calling the creator with the rest of the
    config. Agent IDs are 0 .. num_agents-1. An agent leaves when its copy ends; the
    episode is over when every agent has left (`truncateds["__all__"]` when all were
    truncated).

    Example:
        >>> ma_cartpole_cls = make_multi_agent("CartPole-v1")
        >>> env = ma_cartpole_cls({"num_agents": 2})
        >>> obs, infos = env.reset(seed=0)
        >>> sorted(obs), env.get_action_space(1)
        ([0, 1], Discrete(2))
    """
    if not (isinstance(env_name_or_creator, str) or callable(env_name_or_creator)):
        raise TypeError(
            "make_multi_agent takes a gymnasium env id (str) or a function config -> env; "
            f"got {type(env_name_or_creator).__name__}."
        )

    class MultiEnv(MultiAgentEnv):
        def __init__(self, config: Mapping[str, object] | None = None) -> None:
            super().__init__()
            rest = dict(copy.deepcopy(dict(config))) if config is not None else {}
            num = int(cast(int, rest.pop("num_agents", 1)))
            if isinstance(env_name_or_creator, str):
                self.envs = [gym.make(env_name_or_creator) for _ in range(num)]
            else:
                self.envs = [env_name_or_creator(rest) for _ in range(num)]
            self.terminateds: set[int] = set()
            self.truncateds: set[int] = set()
            self.observation_spaces = {i: e.observation_space for i, e in enumerate(self.envs)}
            self.action_spaces = {i: e.action_space for i, e in enumerate(self.envs)}
            self.agents = list(range(num))
            self.possible_agents = list(self.agents)

        def reset(
            self, *, seed: int | None = None, options: dict[str, object] | None = None
        ) -> tuple[MultiAgentDict, MultiAgentDict]:
            self.terminateds, self.truncateds = set(), set()
            obs: MultiAgentDict = {}
            infos: MultiAgentDict = {}
            for i, env in enumerate(self.envs):
                obs[i], infos[i] = env.reset(seed=seed, options=options)
            self.agents = list(self.possible_agents)
            return obs, infos

        def step(
            self, action_dict: MultiAgentDict
        ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
            obs: MultiAgentDict = {}
            rew: MultiAgentDict = {}
            terminated: MultiAgentDict = {}
            truncated: MultiAgentDict = {}
            info: MultiAgentDict = {}
            for aid, action in action_dict.items():
                i = cast(int, aid)
                obs[i], rew[i], terminated[i], truncated[i], info[i] = self.envs[i].step(action)
                if terminated[i]:
                    self.terminateds.add(i)
                if truncated[i]:
                    self.truncateds.add(i)
            done = self.terminateds | self.truncateds
            self.agents = [a for a in self.possible_agents if a not in done]
            terminated[ALL_AGENTS] = len(done) == len(self.envs)
            truncated[ALL_AGENTS] = len(self.truncateds) == len(self.envs)
            return obs, rew, terminated, truncated, info

        def render(self) -> object:
            return self.envs[0].render()

        def close(self) -> None:
            for env in self.envs:
                env.close()

    name = env_name_or_creator if isinstance(env_name_or_creator, str) else "env"
    MultiEnv.__name__ = MultiEnv.__qualname__ = f"MultiAgent[{name}]"
    return MultiEnv


def _preview(ids: list[AgentID], limit: int = 8) -> str:
    """Returns a short printable list of agent IDs."""
    if not ids:
        return "no entries"
    shown = ", ".join(repr(i) for i in ids[:limit])
    return f"[{shown}{', ...' if len(ids) > limit else ''}] ({len(ids)} in all)"


def multi_agent_env_from(env: object, env_config: dict | None = None) -> MultiAgentEnv:
    """One MultiAgentEnv from `config.env` (see rlmod.env.registry.make_env); a TypeError
    with the fix when it makes something else (the multi-agent EnvRunners' first check)."""
    from rlmod.env.registry import make_env

    made = make_env(env, env_config)
    if not isinstance(made, MultiAgentEnv):
        raise TypeError(
            f"env={env!r} made a {type(made).__name__}, not an rlmod MultiAgentEnv. Wrap "
            "PettingZoo parallel envs in rlmod.env.pettingzoo_env.ParallelPettingZooEnv; a "
            "single-agent gymnasium env needs no .multi_agent() setup."
        )
    if not made.possible_agents:
        raise EnvError(f"env={env!r} has no possible_agents; set them in __init__.")
    return made


def unknown_agent_error(env: object, e: int, agent: AgentID, agents: list[AgentID]) -> EnvError:
    """The error for an env that returned data for an agent not in its possible_agents."""
    return EnvError(
        f"env={env!r} (env {e}) returned data for agent {agent!r}, which is not in its "
        f"possible_agents {agents[:8]}; every agent ID must be in possible_agents."
    )
