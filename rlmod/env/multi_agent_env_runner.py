"""MultiAgentEnvRunner: samples several MultiAgentEnvs at once with an inference-only MultiRLModule.

Built by EnvRunnerGroup when `config.is_multi_agent`; its modules come from
`config.get_multi_rl_module_spec(env=..., spaces=self.get_spaces(), inference_only=True)`,
so learner-only modules are never built here.

How a step runs (all envs together): each agent that received an observation acts in the
next step; all acting agents of all envs mapped to one module go through ONE forward pass
of that module. Per-(env, agent) bookkeeping lives in flat numpy arrays indexed by a
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
from collections.abc import Collection
from itertools import chain, compress
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
import torch

from rlmod.connectors.module_to_env import ENV_ACTIONS, add_action_logp
from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import ModuleID
from rlmod.env.env_runner import ENV_SPACES_KEY, EnvRunner, SampleResult
from rlmod.env.episodes import MultiAgentEpisode
from rlmod.env.guards import bad_observation, non_finite_rows
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import AgentID, MultiAgentEnv
from rlmod.env.multi_agent_rows import (
    EpisodeInfo,
    ModuleRows,
    join_box_values,
    module_batch,
    returns_by_agent,
    stack_observations,
    step_flags,
)
from rlmod.env.registry import make_env
from rlmod.errors import EnvError, UnknownModuleIDError
from rlmod.utils.checkpoints import select_components
from rlmod.utils.seeding import derive_seed

logger = logging.getLogger(__name__)


class MultiAgentEnvRunner(EnvRunner):
    """Steps `num_envs_per_env_runner` MultiAgentEnvs; one forward pass per module per step.

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
        self.module = spec.build()
        self.module.eval()
        self._spaces.attach(self.module)
        self._module_ids: list[ModuleID] = self.module.keys()
        self._module_index = {mid: i for i, mid in enumerate(self._module_ids)}
        self._restart = config.restart_failed_sub_environments
        self._check_obs = config.check_agent_observations
        self._check_finite_data = True  # benchmarks/guard_overhead.py turns it off to compare
        self._module_to_env = {}
        for mid, sub in self.module.items():
            raw_act = self._spaces.raw.get(mid, (None, sub.action_space))[1]
            self._module_to_env[mid] = config.build_module_to_env_connector(
                self.env0, sub.observation_space, raw_act)
        self._init_bookkeeping()

    def _init_bookkeeping(self) -> None:
        # Per (env, agent) slot: flat arrays, see the module docstring.
        num_slots = self.num_envs * len(self._agents)
        self._mod_of = np.zeros(num_slots, np.int64)  # module index, valid in its episode
        self._slot_ep = np.full(num_slots, -1, np.int64)  # env episode the mapping is for
        self._eps_of = np.zeros(num_slots, np.int64)  # agent-episode ID (the eps_id column)
        self._open_row = np.full(num_slots, -1, np.int64)  # row awaiting its outcome, or -1
        self._pend_rew = np.zeros(num_slots)  # reward since the agent last acted
        self._ret = np.zeros(num_slots)  # agent's return in its current episode
        self._observed = np.zeros(num_slots, bool)  # agent has observed in this episode
        self._next_eps_id = 0
        self._next_episode_id = 0
        self._dropped_eps: list[np.ndarray] = []  # agent-episodes of restarted envs
        self._num_restarts = 0
        self._num_steps = 0  # steps of all envs together, named in errors
        self._num_dropped_env_steps = 0  # this call's env steps of dropped episodes
        self._num_carried = [0] * len(self._module_ids)  # rows carried into the buffers
        self._call_start = 0  # _num_steps when this sample() call began
        # Per env.
        self._episode: list[EpisodeInfo | None] = [None] * self.num_envs
        self._ep_len = np.zeros(self.num_envs, np.int64)
        self._act_keys: list[tuple] = [()] * self.num_envs  # agents acting next, env's order
        self._act_slots: list[np.ndarray] = [np.zeros(0, np.int64)] * self.num_envs
        self._act_off = [0] * self.num_envs  # their offset in the step's acting order
        self._seeds = [derive_seed(self.config.seed, self.worker_index, e)
                       for e in range(self.num_envs)]
        # Per sample() call.
        self._buffers = [ModuleRows() for _ in self._module_ids]
        self._closes: list[tuple[np.ndarray, ...]] = []  # (mod, row, new_obs_idx, rew, te, tr)
        # Per module with acting agents: (m, obs, obs_idx, slots, acting order position).
        self._acting: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None
        self._acting = None
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
        stale = self._slot_ep[slots] != episode.id_
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
        self._mod_of[slots] = mods
        self._slot_ep[slots] = episode.id_
        self._eps_of[slots] = np.arange(self._next_eps_id, self._next_eps_id + len(slots))
        self._next_eps_id += len(slots)

    # ------------------------------------------------------------------ episodes
    def _reset_all(self) -> None:
        """Starts every env afresh; rows of unfinished episodes are dropped."""
        self._buffers = [ModuleRows() for _ in self._module_ids]
        self._num_carried = [0] * len(self._module_ids)
        self._closes = []
        for arr, value in ((self._open_row, -1), (self._pend_rew, 0.0), (self._ret, 0.0),
                           (self._observed, False)):
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
        self._add_segment(slots, self._mod_of[slots], [self._obs_chunk(obs.values())],
                          np.ones(n, bool), np.ones(n, bool))
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
        part = np.flatnonzero(self._slot_ep[block] == episode.id_)  # agents that took part
        slots = part + e * num_agents
        rets, mods = self._ret[slots], self._mod_of[slots]
        self._done_returns.append(float(rets.sum()))
        self._done_lens.append(int(self._ep_len[e]))
        sums = np.bincount(mods, weights=rets, minlength=len(self._module_ids))
        for m in np.unique(mods).tolist():
            self._module_returns.setdefault(self._module_ids[m], []).append(float(sums[m]))
        self._agent_returns.append((part, rets))
        self._done_eps.append(self._eps_of[slots])
        self._ret[block] = 0.0
        self._pend_rew[block] = 0.0
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
        return {a: self._module_ids[m] for a, m in zip(keys, self._mod_of[slots].tolist(),
                                                       strict=True)}

    # ------------------------------------------------------------------ one step
    def _begin_step(self) -> None:
        self._seg: dict[str, list] = {"slots": [], "mods": [], "obs": [], "act": [],
                                      "starts": [], "closes": []}
        self._act_n = 0  # acting agents so far in this step
        self._act_keys = [()] * self.num_envs
        self._act_slots = list(self._act_slots)
        self._act_off = [0] * self.num_envs

    def _add_segment(self, slots: np.ndarray, mods: np.ndarray, obs: list, act: np.ndarray,
                     starts: np.ndarray) -> None:
        """Queues observations for `_process_observations` (`obs`: per-env chunks from
        `_obs_chunk`; `mods`: their modules, taken before any reset remaps the slots;
        `act`: which of them act next)."""
        seg = self._seg
        seg["slots"].append(slots)
        seg["mods"].append(mods)
        seg["obs"].extend(obs)
        seg["act"].append(act)
        seg["starts"].append(starts)

    def _set_acting(self, e: int, keys: tuple, slots: np.ndarray) -> None:
        """Env `e`'s agents that act next; the order of calls is the acting order."""
        self._act_keys[e], self._act_slots[e] = keys, slots
        self._act_off[e] = self._act_n
        self._act_n += len(keys)

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
        self._seg["closes"].append((self._mod_of[slots], rows, new_obs_pos,
                                    self._pend_rew[slots], term, trunc))
        self._open_row[slots] = -1
        self._pend_rew[slots] = 0.0

    def _step_envs(self, actions: list) -> int:
        """Steps every env with its agents' actions and books what came back: rewards,
        completed rows, who acts next; resets envs whose episode is over. Per env, Python
        only builds and reads the dicts; the numpy work runs once for all envs. Returns
        the number of agent steps taken."""
        acted_keys, acted_slots, acted_off = self._act_keys, self._act_slots, self._act_off
        self._begin_step()
        keys_l: list[tuple] = []
        slots_l: list[np.ndarray] = []
        chunks: list = []  # per env: its observations, see _obs_chunk
        rew_dicts: list[dict] = []  # rewards of exactly the agents that observed, in order
        rew_slots: list[np.ndarray] = []  # their slots
        flagged = []  # (env, its first obs position, terminateds, truncateds)
        failed: list[tuple[int, BaseException]] = []  # envs that raised (restart mode)
        agent_steps = num_obs = 0
        for e, env in enumerate(self.envs):
            keys, off = acted_keys[e], acted_off[e]
            agent_steps += len(keys)
            action_dict = dict(zip(keys, actions[off:off + len(keys)], strict=True))
            try:
                obs, rew, te, tr, infos = env.step(action_dict)
            except Exception as err:
                if not self._restart:
                    raise EnvError(
                        f"env={self.config.env!r} (env {e} of this EnvRunner) raised in "
                        f"step() at step {self._ep_len[e] + 1} of its episode (step "
                        f"{self._num_steps + 1} of this EnvRunner): {err!r}. This sample() "
                        "call's rows are dropped (episodes finished earlier are kept in the "
                        "metrics) and the next sample() starts every env afresh; "
                        "config.fault_tolerance(restart_failed_sub_environments=True) "
                        "recreates a failing env instead and goes on."
                    ) from err
                failed.append((e, err))  # its agents' rows are dropped (not counted)
                keys_l.append(())
                slots_l.append(np.zeros(0, np.int64))
                chunks.append([])
                continue
            okeys = tuple(obs)
            # Usually the agents that acted observe again (their final obs if done).
            slots = acted_slots[e] if okeys == keys else self._slots_for(e, okeys)
            ma_episode = self._ma_episodes[e] if self._track_episodes else None
            if ma_episode is not None:
                ma_episode.agent_to_module.update(self._modules_of(okeys, slots))
                ma_episode.add_env_step(obs, actions=action_dict, rewards=rew, infos=infos,
                                        terminateds=te, truncateds=tr)
                self.callbacks.call("on_episode_step", **self._episode_kwargs(e))
            if rew:
                rkeys = tuple(rew)
                if rkeys == okeys:
                    rew_dicts.append(rew)
                    rew_slots.append(slots)
                else:
                    self._add_rewards(self._slots_for(e, rkeys),
                                      np.fromiter(rew.values(), np.float64, len(rkeys)))
            if any(te.values()) or any(tr.values()):  # else all False: nothing to read
                flagged.append((e, num_obs, te, tr))
            num_obs += len(okeys)
            keys_l.append(okeys)
            slots_l.append(slots)
            chunks.append(self._obs_chunk(obs.values()))
        self._ep_len += 1
        self._num_steps += 1
        slots = np.concatenate(slots_l)
        if rew_dicts:
            rv = np.fromiter(chain.from_iterable(r.values() for r in rew_dicts), np.float64,
                             sum(map(len, rew_dicts)))
            # Usually every env rewarded all agents that observed: their slots are `slots`.
            self._add_rewards(slots if len(rew_dicts) == len(self.envs)
                              else np.concatenate(rew_slots), rv)
        term, trunc, over, extras = step_flags(flagged, keys_l, num_obs)
        done = term | trunc
        act = ~done
        starts = ~self._observed[slots]  # first observation of the agent in its episode
        self._observed[slots] = True
        self._add_segment(slots, self._mod_of[slots], chunks, act, starts)
        self._close(slots, term, trunc, np.arange(len(slots)))
        for e, agent, terminated in extras:  # done agents that got no final obs
            self._close(self._slots_for(e, (agent,)), np.array([terminated]),
                        np.array([not terminated]), np.full(1, -1))
        # Who acts next: all that observed in an env without flags, else those not done.
        ended = {e for e, _ in over} | {e for e, _ in failed}
        flag_start = {e: start for e, start, _, _ in flagged}
        for e, (okeys, sl) in enumerate(zip(keys_l, slots_l, strict=True)):
            if e in ended:
                continue
            start = flag_start.get(e)
            if start is None:
                self._set_acting(e, okeys, sl)
                continue
            mask = act[start:start + len(okeys)]
            if mask.any():
                self._set_acting(e, tuple(compress(okeys, mask.tolist())), sl[mask])
        for e, terminated in over:
            self._end_episode(e, terminated=bool(terminated))
            self._reset_env(e)
        for e, error in failed:
            self._restart_env(e, error)
        return agent_steps

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
        self._dropped_eps.append(self._eps_of[block][self._slot_ep[block] == episode.id_])
        # Its steps in this call, the failed one included (earlier ones were counted then).
        self._num_dropped_env_steps += min(int(self._ep_len[e]),
                                           self._num_steps - self._call_start)
        self._open_row[block] = -1
        self._pend_rew[block] = 0.0
        self._ret[block] = 0.0
        self._observed[block] = False
        self._slot_ep[block] = -1
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
        if self._check_finite_data and not np.isfinite(rewards).all():
            self._raise_non_finite(slots[~np.isfinite(rewards)], "rewards")
        self._pend_rew[slots] += rewards
        self._ret[slots] += rewards

    def _process_observations(self) -> None:
        """Runs each module's env-to-module pipeline on its agents' observations (all envs
        at once), stores them and prepares the next forward passes."""
        seg = self._seg
        slots = np.concatenate(seg["slots"])
        mods = np.concatenate(seg["mods"])
        act = np.concatenate(seg["act"])
        starts = np.concatenate(seg["starts"])
        act_rank = np.cumsum(act) - 1  # position among this step's acting agents
        store_idx = np.empty(len(slots), np.int64)
        order = np.argsort(self._sort_key(mods), kind="stable")
        sorted_mods = mods[order]
        cuts = np.flatnonzero(sorted_mods[1:] != sorted_mods[:-1]) + 1
        acting = []
        # All modules see one Box space (the common case): the chunks are stacked already.
        shared = self._spaces.shared_obs_space()
        chunks = [c for c in seg["obs"] if len(c)]
        stacked = vals = None
        if shared is not None and chunks:
            try:
                stacked = np.concatenate([c if isinstance(c, np.ndarray)
                                          else stack_observations(shared, c) for c in chunks])
            except ValueError:  # ragged shapes: name the agent below
                stacked = None
            if stacked is None or (self._check_obs and (
                    stacked.shape[1:] != shared.shape or stacked.dtype != shared.dtype)):
                self._raise_bad_observation(slots, list(chain.from_iterable(
                    c if isinstance(c, list) else list(c) for c in seg["obs"])))
            found = non_finite_rows(stacked, len(stacked), "obs") if self._check_finite_data else None
            if found is not None:
                self._raise_non_finite(slots[found[0]], found[1])
        else:
            vals = list(chain.from_iterable(chunks))
        for pos in np.split(order, cuts) if len(order) else []:
            m = int(mods[pos[0]])
            mid = self._module_ids[m]
            if stacked is not None:
                raw = np.take(stacked, pos, axis=0)
            else:
                assert vals is not None
                picked = ((vals[int(pos[0])],) if len(pos) == 1
                          else operator.itemgetter(*pos.tolist())(vals))
                raw = self._stack_checked(mid, picked, slots[pos])
            pipeline = self._spaces.env_to_module[mid]
            obs = pipeline(raw, episode_starts=starts[pos]) if len(pipeline) else raw
            base = self._buffers[m].add_obs(obs)
            store_idx[pos] = np.arange(base, base + len(pos))
            a = act[pos]
            if a.all():
                acting.append((m, obs, store_idx[pos], slots[pos], act_rank[pos]))
            elif a.any():
                pa = pos[a]
                # np.compress: 5x faster than a boolean mask on the rows of a 2-D array.
                acting.append((m, np.compress(a, obs, axis=0), store_idx[pa], slots[pa],
                               act_rank[pa]))
        for mod, rows, pos, rew, term, trunc in seg["closes"]:
            new_obs = np.full(len(pos), -1)
            seen = pos >= 0
            new_obs[seen] = store_idx[pos[seen]]
            self._closes.append((mod, rows, new_obs, rew, term, trunc))
        self._acting = acting

    def _stack_checked(self, mid: ModuleID, picked: Any, slots: np.ndarray) -> Any:
        """Module `mid`'s observations stacked, checked (shape and dtype with
        `check_agent_observations`, finite always) with the agent named where not."""
        space = self._spaces.raw[mid][0]
        try:
            raw = stack_observations(space, picked)
        except ValueError:
            self._raise_bad_observation(slots, list(picked), space)
        if self._check_obs and isinstance(space, gym.spaces.Box) and (
                raw.shape[1:] != space.shape or raw.dtype != space.dtype):
            self._raise_bad_observation(slots, list(picked), space)
        found = non_finite_rows(raw, len(slots), "obs") if self._check_finite_data else None
        if found is not None:
            self._raise_non_finite(slots[found[0]], found[1])
        return raw

    def _agent_at(self, slot: int) -> tuple[int, AgentID]:
        return slot // len(self._agents), self._agents[slot % len(self._agents)]

    def _raise_non_finite(self, slots: np.ndarray, key: str) -> NoReturn:
        e, agent = self._agent_at(int(slots[0]))
        raise EnvError(
            f"env={self.config.env!r} returned a non-finite (NaN or inf) {key} for agent "
            f"{agent!r} in env {e} at step {self._ep_len[e]} of its episode (step "
            f"{self._num_steps} of this EnvRunner). Nothing of this sample() call reaches a "
            "Learner; fix the env (rlmod.env.env_checker.check_multi_agent_env finds such "
            "values)."
        )

    def _raise_bad_observation(self, slots: np.ndarray, values: list,
                               space: gym.Space | None = None) -> NoReturn:
        """Names the first agent whose observation does not fit its module's space."""
        for slot, value in zip(slots.tolist(), values, strict=False):
            e, agent = self._agent_at(slot)
            obs_space = space or self._spaces.raw[self._module_ids[self._mod_of[slot]]][0]
            problem = bad_observation(obs_space, value)
            if problem is not None:
                raise EnvError(
                    f"env={self.config.env!r}: the observation of agent {agent!r} in env {e} "
                    f"at step {self._ep_len[e]} of its episode {problem}. Return numpy arrays "
                    "of the declared shape and dtype (config.env_runners("
                    "check_agent_observations=False) skips this check)."
                )
        raise EnvError(f"env={self.config.env!r}: observations of this step do not stack "
                       "into their spaces' shapes.")

    def _obs_chunk(self, values: Collection) -> np.ndarray | list:
        """One env's observations: stacked at once while they are hot in the cache (the
        env's arrays are then freed) where all modules share one Box space, else a list."""
        shared = self._spaces.shared_obs_space()
        stacked = None if shared is None else join_box_values(shared, values)
        return list(values) if stacked is None else stacked

    def _sort_key(self, mods: np.ndarray) -> np.ndarray:
        """Module indices as uint16 where they fit: numpy then sorts (stably) by radix."""
        return mods.astype(np.uint16) if len(self._module_ids) <= 2**16 else mods

    def _act(self, explore: bool) -> list:
        """One forward pass per module; returns the env actions in acting order."""
        assert self._acting is not None
        pieces = []
        for m, obs, obs_idx, slots, rank in self._acting:
            mid = self._module_ids[m]
            module = self.module[mid]
            batch = {Columns.OBS: torch.from_numpy(obs)}
            out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
            data = self._module_to_env[mid](out, rl_module=module, explore=explore)
            row = {"obs_idx": obs_idx, "slot": slots, Columns.EPS_ID: self._eps_of[slots],
                   Columns.ACTIONS: data[Columns.ACTIONS].numpy(),
                   Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS].numpy()}
            if Columns.ACTION_LOGP in data:  # else computed per module batch in _collect
                row[Columns.ACTION_LOGP] = data[Columns.ACTION_LOGP].numpy()
            ids = self._buffers[m].add_rows(**row)
            self._open_row[slots] = ids
            pieces.append((rank, _per_row(data[ENV_ACTIONS], len(slots))))
        if not pieces:
            return []
        first = pieces[0][1]
        if all(p.shape[1:] == first.shape[1:] and p.dtype == first.dtype for _, p in pieces):
            actions = np.empty((self._act_n, *first.shape[1:]), first.dtype)
            for rank, p in pieces:
                actions[rank] = p
            return actions.tolist() if actions.ndim == 1 else list(actions)
        out_list: list = [None] * self._act_n  # modules with differently shaped actions
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
        """Turns the buffers into flat per-module batches, rows of each (env, agent)
        sequence contiguous and in time order; carries rows still open into the next call.
        Also returns how many rows acted in this call belonged to dropped episodes."""
        result: SampleResult = {}
        drop = np.concatenate(self._dropped_eps) if self._dropped_eps else None
        self._dropped_eps = []
        dropped_rows = 0
        # Outcomes of the closed rows, scattered into module-major arrays of all rows.
        offsets = np.cumsum([0, *(buf.num_rows for buf in self._buffers)])
        total = int(offsets[-1])
        outcome = {"closed": np.zeros(total, bool), "rewards": np.zeros(total, np.float32),
                   "term": np.zeros(total, bool), "trunc": np.zeros(total, bool),
                   "new_obs": np.full(total, -1)}
        if self._closes:
            mods, rows, new_obs, rew, term, trunc = (
                np.concatenate(c) for c in zip(*self._closes, strict=True))
            where = offsets[mods] + rows
            outcome["closed"][where] = True
            outcome["rewards"][where] = rew
            outcome["term"][where] = term
            outcome["trunc"][where] = trunc
            outcome["new_obs"][where] = new_obs
        acting = {a[0]: i for i, a in enumerate(self._acting or [])}
        for m, buf in enumerate(self._buffers):
            if buf.num_rows == 0 and buf.num_obs == 0:
                continue
            store = np.concatenate(buf.obs) if buf.obs else None
            carried: dict[str, np.ndarray] | None = None
            if buf.num_rows:
                part = slice(offsets[m], offsets[m + 1])
                cols = buf.concat_rows()
                if drop is not None:
                    in_drop = np.isin(cols[Columns.EPS_ID], drop)
                    dropped_rows += int(in_drop[self._num_carried[m]:].sum())
                    cols = {k: v[~in_drop] for k, v in cols.items()}
                    part = np.flatnonzero(~in_drop) + offsets[m]
                batch, carried = module_batch(cols, store,
                                              {k: v[part] for k, v in outcome.items()},
                                              keep_eps, radix=len(self._mod_of) <= 2**16)
                if keep_eps is not None:  # rows of unfinished episodes are dropped: the
                    self._open_row[cols["slot"]] = -1  # next call starts them afresh
                if batch is not None:
                    add_action_logp(batch, self.module[self._module_ids[m]])
                    result[self._module_ids[m]] = batch
            self._rebase(m, store, acting.get(m), carried)
        self._closes = []
        return result, dropped_rows

    def _rebase(self, m: int, store: Any, acting_index: int | None,
                carried: dict[str, np.ndarray] | None) -> None:
        """Starts module m's next buffer with the observations still needed: those its
        agents act on next, and those of rows carried over."""
        buf = ModuleRows()
        self._buffers[m] = buf
        self._num_carried[m] = 0 if carried is None else len(carried["slot"])
        if acting_index is not None and self._acting is not None:
            _, obs, _, slots, rank = self._acting[acting_index]
            base = buf.add_obs(obs)
            self._acting[acting_index] = (m, obs, np.arange(base, base + len(obs)), slots, rank)
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
        if "rl_module" in state:
            self.module.set_state(state["rl_module"])
        for mid, s in state.get("env_to_module", {}).items():
            self._spaces.env_to_module[mid].set_state(s)
        for key in ("num_env_steps_sampled_lifetime", "num_agent_steps_sampled_lifetime"):
            if key in state:
                setattr(self, key, int(state[key]))

    def stop(self) -> None:
        for env in self.envs:
            env.close()


def _per_row(env_actions: Any, n: int) -> np.ndarray:
    """The env actions of `n` agents as an array with one row per agent: as they are, or,
    for Tuple/Dict action spaces (a tuple/dict of batched arrays), an object array of one
    tuple/dict per agent (the env takes one per agent anyway)."""
    if not isinstance(env_actions, tuple | dict):
        return np.asarray(env_actions)
    out = np.empty(n, object)
    for i in range(n):
        out[i] = _row(env_actions, i)
    return out


def _row(x: Any, i: int) -> Any:
    if isinstance(x, dict):
        return {k: _row(v, i) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_row(v, i) for v in x)
    return x[i]
