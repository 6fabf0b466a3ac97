"""MultiAgentEnvRunner: samples several MultiAgentEnvs at once with an inference-only MultiRLModule.

Built by EnvRunnerGroup when `config.is_multi_agent`; its modules come from
`config.get_multi_rl_module_spec(env=..., spaces=self.get_spaces(), inference_only=True)`,
so learner-only modules are never built here.

How a step runs (all envs together): each agent that received an observation acts in the
next step; all acting agents of all envs whose modules form one execution group (a stack
group of modules that share an architecture, or one module alone; see ModuleGroups) go
through ONE forward pass. Rows are grouped by execution group with array operations (one
sort per step), never with a Python loop per module. Per-(env, agent) bookkeeping lives in flat numpy arrays indexed by a
"slot" `env_index * len(possible_agents) + agent_index`, so Python touches each agent only
to read and build the env's dicts.

A row of the batch is one action of one agent: `obs` is what the agent acted on, `rewards`
everything the agent received until it next observed (rewards between its acting steps
add up), `new_obs` that next observation (the final one at its episode's end), and the
flags are the agent's own (`"__all__"` applies to agents without a flag of their own).
"""

from __future__ import annotations

import logging
import operator
from itertools import chain, compress
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
import torch

from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import ModuleID
from rlmod.env.env_runner import ENV_SPACES_KEY, EnvRunner, SampleResult
from rlmod.env.episodes import MultiAgentEpisode
from rlmod.env.module_groups import ModuleGroups, env_actions_per_row
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import AgentID, MultiAgentEnv
from rlmod.env.multi_agent_observations import AgentPlace, ObservationIntake
from rlmod.env.multi_agent_records import (
    ActingRows,
    ClosedRows,
    EnvReturns,
    FlaggedEnv,
    StepObservations,
)
from rlmod.env.multi_agent_rows import (
    MODULE,
    SLOT,
    EpisodeInfo,
    GroupRows,
    group_batch,
    returns_by_agent,
    split_by_module,
    step_flags,
)
from rlmod.env.registry import make_env
from rlmod.errors import EnvError, OfflineDataError, UnknownModuleIDError
from rlmod.offline.writer import AGENT_ID, EpisodeWriter
from rlmod.utils.checkpoints import select_components
from rlmod.utils.seeding import derive_seed

logger = logging.getLogger(__name__)


