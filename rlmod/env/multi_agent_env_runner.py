"""MultiAgentEnvRunner: samples several MultiAgentEnvs at once, vectorized over all agents.

The default multi-agent EnvRunner beyond a few agents x sub-envs (EnvRunnerGroup's rule);
ReferenceMultiAgentEnvRunner (rlmod/env/multi_agent_reference_runner.py) states the same
semantics in plain Python and is its oracle in the tests. Its modules come from
`config.get_multi_rl_module_spec(env=..., spaces=..., inference_only=True)`, so
learner-only modules are never built here. Three files, one job each: this one (the
sampling loop: envs, episodes, guards, recording), multi_agent_slots.py (per-(env, agent)
slot arrays and who acts next) and multi_agent_rows.py (the rows of a call, from open to
collect, and their batches). Shared helpers: multi_agent_runner_base.py (envs, spaces,
module spec, metrics and state, as the reference runner's), module_groups.py (which
modules share one forward pass), multi_agent_observations.py (stacking and checks).

A row is one action of one agent: `obs` is what the agent acted on, `rewards` everything
the agent received until it next observed (rewards between its acting steps add up),
`new_obs` that next observation (the final one at its episode's end), and the flags are
the agent's own (`"__all__"` applies to agents without a flag of their own).

A row's life, all envs together, in array operations (Python touches an agent only to
read and build the env's dicts):

1. open (RowStore.act): all acting agents of one execution group (a stack group of
   modules that share an architecture, or one module alone) go through ONE forward pass;
   each gets a row in its group's GroupBuffer, and `RowStore.open_row[slot]` its row ID.
2. close (`_close` -> RowStore.close): when the agent next observes, is flagged done
   without an observation, or its episode ends, its row gets its outcome as ClosedRows
   (next observation as a step position) and `open_row[slot]` goes back to -1;
   RowStore.process then stores the step's observations (one sort by group) and turns
   them into RowOutcomes (next observation as an index into the group's stored ones).
3. collect (RowStore.collect, at the end of `sample()`): the closed rows with their
   outcomes become per-module batches (module, slot, then time order); rows still open
   are carried into the next call's buffers.

Index spaces (all int64 arrays or ints):

| index | counts | lives in |
|---|---|---|
| slot | (env, agent): `env_index * len(possible_agents) + agent_index` | AgentSlots arrays, `RowStore.open_row`, rows' `slot` |
| module index | position in `module_ids` | `AgentSlots.module_of`, rows' `module` |
| group | execution group (position in `ModuleGroups.groups`) | `ModuleGroups.group_of_module`, `RowStore.buffers`, ClosedRows / RowOutcomes `.group` |
| index in group | a module's weights inside its StackedGroup | `ModuleGroups.index_in_group` (forward passes only) |
| sort rank | a module's position, modules ordered group by group | `ModuleGroups.sort_rank` (row order only) |
| row ID | a row in its group's GroupBuffer, this call | `RowStore.open_row` values, ClosedRows / RowOutcomes `.row` |
| obs index | an observation stored in its group's GroupBuffer, this call | rows' `obs_idx`, `ActingRows.obs_idx`, `RowOutcomes.next_obs_idx` |
| step position | one of this step's observations (all envs, in queue order) | StepObservations, `ClosedRows.new_obs_pos` |
| acting rank | an action in the step's acting order (what the envs get) | `ActingRows.rank`, `ActingAgents.offset` |

One owner per array: AgentSlots' arrays (mapping, rewards, returns, who observed) are
written by this runner and AgentSlots' methods only; ActingAgents (who acts next, a fresh
one per step) by its methods only; `RowStore.open_row`, the buffers, the acting rows and
the outcomes by RowStore's methods only (this runner reads `open_row`).
Everything that needs the modules is built once, by `make_module()`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

import numpy as np
import torch

from rlmod.core.deferred_init import PendingInit, build_deferred, is_plain
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.types import Array, BoolArray, IntArray
from rlmod.env.env_runner import SampleResult
from rlmod.env.episodes import EpisodeInfo, MultiAgentEpisode, chunk_start
from rlmod.env.guards import step_failed_error
from rlmod.env.module_groups import ModuleGroups
from rlmod.env.multi_agent_observations import AgentPlace
from rlmod.env.multi_agent_rows import (
    SLOT,
    EnvReturns,
    FlaggedEnv,
    RowStore,
    StepObservations,
    step_flags,
)
from rlmod.env.multi_agent_runner_base import MultiAgentRunnerBase
from rlmod.env.multi_agent_slots import ActingAgents, AgentSlots
from rlmod.env.sub_env_failures import SubEnvFailureStreaks
from rlmod.fast_paths import plain_paths
from rlmod.offline.writer import RowRecorder
from rlmod.utils.gc_pause import gc_paused

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

logger = logging.getLogger(__name__)


class MultiAgentEnvRunner(MultiAgentRunnerBase):
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

    def __init__(self, *, config: AlgorithmConfig, worker_index: int = 0) -> None:
        super().__init__(config=config, worker_index=worker_index)
        self.env0 = self.envs[0]
        self._rng_before_module = self._torch_rng_state
        self._restart = config.restart_failed_sub_environments
        self._failure_streaks = SubEnvFailureStreaks(  # restart mode's bound
            env=config.env,
            num_envs=self.num_envs,
            unit="env",
            limit=config.max_consecutive_sub_environment_failures,
        )
        # The modules and all that needs them are built by make_module(), once, on first
        # need (a remote EnvRunner answers get_spaces() first). A custom MultiRLModule
        # class names its own modules: then get_spaces() needs them now.
        self._writer: RowRecorder | None = None  # config.offline_data(output=DIR)
        if not is_plain(self._spec):
            self.make_module()

    def _init_bookkeeping(self) -> None:
        self._slots = AgentSlots(
            self.config,
            agents=self._agents,
            num_envs=self.num_envs,
            module_index=self._module_index,
            spaces=self._spaces,
            envs=self.envs,
            intake=self._intake,
        )
        self._next_episode_id = 0  # one per env episode: EpisodeInfo.id_
        self._dropped_eps: list[IntArray] = []  # agent-episodes of restarted envs
        self._num_steps = 0  # steps of all envs together, named in errors
        self._num_dropped_env_steps = 0  # this call's env steps of dropped episodes
        self._call_start = 0  # _num_steps when this sample() call began
        # Per env.
        self._episode: list[EpisodeInfo | None] = [None] * self.num_envs
        self._ep_len = np.zeros(self.num_envs, np.int64)
        # Per sample() call: rows and who acts next, per execution group.
        self._rows = RowStore(
            self._groups,
            module_ids=self._module_ids,
            spaces=self._spaces,
            intake=self._intake,
            num_slots=len(self._slots),
            agent_episode_of_slot=self._slots.agent_episode_of,
        )
        self._begin_step()
        self._done_eps: list[IntArray] = []  # agent-episodes ended in this call
        # Callbacks' episode objects (only with an episode hook, see EnvRunner.__init__).
        self._ma_episodes: list[MultiAgentEpisode | None] = [None] * self.num_envs
        self._ma_episodes_done: list[MultiAgentEpisode] = []
        # id(episode) -> (episode, its length when this sample() call began)
        self._chunk_starts: dict[int, tuple[object, int]] = {}

    # ------------------------------------------------------------------ modules
    @property
    def module(self) -> MultiRLModule:
        """The inference-only MultiRLModule; modules still without weights (built without
        initialisers, no weights set yet) get their initial weights first."""
        self.make_module()
        self._init_pending_modules()
        assert self._module is not None
        return self._module

    @gc_paused()  # thousands of modules: rlmod/utils/gc_pause.py
    def make_module(self) -> None:
        """Builds the modules and everything that runs them, once (RLlib's name). Called
        by everything that needs them; EnvRunnerGroup calls it on remote EnvRunners right
        after the first one's get_spaces(), so they build while the driver builds its
        Learner. Modules whose class allows it are built without initialisers: the
        first weight sync sets them, or `_init_pending_modules` initialises them first."""
        if self._module is not None:
            return
        with self.own_torch_rng():  # the driver's RNG stays as if no EnvRunner were built
            module, deferred = build_deferred(self._spec)
        self._pending_init = PendingInit(self._spec, deferred, self._rng_before_module)
        self._use_module(module)
        self._groups = ModuleGroups(
            module,
            self._module_ids,
            self._module_to_env,
            stack=self.config.stack_modules and not plain_paths(),
        )
        self._writer = RowRecorder.create(
            self.config,
            module_ids=self._module_ids,
            spaces=self._spaces,
            module_to_env=self._module_to_env,
            env_spaces=self.get_spaces(),
            agents=self._agents,
            worker_index=self.worker_index,
        )
        self._init_bookkeeping()

    def _init_pending_modules(self) -> None:
        """Runs the initialisers of the modules built without them that got no weights
        (rlmod.core.deferred_init): nothing reads a module before this or a weight sync."""
        after = (
            self._pending_init.initialise(self._module)
            if self._pending_init and self._module is not None
            else None
        )
        if after is not None:  # the stream continues as after a normal build
            self._torch_rng_state = after

    def _slots_for(self, e: int, keys: tuple) -> IntArray:
        """Slots of `keys` in env `e`; maps the agents new to its episode."""
        episode = self._episode[e]
        assert episode is not None
        return self._slots.slots_for(e, keys, episode)

    # ------------------------------------------------------------------ episodes
    def _reset_all(self) -> None:
        """Starts every env afresh; rows of unfinished episodes are dropped."""
        if self._writer is not None:  # episodes cut off by this reset are never written
            self._writer.writer.drop_pending()
        self._rows.reset()
        self._slots.clear_episode(slice(None))
        self._begin_step()
        for e in range(self.num_envs):
            self._reset_env(e)
        self._rows.process(self._step_obs)

    def _reset_env(self, e: int) -> None:
        """Resets env `e`; its agents' first observations join this step's observations."""
        obs, infos = self._reset_env_once(e)
        self._episode[e] = EpisodeInfo(self._next_episode_id, e, self.worker_index)
        self._next_episode_id += 1
        self._ep_len[e] = 0
        keys = tuple(obs)
        slots = self._slots_for(e, keys)
        if self._track_episodes:
            self._ma_episodes[e] = MultiAgentEpisode(
                id_=self._next_episode_id - 1,
                observations=obs,
                infos=infos,
                env_index=e,
                agent_to_module=self._slots.modules_of(keys, slots),
            )
            self.callbacks.call("on_episode_created", **self._episode_kwargs(e))
            self.callbacks.call("on_episode_start", **self._episode_kwargs(e))
        self._slots.observed[slots] = True
        n = len(keys)
        self._add_observations(
            slots, [self._intake.chunk(obs.values())], np.ones(n, bool), np.ones(n, bool)
        )
        self._acting.add(e, keys, slots)

    def _end_episode(self, e: int, terminated: bool) -> None:
        """Closes the episode's open rows (flags from "__all__") and records its returns."""
        block, first = self._slots.block(e), e * len(self._agents)
        open_local = np.flatnonzero(self._rows.open_row[block] >= 0)
        if open_local.size:
            k = open_local.size
            self._close(
                open_local + first,
                np.full(k, terminated),
                np.full(k, not terminated),
                np.full(k, -1),
            )
        episode = self._episode[e]
        assert episode is not None
        part = np.flatnonzero(self._slots.episode_of[block] == episode.id_)  # took part
        slots = part + first
        self._stats.add(
            int(self._ep_len[e]),
            part,
            self._slots.episode_return[slots],
            self._slots.module_of[slots],
        )
        self._done_eps.append(self._slots.agent_episode_of[slots])
        self._slots.clear_episode(block)
        if self._failure_streaks.active:  # restart mode: this episode's rows are kept
            self._failure_streaks.kept(np.arange(self.num_envs) == e)
        ma_episode = self._ma_episodes[e]
        if ma_episode is not None:
            self.callbacks.call("on_episode_end", prev_episode_chunks=[], **self._episode_kwargs(e))
            self._ma_episodes_done.append(ma_episode)
            self._ma_episodes[e] = None

    def _episode_kwargs(self, e: int) -> dict[str, object]:
        return {
            "episode": self._ma_episodes[e],
            "env_runner": self,
            "metrics_logger": self.metrics,
            "env": self.envs[e],
            "env_index": e,
            "rl_module": self.module,
        }

    # ------------------------------------------------------------------ one step
    def _begin_step(self) -> None:
        """Fresh records for the next step: its observations and who acts in it."""
        self._step_obs = StepObservations()
        self._acting = ActingAgents(self.num_envs)

    def _add_observations(
        self, slots: IntArray, obs: list, acts_next: BoolArray, episode_starts: BoolArray
    ) -> None:
        """Queues observations for `RowStore.process` (`obs`: per-env chunks from
        `ObservationIntake.chunk`); see `StepObservations`."""
        queued = self._step_obs
        queued.slots.append(slots)
        queued.modules.append(self._slots.module_of[slots])
        queued.obs.extend(obs)
        queued.acts_next.append(acts_next)
        queued.episode_starts.append(episode_starts)

    def _close(
        self, slots: IntArray, term: BoolArray, trunc: BoolArray, new_obs_pos: IntArray
    ) -> None:
        """Completes the open rows of `slots` (RowStore.close); `new_obs_pos` indexes this
        step's observations (-1: no new observation, the row's own obs stands in)."""
        groups = self._groups.group_of_module[self._slots.module_of[slots]]
        rewards = self._slots.pending_reward[slots]
        closed = self._rows.close(slots, groups, rewards, term, trunc, new_obs_pos)
        self._slots.pending_reward[slots if closed.all() else slots[closed]] = 0.0

    def _step_envs(self, actions: list) -> int:
        """Steps every env with its agents' actions and books what came back: rewards,
        completed rows, who acts next; resets envs whose episode is over. Per env, Python
        only builds and reads the dicts; the numpy work runs once for all envs. Returns
        the number of agent steps taken."""
        acted = self._acting
        self._begin_step()
        returns = self._call_step(actions, acted)
        self._ep_len += 1
        self._num_steps += 1
        slots = np.concatenate(returns.slots)
        self._slots.book_rewards(returns, slots)
        term, trunc, over, extras = step_flags(returns.flagged, returns.obs_agents, returns.num_obs)
        acts_next = ~(term | trunc)
        starts = ~self._slots.observed[slots]  # first observation of the agent in its episode
        self._slots.observed[slots] = True
        self._add_observations(slots, returns.obs_chunks, acts_next, starts)
        self._close(slots, term, trunc, np.arange(len(slots)))
        for e, agent, terminated in extras:  # done agents that got no final obs
            self._close(
                self._slots_for(e, (agent,)),
                np.array([terminated]),
                np.array([not terminated]),
                np.full(1, -1),
            )
        ended = {e for e, _ in over} | {e for e, _ in returns.failed}
        self._acting.add_observers(returns, acts_next, ended)
        for e, terminated in over:
            self._end_episode(e, terminated=bool(terminated))
            self._reset_env(e)
        for e, error in returns.failed:
            self._restart_env(e, error)
        return returns.agent_steps

    def _call_step(self, actions: list, acted: ActingAgents) -> EnvReturns:
        """Calls each env's `step()` with the actions of its acting agents (`actions` in
        acting order, env e's from `acted.offset[e]`) and gathers what came back."""
        out = EnvReturns()
        for e, env in enumerate(self.envs):
            agents, off = acted.agents[e], acted.offset[e]
            out.agent_steps += len(agents)
            action_dict = dict(zip(agents, actions[off : off + len(agents)], strict=True))
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
            slots = acted.slots[e] if obs_agents == agents else self._slots_for(e, obs_agents)
            ma_episode = self._ma_episodes[e] if self._track_episodes else None
            if ma_episode is not None:  # only with an episode callback hook
                ma_episode.agent_to_module.update(self._slots.modules_of(obs_agents, slots))
                ma_episode.add_env_step(
                    obs,
                    actions=action_dict,
                    rewards=rewards,
                    infos=infos,
                    terminateds=terminateds,
                    truncateds=truncateds,
                )
                self.callbacks.call("on_episode_step", **self._episode_kwargs(e))
            if rewards:
                reward_agents = tuple(rewards)
                if reward_agents == obs_agents:
                    out.reward_dicts.append(rewards)
                    out.reward_slots.append(slots)
                else:
                    self._slots.add_rewards(
                        self._slots_for(e, reward_agents),
                        np.fromiter(rewards.values(), np.float64, len(reward_agents)),
                    )
            if any(terminateds.values()) or any(truncateds.values()):  # else nothing to read
                out.flagged.append(FlaggedEnv(e, out.num_obs, terminateds, truncateds))
            out.num_obs += len(obs_agents)
            out.obs_agents.append(obs_agents)
            out.slots.append(slots)
            out.obs_chunks.append(self._intake.chunk(obs.values()))
        return out

    def _raise_step_failed(self, e: int, err: BaseException) -> NoReturn:
        raise step_failed_error(
            self.config.env, e, int(self._ep_len[e]) + 1, self._num_steps + 1, err
        ) from err

    def _restart_env(self, e: int, err: BaseException) -> None:
        """Restart mode: recreates env `e`, drops its unfinished episode (no rows, no
        metrics) and starts a new one."""
        logger.warning(
            "env=%r: env %d raised at step %d and was recreated (%r); its "
            "unfinished episode is dropped.",
            self.config.env,
            e,
            self._num_steps,
            err,
        )
        self._failure_streaks.record(e, err, step=self._num_steps)
        block = self._slots.block(e)
        episode = self._episode[e]
        assert episode is not None
        took_part = self._slots.episode_of[block] == episode.id_
        self._dropped_eps.append(self._slots.agent_episode_of[block][took_part])
        # Its steps in this call, the failed one included (earlier ones were counted then).
        self._num_dropped_env_steps += min(int(self._ep_len[e]), self._num_steps - self._call_start)
        self._rows.forget_open(block)
        self._slots.clear_episode(block)
        self._slots.episode_of[block] = -1
        try:
            self.envs[e].close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close too
            logger.debug("env %d failed to close after raising", e)
        self.envs[e] = self._make_env()
        self._spaces.replace_env(e, self.envs[e])
        self._num_restarts += 1
        self._reset_env(e)

    def _locate(self, slot: int) -> AgentPlace:
        e, agent = self._slots.locate(slot)
        mid = self._module_ids[self._slots.module_of[slot]]
        return AgentPlace(e, agent, int(self._ep_len[e]), self._num_steps, self._spaces.raw[mid][0])

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
    ) -> SampleResult:
        """Steps all envs for `num_timesteps` env steps (each env's step() counts one) or
        until `num_episodes` episodes are complete (then only their rows are returned)."""
        num_timesteps = self._timesteps_to_sample(num_timesteps, num_episodes)
        self.make_module()
        self._init_pending_modules()
        with self._sampling_call():  # a call that raises leaves no trace
            return self._sample(num_timesteps, num_episodes, explore)

    def _forget_call(self) -> None:
        self._rows.acting = None  # the next call starts every env afresh
        self._dropped_eps = []
        self._num_dropped_env_steps = 0

    def _sample(
        self, num_timesteps: int | None, num_episodes: int | None, explore: bool | None
    ) -> SampleResult:
        explore = self.config.explore if explore is None else explore
        self._call_start = self._num_steps
        if num_episodes is not None or self._rows.acting is None:
            self._reset_all()  # whole episodes only: start every env afresh
        first_done = len(self._stats)
        self._done_eps = []
        self._ma_episodes_done = []
        self._chunk_starts = {id(ep): (ep, len(ep)) for ep in self._ma_episodes if ep is not None}
        env_steps = agent_steps = 0
        with torch.inference_mode():
            while (
                len(self._stats) - first_done < num_episodes
                if num_episodes is not None
                else env_steps < (num_timesteps or 0)
            ):
                agent_steps += self._step_envs(self._rows.act(explore, self._acting.num))
                env_steps += self.num_envs
                self._rows.process(self._step_obs)
        if self._failure_streaks.active and num_episodes is None:  # restart mode: the
            self._failure_streaks.kept(self._ep_len > 0)  # ongoing episodes' rows are kept
        keep = np.concatenate(self._done_eps) if num_episodes is not None else None
        result, dropped_rows = self._collect(keep_eps=keep)
        # Steps of dropped episodes (restarted envs) never reach a batch: not counted.
        env_steps -= min(env_steps, self._num_dropped_env_steps)
        agent_steps -= dropped_rows
        self._num_dropped_env_steps = 0
        self._count_steps(env_steps, agent_steps)
        if self._track_episodes:
            starts = self._chunk_starts  # this call's steps only, as RLlib's chunks
            chunks = [
                ep.chunk(chunk_start(starts, ep))
                for ep in [*self._ma_episodes_done, *self._ma_episodes]
                if ep is not None and len(ep) > chunk_start(starts, ep)
            ]
            self.callbacks.call(
                "on_sample_end", env_runner=self, metrics_logger=self.metrics, samples=chunks
            )
        return result

    def _collect(self, keep_eps: IntArray | None) -> tuple[SampleResult, int]:
        """This call's per-module batches (see RowStore.collect), recorded if asked; and
        how many rows acted in this call belonged to dropped episodes."""
        drop = np.concatenate(self._dropped_eps) if self._dropped_eps else None
        self._dropped_eps = []
        batches, dropped_rows = self._rows.collect(
            keep_eps, drop, with_slots=self._writer is not None
        )
        result: SampleResult = {}
        for m, batch in batches:
            mid = self._module_ids[m]
            if self._writer is not None:  # the slot column names the agent
                self._writer.write(mid, batch, batch.pop(SLOT))
            result[mid] = batch
        return result, dropped_rows

    # ------------------------------------------------------------------ state
    def _set_weights(self, weights: Mapping[ModuleID, Mapping[str, Array]]) -> None:
        """Stack groups in one copy per parameter, the rest per module."""
        assert self._module is not None
        self._module.set_state(self._groups.set_weights(weights))
        self._pending_init.weights_set(weights)

    def stop(self) -> None:
        """Closes the envs and writes the recorded episodes still queued."""
        if self._writer is not None:
            self._writer.writer.close()
        super().stop()
