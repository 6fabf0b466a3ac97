"""ModuleSpaces: the raw spaces of each module's agents and each module's env-to-module
pipeline, for both multi-agent EnvRunners (and the spaces they report and build with).

Agents mapped to one module must all see that module's spaces. Agents that share one space
object pair form a group, so a mapping is checked once per (module, group), not once per
agent: cheap with thousands of agents.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import gymnasium as gym
import numpy as np

from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.rl_module import RLModule, RLModuleSpec
from rlmod.core.types import Array
from rlmod.env.env_runner import ENV_SPACES_KEY
from rlmod.env.multi_agent_env import AgentID, MultiAgentEnv

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig
    from rlmod.connectors.pipeline import ConnectorPipeline


class ModuleSpaces:
    """Per module: the raw (observation, action) spaces of its agents, the first agent seen
    with them (named in errors) and its env-to-module pipeline.

    Set-up maps the env's agents with `SETUP_EPISODE` (`config.env_spaces_by_module`); a
    module no agent mapped to then adopts the spaces of the first agent mapped to it later.
    """

    def __init__(
        self, config: AlgorithmConfig, envs: list[MultiAgentEnv], agents: list[AgentID]
    ) -> None:
        self.config = config
        self.env0 = envs[0]
        self.agents = agents
        found = config.env_spaces_by_module(self.env0)
        self.first_agent = {mid: agent for mid, (agent, _, _) in found.items()}
        self.raw = {mid: (obs, act) for mid, (_, obs, act) in found.items()}
        # Built with both input spaces, so their output spaces are set.
        self.env_to_module: dict[ModuleID, ConnectorPipeline] = {
            mid: config.build_env_to_module_connector(self.env0, obs, act)
            for mid, (obs, act) in self.raw.items()
        }
        self._groups: list[Array] = []
        self._num_groups: list[int] = []
        for env in envs:
            ids: dict[tuple[int, int], int] = {}
            groups = [
                ids.setdefault(
                    (id(env.get_observation_space(a)), id(env.get_action_space(a))), len(ids)
                )
                for a in agents
            ]
            self._groups.append(np.asarray(groups, np.int64))
            self._num_groups.append(len(ids))
        self._checked = [np.zeros(0, np.int64) for _ in envs]
        # Pairs of space objects found equal, held so their ids stay theirs: each env has
        # its own space objects, compared once per pair, not once per (module, env).
        self._equal: dict[tuple[int, int], tuple[gym.Space, gym.Space]] = {}
        self._shared: gym.spaces.Box | None | bool = False  # False: not computed yet
        self._module: MultiRLModule | None = None

    def runner_spaces(
        self, modules: Iterable[tuple[ModuleID, RLModule | RLModuleSpec]] = ()
    ) -> dict[str, tuple[gym.Space, gym.Space]]:
        """What a multi-agent EnvRunner's `get_spaces()` returns: `"__env__"` -> the first
        possible agent's spaces (cheap with thousands of agents, and every agent's in the
        common case of alike agents); each module -> the spaces after its env-to-module
        pipeline, or, for `modules` ((ID, RLModule or its spec) pairs) no agent maps to, their
        own."""
        first = self.agents[0]
        spaces = {
            ENV_SPACES_KEY: (
                self.env0.get_observation_space(first),
                self.env0.get_action_space(first),
            )
        }
        for mid, pipeline in self.env_to_module.items():
            spaces[mid] = cast(  # set: built with input spaces
                "tuple[gym.Space, gym.Space]", (pipeline.observation_space, pipeline.action_space)
            )
        for mid, sub in modules:
            spaces.setdefault(
                mid, cast("tuple[gym.Space, gym.Space]", (sub.observation_space, sub.action_space))
            )
        return spaces

    def module_to_env(self, module: MultiRLModule) -> dict[ModuleID, ConnectorPipeline]:
        """Each module's module-to-env pipeline, into its agents' raw action space."""
        return {
            mid: self.config.build_module_to_env_connector(
                self.env0,
                cast(gym.Space, sub.observation_space),
                cast(gym.Space, self.raw.get(mid, (None, sub.action_space))[1]),
            )
            for mid, sub in module.items()
        }

    def replace_env(self, e: int, env: MultiAgentEnv) -> None:
        """Env `e` was recreated (restart after a failure): its space groups anew."""
        ids: dict[tuple[int, int], int] = {}
        self._groups[e] = np.asarray(
            [
                ids.setdefault(
                    (id(env.get_observation_space(a)), id(env.get_action_space(a))), len(ids)
                )
                for a in self.agents
            ],
            np.int64,
        )
        self._num_groups[e] = len(ids)
        self._checked[e] = np.zeros(0, np.int64)

    def attach(self, module: MultiRLModule) -> None:
        """The EnvRunner's module: what modules without agents at set-up were built for."""
        self._module = module
        self._shared = False

    def check_new_agents(
        self,
        e: int,
        env: MultiAgentEnv,
        agents: list[AgentID],
        mids: list[ModuleID],
        mods: Array,
        local: Array,
    ) -> None:
        """Checks that `agents` (of env `e`, agent indices `local`) see the spaces of the
        modules they were mapped to (`mids`, module indices `mods`)."""
        pairs = mods * self._num_groups[e] + self._groups[e][local]
        unchecked = np.setdiff1d(np.unique(pairs), self._checked[e], assume_unique=True)
        for pair in unchecked.tolist():
            i = int(np.argmax(pairs == pair))
            self._check(
                agents[i],
                mids[i],
                env.get_observation_space(agents[i]),
                env.get_action_space(agents[i]),
            )
        if unchecked.size:
            self._checked[e] = np.union1d(self._checked[e], unchecked)

    def _check(
        self, agent: AgentID, mid: ModuleID, obs_space: gym.Space, act_space: gym.Space
    ) -> None:
        if mid not in self.raw:  # no agent mapped here at set-up: adopt these spaces
            assert self._module is not None
            pipeline = self.config.build_env_to_module_connector(self.env0, obs_space, act_space)
            sub = self._module[mid]
            if pipeline.observation_space != sub.observation_space:
                raise ValueError(
                    f"policy_mapping_fn mapped agent {agent!r} to module {mid!r}, built for "
                    f"observations {sub.observation_space}, but agent {agent!r} observes "
                    f"{obs_space} (module space {pipeline.observation_space})."
                )
            self.raw[mid] = (obs_space, act_space)
            self._shared = False  # recompute
            self.first_agent[mid] = agent
            self.env_to_module[mid] = pipeline
            return
        o_obs, o_act = self.raw[mid]
        if not (self._same(o_obs, obs_space) and self._same(o_act, act_space)):
            other = self.first_agent[mid]
            raise ValueError(
                f"Agents {other!r} and {agent!r} are both mapped to module {mid!r} but see "
                f"different spaces: {other!r} has ({o_obs}, {o_act}), {agent!r} has "
                f"({obs_space}, {act_space}). Map them to different modules."
            )

    def shared_obs_space(self) -> gym.spaces.Box | None:
        """The raw observation space of every module, if they all have one Box space."""
        if self._shared is False:
            assert self._module is not None
            module_ids = self._module.keys()
            spaces = [self.raw.get(mid, (None,))[0] for mid in module_ids]
            first = spaces[0]
            self._shared = (
                first
                if isinstance(first, gym.spaces.Box)
                and all(sp is first or sp == first for sp in spaces)
                else None
            )
        return self._shared  # type: ignore[return-value]

    def _same(self, a: gym.Space, b: gym.Space) -> bool:
        """`a == b`, remembered per pair of objects (Box equality is some 30 us: 31,000 of
        them were 1 s of the first sample of 1,000 modules in 32 envs)."""
        if a is b or (id(a), id(b)) in self._equal:
            return True
        if a != b:
            return False
        self._equal[id(a), id(b)] = (a, b)
        return True