class MultiAgentEnvRunner(EnvRunner):
    """Steps `num_envs_per_env_runner` MultiAgentEnvs; one forward pass per execution group
    (stack group, or unstacked module) per step.

    `get_spaces()["__env__"]` is the first possible agent's (observation, action) space
    pair: cheap with thousands of agents, and every agent's pair in the common case of
    alike agents; the per-module entries are what modules are built with.

    Env-to-module connectors run per module on the stacked observations of that module's
    agents (all envs); the row set changes as agents come and go, so connectors that keep
    per-row state (FrameStacking) do not fit here, stateless ones and MeanStdFilter do.

    Guards, once per step over all envs: non-finite observations and rewards raise an
    EnvError naming the env, agent, step and key; with `check_agent_observations` each
    module's stacked observations must have their space's shape and dtype (else the agent
    is named). An env that raises is named with its step, and the next `sample()` starts
    every env afresh; with `restart_failed_sub_environments` it is recreated in place and
    its unfinished episode dropped.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> from rlmod.env import MultiAgentEnvRunner
        >>> from rlmod.testing import MultiAgentCartPole
        >>> config = (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 4})
        ...           .multi_agent(policies={"p0", "p1"},
        ...                        policy_mapping_fn=lambda aid, episode: f"p{aid % 2}"))
        >>> runner = MultiAgentEnvRunner(config=config)
        >>> batch = runner.sample(num_timesteps=50)
        >>> sorted(batch), batch["p0"]["obs"].shape[1]
        (['p0', 'p1'], 4)
    """

    def __init__(self, *, config: Any, worker_index: int = 0) -> None:
        super().__init__(config=config, worker_index=worker_index)
        self.num_envs = config.num_envs_per_env_runner
        self.envs: list[MultiAgentEnv] = [self._make_env() for _ in range(self.num_envs)]
        self.env0 = self.envs[0]
        for env in self.envs:
            self.callbacks.call("on_environment_created", env_runner=self,
                                metrics_logger=self.metrics, env=env,
                                env_context=dict(config.env_config))
        self._agents: list[AgentID] = list(self.env0.possible_agents)
        if not self._agents:
            raise EnvError(f"env={config.env!r} has no possible_agents; set them in __init__.")
        self._agent_index = {a: i for i, a in enumerate(self._agents)}
        # Raw spaces per module, from the env's agents (SETUP_EPISODE); checks the mapping.
        self._spaces = ModuleSpaces(config, self.envs, self._agents)
        spec = config.get_multi_rl_module_spec(env=self.env0, spaces=self.get_spaces(),
                                               inference_only=True)
        with self.own_torch_rng():  # the driver's RNG stays as if no EnvRunner were built
            self.module = spec.build()
        self.module.eval()
        self._spaces.attach(self.module)
        self._module_ids: list[ModuleID] = self.module.keys()
        self._module_index = {mid: i for i, mid in enumerate(self._module_ids)}
        self._restart = config.restart_failed_sub_environments
        self._intake = ObservationIntake(env_name=config.env, spaces=self._spaces,
                                         check_obs=config.check_agent_observations,
                                         locate=self._locate)
        self._module_to_env = {}
        for mid, sub in self.module.items():
            raw_act = self._spaces.raw.get(mid, (None, sub.action_space))[1]
            self._module_to_env[mid] = config.build_module_to_env_connector(
                self.env0, sub.observation_space, raw_act)
        self._groups = ModuleGroups(self.module, self._module_ids, self._module_to_env,
                                    stack=config.stack_modules)
        # Per group: modules with a non-empty env-to-module pipeline (run module by module).
        self._group_pipelines = [
            [m for m in g.modules.tolist()
             if len(self._spaces.env_to_module.get(self._module_ids[m], ()))]
            for g in self._groups.groups]
        self._init_bookkeeping()
        self._writer = self._make_writer()  # config.offline_data(output=DIR)

    # Guard switches, read by benchmarks/guard_overhead.py (they live on the intake).
    @property
    def _check_obs(self) -> bool:
        return self._intake.check_obs

    @_check_obs.setter
    def _check_obs(self, value: bool) -> None:
        self._intake.check_obs = value

    @property
    def _check_finite_data(self) -> bool:
        return self._intake.check_finite

    @_check_finite_data.setter
    def _check_finite_data(self, value: bool) -> None:
        self._intake.check_finite = value

    def _make_writer(self) -> EpisodeWriter | None:
        """An EpisodeWriter when `config.output` is set. Multi-agent rows are recorded as
        the modules see them, so this needs modules whose env-to-module connectors leave
        observations raw and whose actions reach the env unchanged; otherwise an error
        says so (the single-agent EnvRunner records raw data in every case)."""
        if self.config.output is None:
            return None
        for mid in self._module_ids:
            pipeline = self._spaces.env_to_module.get(mid)
            if (pipeline is not None and len(pipeline)) or len(self._module_to_env[mid]) > 1:
                raise OfflineDataError(
                    f"offline_data(output=...) with a MultiAgentEnvRunner records what the "
                    f"modules see; module {mid!r} sees transformed observations ({pipeline}) "
                    "or maps its actions into the env's space, which would make the "
                    "recorded rows differ from the env's. Record envs with flat float32 Box "
                    "observations and Discrete actions starting at 0, or leave output unset.")
        return EpisodeWriter(self.config.output, spaces=self.get_spaces(),
                             max_rows_per_file=self.config.output_max_rows_per_file,
                             file_prefix=f"env_runner_{self.worker_index}")

    def _init_bookkeeping(self) -> None:
        # Per (env, agent) slot: flat arrays, see the module docstring.
        num_slots = self.num_envs * len(self._agents)
        # The agent's module index, valid in the env episode `_episode_of_slot` names
        # (policy_mapping_fn is called once per agent and episode; -1: not mapped yet).
        self._module_of_slot = np.zeros(num_slots, np.int64)
        self._episode_of_slot = np.full(num_slots, -1, np.int64)
        self._agent_episode_of_slot = np.zeros(num_slots, np.int64)  # the eps_id column
        self._open_row = np.full(num_slots, -1, np.int64)  # row awaiting its outcome, or -1
        self._pending_reward = np.zeros(num_slots)  # reward since the agent last acted
        self._episode_return = np.zeros(num_slots)  # agent's return in its current episode
        self._observed = np.zeros(num_slots, bool)  # agent has observed in this episode
        self._next_agent_episode_id = 0  # one per (env episode, agent): the eps_id column
        self._next_episode_id = 0  # one per env episode: EpisodeInfo.id_
        self._dropped_eps: list[np.ndarray] = []  # agent-episodes of restarted envs
        self._num_restarts = 0
        self._num_steps = 0  # steps of all envs together, named in errors
        self._num_dropped_env_steps = 0  # this call's env steps of dropped episodes
        self._num_carried = [0] * len(self._groups.groups)  # rows carried into the buffers
        self._call_start = 0  # _num_steps when this sample() call began
        # Per env.
        self._episode: list[EpisodeInfo | None] = [None] * self.num_envs
        self._ep_len = np.zeros(self.num_envs, np.int64)
        self._acting_agents: list[tuple] = [()] * self.num_envs  # next to act, env's order
        self._acting_slots: list[np.ndarray] = [np.zeros(0, np.int64)] * self.num_envs
        self._acting_offset = [0] * self.num_envs  # their offset in the step's acting order
        self._seeds = [derive_seed(self.config.seed, self.seed_index, e)
                       for e in range(self.num_envs)]
        # Per sample() call, per execution group.
        self._buffers = [GroupRows() for _ in self._groups.groups]
        self._closings: list[ClosedRows] = []
        self._acting: list[ActingRows] | None = None  # per group with agents acting next
        self._begin_step()
        # Metrics since the last get_metrics().
        self._done_returns: list[float] = []
        self._done_lens: list[int] = []
        self._module_returns: dict[ModuleID, list[float]] = {}
        # (agent indices, their returns) per finished episode; grouped by agent in
        # get_metrics(), once per call rather than a dict append per agent per episode.
        self._agent_returns: list[tuple[np.ndarray, np.ndarray]] = []
        self._done_eps: list[np.ndarray] = []
        # Callbacks' episode objects (only with an episode hook, see EnvRunner.__init__).
        self._ma_episodes: list[MultiAgentEpisode | None] = [None] * self.num_envs
        self._ma_episodes_done: list[MultiAgentEpisode] = []
        self._num_env_steps = 0
        self._num_agent_steps = 0
        self.num_env_steps_sampled_lifetime = 0
        self.num_agent_steps_sampled_lifetime = 0

    def _make_env(self) -> MultiAgentEnv:
        env = make_env(self.config.env, self.config.env_config)
        if not isinstance(env, MultiAgentEnv):
            raise TypeError(
                f"env={self.config.env!r} made a {type(env).__name__}, not an rlmod "
                "MultiAgentEnv. Wrap PettingZoo parallel envs in "
                "rlmod.env.pettingzoo_env.ParallelPettingZooEnv; a single-agent gymnasium "
                "env needs no .multi_agent() setup."
            )
        return env

    # ------------------------------------------------------------------ spaces
    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        first = self._agents[0]
        spaces = {ENV_SPACES_KEY: (self.env0.get_observation_space(first),
                                   self.env0.get_action_space(first))}
        for mid, pipeline in self._spaces.env_to_module.items():
            spaces[mid] = (pipeline.observation_space, pipeline.action_space)
        if hasattr(self, "module"):  # modules no env agent maps to: spaces from their spec
            for mid, sub in self.module.items():
                spaces.setdefault(mid, (sub.observation_space, sub.action_space))
        return spaces

    @property
    def module_ids(self) -> list[ModuleID]:
        return list(self._module_ids)

    # ------------------------------------------------------------------ slots and mapping
    def _slots_for(self, e: int, keys: tuple) -> np.ndarray:
        """Slots of `keys` in env `e`; maps the agents that are new to the episode."""
        try:
            local = np.fromiter(map(self._agent_index.__getitem__, keys), np.int64, len(keys))
        except KeyError as err:
            raise EnvError(
                f"env={self.config.env!r} (env {e}) returned data for agent {err.args[0]!r}, "
                f"which is not in its possible_agents {self._agents[:8]}; every agent ID must "
                "be in possible_agents."
            ) from None
        slots = local + e * len(self._agents)
        episode = self._episode[e]
        assert episode is not None
        stale = self._episode_of_slot[slots] != episode.id_
        if stale.any():
            new = np.flatnonzero(stale)
            self._map_agents(e, [keys[i] for i in new.tolist()], local[new], slots[new])
        return slots

    def _map_agents(self, e: int, agents: list, local: np.ndarray, slots: np.ndarray) -> None:
        """Calls policy_mapping_fn once for each of these agents (new to the episode) and
        caches the answers for the episode; checks IDs and spaces."""
        episode = self._episode[e]
        assert episode is not None
        fn, index = self.config.policy_mapping_fn, self._module_index
        mids = [fn(agent, episode) for agent in agents]
        try:
            mods = np.fromiter(map(index.__getitem__, mids), np.int64, len(mids))
        except (KeyError, TypeError):
            bad = next(i for i, mid in enumerate(mids) if mid not in index)
            raise UnknownModuleIDError(
                self.config.mapping_error_message(agents[bad], mids[bad])) from None
        self._spaces.check_new_agents(e, self.envs[e], agents, mids, mods, local)
        self._module_of_slot[slots] = mods
        self._episode_of_slot[slots] = episode.id_
        first_id = self._next_agent_episode_id
        self._agent_episode_of_slot[slots] = np.arange(first_id, first_id + len(slots))
        self._next_agent_episode_id += len(slots)

    # ------------------------------------------------------------------ episodes
    def _reset_all(self) -> None:
        """Starts every env afresh; rows of unfinished episodes are dropped."""
        writer = getattr(self, "_writer", None)  # None while __init__ runs
        if writer is not None:
            writer.drop_pending()  # episodes cut off by this reset are never written
        self._buffers = [GroupRows() for _ in self._groups.groups]
        self._num_carried = [0] * len(self._groups.groups)
        self._closings = []
        for arr, value in ((self._open_row, -1), (self._pending_reward, 0.0),
                           (self._episode_return, 0.0), (self._observed, False)):
            arr[:] = value
        self._begin_step()
        for e in range(self.num_envs):
            self._reset_env(e)
        self._process_observations()

    def _reset_env(self, e: int) -> None:
        """Resets env `e`; its agents' first observations join this step's observations."""
        seed, self._seeds[e] = self._seeds[e], None  # seed once; later resets continue its RNG
        try:
            obs, infos = self.envs[e].reset(seed=seed)
        except Exception as err:
            raise EnvError(f"env={self.config.env!r} raised in reset(): {err!r}") from err
        self._episode[e] = EpisodeInfo(self._next_episode_id, e, self.worker_index)
        self._next_episode_id += 1
        self._ep_len[e] = 0
        keys = tuple(obs)
        slots = self._slots_for(e, keys)
        if self._track_episodes:
            self._ma_episodes[e] = MultiAgentEpisode(
                id_=self._next_episode_id - 1, observations=obs, infos=infos, env_index=e,
                agent_to_module=self._modules_of(keys, slots))
            self.callbacks.call("on_episode_created", **self._episode_kwargs(e))
            self.callbacks.call("on_episode_start", **self._episode_kwargs(e))
        self._observed[slots] = True
        n = len(keys)
        self._add_observations(slots, [self._intake.chunk(obs.values())], np.ones(n, bool),
                               np.ones(n, bool))
        self._set_acting(e, keys, slots)

    def _end_episode(self, e: int, terminated: bool) -> None:
        """Closes the episode's open rows (flags from "__all__") and records its returns."""
        num_agents = len(self._agents)
        block = slice(e * num_agents, (e + 1) * num_agents)
        open_local = np.flatnonzero(self._open_row[block] >= 0)
        if open_local.size:
            k = open_local.size
            self._close(open_local + e * num_agents, np.full(k, terminated),
                        np.full(k, not terminated), np.full(k, -1))
        episode = self._episode[e]
        assert episode is not None
        part = np.flatnonzero(self._episode_of_slot[block] == episode.id_)  # agents that took part
        slots = part + e * num_agents
        rets, mods = self._episode_return[slots], self._module_of_slot[slots]
        self._done_returns.append(float(rets.sum()))
        self._done_lens.append(int(self._ep_len[e]))
        sums = np.bincount(mods, weights=rets, minlength=len(self._module_ids))
        for m in np.unique(mods).tolist():
            self._module_returns.setdefault(self._module_ids[m], []).append(float(sums[m]))
        self._agent_returns.append((part, rets))
        self._done_eps.append(self._agent_episode_of_slot[slots])
        self._episode_return[block] = 0.0
        self._pending_reward[block] = 0.0
        self._observed[block] = False
        ma_episode = self._ma_episodes[e]
        if ma_episode is not None:
            self.callbacks.call("on_episode_end", prev_episode_chunks=[],
                                **self._episode_kwargs(e))
            self._ma_episodes_done.append(ma_episode)
            self._ma_episodes[e] = None

    def _episode_kwargs(self, e: int) -> dict[str, Any]:
        return {"episode": self._ma_episodes[e], "env_runner": self,
                "metrics_logger": self.metrics, "env": self.envs[e], "env_index": e,
                "rl_module": self.module}

    def _modules_of(self, keys: tuple, slots: np.ndarray) -> dict[AgentID, ModuleID]:
        return {a: self._module_ids[m] for a, m in zip(keys, self._module_of_slot[slots].tolist(),
                                                       strict=True)}

    # ------------------------------------------------------------------ one step
    def _begin_step(self) -> None:
        self._step_obs = StepObservations()
        self._num_acting = 0  # acting agents so far in this step
        self._acting_agents = [()] * self.num_envs
        self._acting_slots = list(self._acting_slots)
        self._acting_offset = [0] * self.num_envs

    def _add_observations(self, slots: np.ndarray, obs: list, acts_next: np.ndarray,
                          episode_starts: np.ndarray) -> None:
        """Queues observations for `_process_observations` (`obs`: per-env chunks from
        `ObservationIntake.chunk`); see `StepObservations`."""
        queued = self._step_obs
        queued.slots.append(slots)
        queued.modules.append(self._module_of_slot[slots])
        queued.obs.extend(obs)
        queued.acts_next.append(acts_next)
        queued.episode_starts.append(episode_starts)

    def _set_acting(self, e: int, keys: tuple, slots: np.ndarray) -> None:
        """Env `e`'s agents that act next; the order of calls is the acting order."""
        self._acting_agents[e], self._acting_slots[e] = keys, slots
        self._acting_offset[e] = self._num_acting
        self._num_acting += len(keys)

    def _close(self, slots: np.ndarray, term: np.ndarray, trunc: np.ndarray,
               new_obs_pos: np.ndarray) -> None:
        """Completes the open rows of `slots`; `new_obs_pos` indexes this step's
        observations (-1: no new observation, the row's own obs stands in)."""
        rows = self._open_row[slots]
        has = rows >= 0
        if not has.all():
            slots, rows, term, trunc, new_obs_pos = (
                x[has] for x in (slots, rows, term, trunc, new_obs_pos))
        if not len(slots):
            return
        groups = self._groups.group_of_module[self._module_of_slot[slots]]
        self._step_obs.closings.append(ClosedRows(groups, rows, new_obs_pos,
                                                  self._pending_reward[slots], term, trunc))
        self._open_row[slots] = -1
        self._pending_reward[slots] = 0.0

    def _step_envs(self, actions: list) -> int:
        """Steps every env with its agents' actions and books what came back: rewards,
        completed rows, who acts next; resets envs whose episode is over. Per env, Python
        only builds and reads the dicts; the numpy work runs once for all envs. Returns
        the number of agent steps taken."""
        acted = (self._acting_agents, self._acting_slots, self._acting_offset)
        self._begin_step()
        returns = self._call_step(actions, *acted)
        self._ep_len += 1
        self._num_steps += 1
        slots = np.concatenate(returns.slots)
        self._book_rewards(returns, slots)
        term, trunc, over, extras = step_flags(returns.flagged, returns.obs_agents,
                                               returns.num_obs)
        acts_next = ~(term | trunc)
        starts = ~self._observed[slots]  # first observation of the agent in its episode
        self._observed[slots] = True
        self._add_observations(slots, returns.obs_chunks, acts_next, starts)
        self._close(slots, term, trunc, np.arange(len(slots)))
        for e, agent, terminated in extras:  # done agents that got no final obs
            self._close(self._slots_for(e, (agent,)), np.array([terminated]),
                        np.array([not terminated]), np.full(1, -1))
        ended = {e for e, _ in over} | {e for e, _ in returns.failed}
        self._set_next_acting(returns, acts_next, ended)
        for e, terminated in over:
            self._end_episode(e, terminated=bool(terminated))
            self._reset_env(e)
        for e, error in returns.failed:
            self._restart_env(e, error)
        return returns.agent_steps

    def _call_step(self, actions: list, acted_agents: list[tuple],
                   acted_slots: list[np.ndarray], acted_offset: list[int]) -> EnvReturns:
        """Calls each env's `step()` with the actions of its acting agents (`actions` in
        acting order, env e's from `acted_offset[e]`) and gathers what came back."""
        out = EnvReturns()
        for e, env in enumerate(self.envs):
            agents, off = acted_agents[e], acted_offset[e]
            out.agent_steps += len(agents)
            action_dict = dict(zip(agents, actions[off:off + len(agents)], strict=True))
            try:
                obs, rewards, terminateds, truncateds, infos = env.step(action_dict)
            except Exception as err:
                if not self._restart:
                    self._raise_step_failed(e, err)
                out.failed.append((e, err))  # its agents' rows are dropped (not counted)
                out.obs_agents.append(())
                out.slots.append(np.zeros(0, np.int64))
                out.obs_chunks.append([])
                continue
            obs_agents = tuple(obs)
            # Usually the agents that acted observe again (their final obs if done): then
            # their slots are known, with no dict lookup per agent.
            slots = acted_slots[e] if obs_agents == agents else self._slots_for(e, obs_agents)
            ma_episode = self._ma_episodes[e] if self._track_episodes else None
            if ma_episode is not None:  # only with an episode callback hook
                ma_episode.agent_to_module.update(self._modules_of(obs_agents, slots))
                ma_episode.add_env_step(obs, actions=action_dict, rewards=rewards, infos=infos,
                                        terminateds=terminateds, truncateds=truncateds)
                self.callbacks.call("on_episode_step", **self._episode_kwargs(e))
            if rewards:
                reward_agents = tuple(rewards)
                if reward_agents == obs_agents:
                    out.reward_dicts.append(rewards)
                    out.reward_slots.append(slots)
                else:
                    self._add_rewards(self._slots_for(e, reward_agents),
                                      np.fromiter(rewards.values(), np.float64,
                                                  len(reward_agents)))
            if any(terminateds.values()) or any(truncateds.values()):  # else nothing to read
                out.flagged.append(FlaggedEnv(e, out.num_obs, terminateds, truncateds))
            out.num_obs += len(obs_agents)
            out.obs_agents.append(obs_agents)
            out.slots.append(slots)
            out.obs_chunks.append(self._intake.chunk(obs.values()))
        return out

    def _raise_step_failed(self, e: int, err: BaseException) -> NoReturn:
        raise EnvError(
            f"env={self.config.env!r} (env {e} of this EnvRunner) raised in "
            f"step() at step {self._ep_len[e] + 1} of its episode (step "
            f"{self._num_steps + 1} of this EnvRunner): {err!r}. This sample() "
            "call's rows are dropped (episodes finished earlier are kept in the "
            "metrics) and the next sample() starts every env afresh; "
            "config.fault_tolerance(restart_failed_sub_environments=True) "
            "recreates a failing env instead and goes on."
        ) from err

    def _book_rewards(self, returns: EnvReturns, slots: np.ndarray) -> None:
        """Adds the rewards of the agents that observed (all envs' in one array);
        `slots` are the slots of all observing agents, in env order."""
        if not returns.reward_dicts:
            return
        rewards = np.fromiter(chain.from_iterable(r.values() for r in returns.reward_dicts),
                              np.float64, sum(map(len, returns.reward_dicts)))
        # Usually every env rewarded all agents that observed: their slots are `slots`.
        self._add_rewards(slots if len(returns.reward_dicts) == len(self.envs)
                          else np.concatenate(returns.reward_slots), rewards)

    def _set_next_acting(self, returns: EnvReturns, acts_next: np.ndarray,
                         ended: set[int]) -> None:
        """Who acts next in each env whose episode goes on: all that observed where no flag
        is set, else those not done (`acts_next`, per observation)."""
        first_flagged_obs = {f.env: f.first_obs for f in returns.flagged}
        for e, (obs_agents, slots) in enumerate(zip(returns.obs_agents, returns.slots,
                                                    strict=True)):
            if e in ended:
                continue  # reset (or restarted) below: its new agents act
            start = first_flagged_obs.get(e)
            if start is None:
                self._set_acting(e, obs_agents, slots)
                continue
            mask = acts_next[start:start + len(obs_agents)]
            if mask.any():
                self._set_acting(e, tuple(compress(obs_agents, mask.tolist())), slots[mask])

    def _restart_env(self, e: int, err: BaseException) -> None:
        """Restart mode: recreates env `e`, drops its unfinished episode (no rows, no
        metrics) and starts a new one."""
        logger.warning("env=%r: env %d raised at step %d and was recreated (%r); its "
                       "unfinished episode is dropped.", self.config.env, e,
                       self._num_steps, err)
        num_agents = len(self._agents)
        block = slice(e * num_agents, (e + 1) * num_agents)
        episode = self._episode[e]
        assert episode is not None
        took_part = self._episode_of_slot[block] == episode.id_
        self._dropped_eps.append(self._agent_episode_of_slot[block][took_part])
        # Its steps in this call, the failed one included (earlier ones were counted then).
        self._num_dropped_env_steps += min(int(self._ep_len[e]),
                                           self._num_steps - self._call_start)
        self._open_row[block] = -1
        self._pending_reward[block] = 0.0
        self._episode_return[block] = 0.0
        self._observed[block] = False
        self._episode_of_slot[block] = -1
        try:
            self.envs[e].close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close too
            logger.debug("env %d failed to close after raising", e)
        self.envs[e] = self._make_env()
        self._spaces.replace_env(e, self.envs[e])
        self._num_restarts += 1
        self._reset_env(e)

    def _add_rewards(self, slots: np.ndarray, rewards: np.ndarray) -> None:
        """Adds rewards to what these agents received since they last acted, and to their
        episode returns (after checking they are finite: one check per call)."""
        if self._intake.check_finite and not np.isfinite(rewards).all():
            self._intake.raise_non_finite(slots[~np.isfinite(rewards)], "rewards")
        self._pending_reward[slots] += rewards
        self._episode_return[slots] += rewards

    def _process_observations(self) -> None:
        """Groups the step's observations by execution group (one sort), runs env-to-module
        pipelines (all envs at once), stores the observations and prepares the next
        forward passes (one per group)."""
        queued = self._step_obs
        slots = np.concatenate(queued.slots)
        mods = np.concatenate(queued.modules)
        acts_next = np.concatenate(queued.acts_next)
        starts = np.concatenate(queued.episode_starts)
        act_rank = np.cumsum(acts_next) - 1  # position among this step's acting agents
        store_idx = np.empty(len(slots), np.int64)
        # Group-major, module-major within a group (radix sort, see _sort_key).
        order = np.argsort(self._sort_key(self._groups.sort_rank[mods]), kind="stable")
        sorted_groups = self._groups.group_of_module[mods[order]]
        cuts = np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1
        acting = []
        stacked = self._intake.stack_shared(slots, queued.obs)
        values = None if stacked is not None else list(chain.from_iterable(
            c for c in queued.obs if len(c)))
        for pos in np.split(order, cuts) if len(order) else []:  # one group's positions
            g = int(self._groups.group_of_module[mods[pos[0]]])
            if stacked is not None:
                raw = np.take(stacked, pos, axis=0)
            else:
                assert values is not None
                picked = ((values[int(pos[0])],) if len(pos) == 1
                          else operator.itemgetter(*pos.tolist())(values))
                space = self._spaces.raw[self._module_ids[int(mods[pos[0]])]][0]
                raw = self._intake.stack_checked(space, picked, slots[pos])
            obs = self._to_module_space(g, raw, mods[pos], starts[pos])
            base = self._buffers[g].add_obs(obs)
            store_idx[pos] = np.arange(base, base + len(pos))
            a = acts_next[pos]
            if a.all():
                acting.append(ActingRows(g, obs, store_idx[pos], slots[pos], mods[pos],
                                         act_rank[pos]))
            elif a.any():
                pa = pos[a]
                # np.compress: 5x faster than a boolean mask on the rows of a 2-D array.
                acting.append(ActingRows(g, np.compress(a, obs, axis=0), store_idx[pa],
                                         slots[pa], mods[pa], act_rank[pa]))
        for closing in queued.closings:  # step positions of new observations -> store indices
            pos = closing.new_obs
            new_obs = np.full(len(pos), -1)
            seen = pos >= 0
            new_obs[seen] = store_idx[pos[seen]]
            self._closings.append(closing._replace(new_obs=new_obs))
        self._acting = acting

    def _to_module_space(self, g: int, raw: Any, mods: np.ndarray, starts: np.ndarray) -> Any:
        """Group g's raw observations through their modules' env-to-module pipelines (rows
        module-major; modules without connectors take them as they are). A pipeline may
        keep per-module state (MeanStdFilter), so each module's rows run through its own."""
        with_pipeline = self._group_pipelines[g]
        if not with_pipeline:
            return raw
        ids = self._module_ids
        if len(self._groups.groups[g].modules) == 1:
            return self._spaces.env_to_module[ids[with_pipeline[0]]](raw, episode_starts=starts)
        cuts = [0, *(np.flatnonzero(mods[1:] != mods[:-1]) + 1).tolist(), len(mods)]
        pieces = []
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            pipeline = self._spaces.env_to_module[ids[int(mods[lo])]]
            part = raw[lo:hi]
            pieces.append(pipeline(part, episode_starts=starts[lo:hi]) if len(pipeline)
                          else part)
        return np.concatenate(pieces)

    def _locate(self, slot: int) -> AgentPlace:
        e, agent = slot // len(self._agents), self._agents[slot % len(self._agents)]
        mid = self._module_ids[self._module_of_slot[slot]]
        return AgentPlace(e, agent, int(self._ep_len[e]), self._num_steps, self._spaces.raw[mid][0])

    def _sort_key(self, keys: np.ndarray) -> np.ndarray:
        """Module sort ranks as uint16 where they fit: numpy then sorts (stably) by radix,
        3-7x faster than its sort of int64 at 14k-64k agents (2-core EPYC, numpy 2.4)."""
        return keys.astype(np.uint16) if len(self._module_ids) <= 2**16 else keys

    def _act(self, explore: bool) -> list:
        """One forward pass per execution group; returns the env actions in acting order."""
        assert self._acting is not None
        pieces = []
        for g, obs, obs_idx, slots, mods, rank in self._acting:
            out, data = self._groups.forward(g, obs, mods, explore=explore)
            row = {"obs_idx": obs_idx, "slot": slots, MODULE: mods,
                   Columns.EPS_ID: self._agent_episode_of_slot[slots],
                   Columns.ACTIONS: data[Columns.ACTIONS].numpy(),
                   Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS].numpy()}
            if Columns.ACTION_LOGP in data:  # else computed per group batch in _collect
                row[Columns.ACTION_LOGP] = data[Columns.ACTION_LOGP].numpy()
            ids = self._buffers[g].add_rows(**row)
            self._open_row[slots] = ids
            pieces.append((rank, env_actions_per_row(data, len(slots))))
        if not pieces:
            return []
        first = pieces[0][1]
        if all(p.shape[1:] == first.shape[1:] and p.dtype == first.dtype for _, p in pieces):
            actions = np.empty((self._num_acting, *first.shape[1:]), first.dtype)
            for rank, p in pieces:
                actions[rank] = p
            return actions.tolist() if actions.ndim == 1 else list(actions)
        out_list: list = [None] * self._num_acting  # modules with differently shaped actions
        for rank, p in pieces:
            for i, a in zip(rank.tolist(), p, strict=True):
                out_list[i] = a.item() if isinstance(a, np.generic) else a
        return out_list

    # ------------------------------------------------------------------ sampling
    def sample(self, *, num_timesteps: int | None = None, num_episodes: int | None = None,
               explore: bool | None = None) -> SampleResult:
        """Steps all envs for `num_timesteps` env steps (each env's step() counts one) or
        until `num_episodes` episodes are complete (then only their rows are returned)."""
        if num_timesteps is not None and num_episodes is not None:
            raise ValueError("sample() takes num_timesteps or num_episodes, not both.")
        marks = (len(self._done_returns), len(self._done_lens), len(self._agent_returns),
                 {mid: len(v) for mid, v in self._module_returns.items()})
        try:
            with self.own_torch_rng():
                return self._sample(num_timesteps, num_episodes, explore)
        except BaseException:
            # This call's rows never reach a batch: its episodes leave the metrics, the
            # counters count none of its steps, and the next call starts every env afresh.
            del self._done_returns[marks[0]:], self._done_lens[marks[1]:]
            del self._agent_returns[marks[2]:]
            for mid in list(self._module_returns):
                del self._module_returns[mid][marks[3].get(mid, 0):]
            self._acting = None
            self._dropped_eps = []
            self._num_dropped_env_steps = 0
            raise

    def _sample(self, num_timesteps: int | None, num_episodes: int | None,
                explore: bool | None) -> SampleResult:
        explore = self.config.explore if explore is None else explore
        self._call_start = self._num_steps
        if num_episodes is not None or self._acting is None:
            self._reset_all()  # whole episodes only: start every env afresh
        if num_timesteps is None and num_episodes is None:
            num_timesteps = self.config.get_rollout_fragment_length() * self.num_envs
        first_done = len(self._done_returns)
        self._done_eps = []
        self._ma_episodes_done = []
        env_steps = agent_steps = 0
        with torch.inference_mode():
            while (len(self._done_returns) - first_done < num_episodes
                   if num_episodes is not None else env_steps < (num_timesteps or 0)):
                agent_steps += self._step_envs(self._act(explore))
                env_steps += self.num_envs
                self._process_observations()
        keep = np.concatenate(self._done_eps) if num_episodes is not None else None
        result, dropped_rows = self._collect(keep_eps=keep)
        # Steps of dropped episodes (restarted envs) never reach a batch: not counted.
        env_steps -= min(env_steps, self._num_dropped_env_steps)
        agent_steps -= dropped_rows
        self._num_dropped_env_steps = 0
        self._num_env_steps += env_steps
        self._num_agent_steps += agent_steps
        self.num_env_steps_sampled_lifetime += env_steps
        self.num_agent_steps_sampled_lifetime += agent_steps
        if self._track_episodes:
            ongoing = [ep for ep in self._ma_episodes if ep is not None and len(ep)]
            self.callbacks.call("on_sample_end", env_runner=self, metrics_logger=self.metrics,
                                samples=self._ma_episodes_done + ongoing)
        return result

    def _collect(self, keep_eps: np.ndarray | None) -> tuple[SampleResult, int]:
        """Turns the group buffers into flat per-module batches, rows of each (env, agent)
        sequence contiguous and in time order; carries rows still open into the next call.
        Also returns how many rows acted in this call belonged to dropped episodes."""
        result: SampleResult = {}
        drop = np.concatenate(self._dropped_eps) if self._dropped_eps else None
        self._dropped_eps = []
        dropped_rows = 0
        # Outcomes of the closed rows, scattered into group-major arrays of all rows.
        offsets = np.cumsum([0, *(buf.num_rows for buf in self._buffers)])
        total = int(offsets[-1])
        outcome = {"closed": np.zeros(total, bool), "rewards": np.zeros(total, np.float32),
                   "term": np.zeros(total, bool), "trunc": np.zeros(total, bool),
                   "new_obs": np.full(total, -1)}
        if self._closings:
            groups, rows, new_obs, rew, term, trunc = (
                np.concatenate(c) for c in zip(*self._closings, strict=True))
            where = offsets[groups] + rows
            outcome["closed"][where] = True
            outcome["rewards"][where] = rew
            outcome["term"][where] = term
            outcome["trunc"][where] = trunc
            outcome["new_obs"][where] = new_obs
        acting = {a.group: i for i, a in enumerate(self._acting or [])}
        for g, buf in enumerate(self._buffers):
            if buf.num_rows == 0 and buf.num_obs == 0:
                continue
            store = np.concatenate(buf.obs) if buf.obs else None
            carried: dict[str, np.ndarray] | None = None
            if buf.num_rows:
                part = slice(offsets[g], offsets[g + 1])
                cols = buf.concat_rows()
                if drop is not None:
                    in_drop = np.isin(cols[Columns.EPS_ID], drop)
                    dropped_rows += int(in_drop[self._num_carried[g]:].sum())
                    cols = {k: v[~in_drop] for k, v in cols.items()}
                    part = np.flatnonzero(~in_drop) + offsets[g]
                batch, carried = group_batch(
                    cols, store, {k: v[part] for k, v in outcome.items()}, keep_eps,
                    module_key=self._groups.sort_rank,
                    slot_radix=len(self._module_of_slot) <= 2**16,
                    module_radix=len(self._module_ids) <= 2**16,
                    with_slots=self._writer is not None)
                if keep_eps is not None:  # rows of unfinished episodes are dropped: the
                    self._open_row[cols["slot"]] = -1  # next call starts them afresh
                if batch is not None:
                    self._groups.add_action_logp(g, batch)  # all the group's rows at once
                    for m, module_rows in split_by_module(batch):
                        if self._writer is not None:
                            self._write(self._module_ids[m], module_rows)
                        result[self._module_ids[m]] = module_rows
            self._rebase(g, store, acting.get(g), carried)
        self._closings = []
        return result, dropped_rows

    def _rebase(self, g: int, store: Any, acting_index: int | None,
                carried: dict[str, np.ndarray] | None) -> None:
        """Starts group g's next buffer with the observations still needed: those its
        agents act on next, and those of rows carried over."""
        buf = GroupRows()
        self._buffers[g] = buf
        self._num_carried[g] = 0 if carried is None else len(carried["slot"])
        if acting_index is not None and self._acting is not None:
            acting = self._acting[acting_index]
            base = buf.add_obs(acting.obs)
            self._acting[acting_index] = acting._replace(
                obs_idx=np.arange(base, base + len(acting.obs)))
        if carried is not None:
            obs = carried.pop("obs")
            base = buf.add_obs(obs)
            carried["obs_idx"] = np.arange(base, base + len(obs))
            ids = buf.add_rows(**carried)
            self._open_row[carried["slot"]] = ids

    # ------------------------------------------------------------------ metrics and state
    def get_metrics(self) -> dict[str, Any]:
        metrics = {
            "episode_returns": self._done_returns,
            "episode_lens": self._done_lens,
            "num_env_steps": self._num_env_steps,
            "num_agent_steps": self._num_agent_steps,
            "module_episode_returns": self._module_returns,
            "agent_episode_returns": returns_by_agent(self._agent_returns, self._agents),
            "num_sub_env_restarts": self._num_restarts,
        }
        if self.metrics:
            metrics["metrics_logger"] = self.metrics.export_period()
        self._num_restarts = 0
        self._done_returns, self._done_lens = [], []
        self._module_returns, self._agent_returns = {}, []
        self._num_env_steps = self._num_agent_steps = 0
        return metrics

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        state: dict[str, Any] = {
            "env_to_module": {mid: s for mid, p in self._spaces.env_to_module.items()
                              if (s := p.get_state())},
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
            "num_agent_steps_sampled_lifetime": self.num_agent_steps_sampled_lifetime,
        }
        if select_components(components, not_components, "rl_module")[0]:
            weights = self.module.get_state(inference_only=True)
            state["rl_module"] = {mid: {k: v.numpy() for k, v in s.items()}
                                  for mid, s in weights.items()}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores any subset of `get_state()`; weights of a module this EnvRunner does
        not hold (e.g. a learner-only one) raise UnknownModuleIDError."""
        state = self._drop_stale_weights(state)
        if "rl_module" in state:
            self.module.set_state(state["rl_module"])
        for mid, s in state.get("env_to_module", {}).items():
            self._spaces.env_to_module[mid].set_state(s)
        for key in ("num_env_steps_sampled_lifetime", "num_agent_steps_sampled_lifetime"):
            if key in state:
                setattr(self, key, int(state[key]))

    def _write(self, module_id: ModuleID, batch: dict[str, np.ndarray]) -> None:
        """Hands a module's rows to the EpisodeWriter with each row's agent ID (the slot
        column is popped off the batch)."""
        slots = batch.pop(SLOT)
        names = np.array([str(a) for a in self._agents], dtype=object)
        assert self._writer is not None
        self._writer.add_batch({module_id: {**batch,
                                            AGENT_ID: names[slots % len(self._agents)]}})

    def stop(self) -> None:
        """Closes the envs and writes the recorded episodes still queued."""
        if self._writer is not None:
            self._writer.close()
        for env in self.envs:
            env.close()

