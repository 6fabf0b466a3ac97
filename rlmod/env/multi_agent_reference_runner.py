"""ReferenceMultiAgentEnvRunner: the multi-agent EnvRunner in plain Python, dicts per agent.

The default multi-agent EnvRunner where it is as fast as the vectorized MultiAgentEnvRunner
(few agents x sub-envs: see EnvRunnerGroup's rule), and its oracle
(tests/env/test_multi_agent_reference_runner.py): both build modules, spaces and
connectors with the same config helpers and return the same rows; this one with a Python
loop per env step and per agent, so its code states the semantics.

A row is one action of one agent. It opens when the agent acts and closes when the agent
next observes (`new_obs` is that observation, the final one at its episode's end), when a
flag marks the agent done without an observation, or when the episode ends (then `new_obs`
repeats the row's `obs`). Its `rewards` are all the agent received until it closes, rewards
before the agent's first action included. `"__all__"` flags apply to agents without a flag
of their own. A row still open when `sample()` returns waits for its outcome in the next call.

Batches per module hold the rows closed in the call, ordered by slot (env index, then the
agent's position in `possible_agents`) and by time within a slot; `seq_ends` marks where an
agent-episode ends or the batch moves to another slot or agent-episode. `eps_id` numbers
(env episode, agent) pairs in the order agents first appear: all envs' observations and
rewards of a step, then agents flagged done without an observation, then reset envs.
`sample(num_episodes=N)` starts every env afresh and returns only the rows of episodes
that ended in the call; rows still open then are forgotten.

Guards as the vectorized runner's: non-finite observations and rewards, observations that
do not fit their module's space, unknown agents and modules raise errors naming the agent;
an env that raises is named with its step. A failed `sample()` returns nothing and leaves
no trace in the metrics; the next call starts every env afresh. Not here (the vectorized
runner's, which the default rule then picks): stacked forward passes, restarting failed
envs, episode callbacks and offline recording. With `explore=True` both runners draw from
one torch stream in the same order where no modules are stacked (modules act one after
another in module order); greedy actions agree on every layout.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from rlmod.connectors.module_to_env import add_action_logp
from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array
from rlmod.env.env_runner import SampleResult, sequence_ends
from rlmod.env.episodes import EpisodeInfo
from rlmod.env.guards import step_failed_error
from rlmod.env.module_groups import env_actions_per_row
from rlmod.env.multi_agent_env import ALL_AGENTS, AgentID, unknown_agent_error
from rlmod.env.multi_agent_observations import AgentPlace
from rlmod.env.multi_agent_runner_base import MultiAgentRunnerBase, unsupported_features
from rlmod.errors import UnknownModuleIDError

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

Row = dict[str, object]  # one action of one agent; its outcome is filled in when it closes


@dataclasses.dataclass
class _Observation:
    """An agent's observation, queued for its module's env-to-module pipeline."""

    env: int
    agent: AgentID
    module: ModuleID
    raw: object  # as the env returned it
    acts: bool  # the agent acts on it next
    start: bool  # the agent's first observation in its episode
    t: int  # its episode's step, named in errors
    obs: Array | None = None  # in the module's space, once converted


@dataclasses.dataclass
class _Episode:
    """One env's running episode, per agent."""

    info: EpisodeInfo
    length: int = 0
    module_of: dict[AgentID, ModuleID] = dataclasses.field(default_factory=dict)
    eps_id: dict[AgentID, int] = dataclasses.field(default_factory=dict)
    returns: dict[AgentID, float] = dataclasses.field(default_factory=dict)
    pending_reward: dict[AgentID, float] = dataclasses.field(default_factory=dict)
    open_row: dict[AgentID, Row] = dataclasses.field(default_factory=dict)
    obs: dict[AgentID, Array] = dataclasses.field(default_factory=dict)  # to act on next
    acting: list[AgentID] = dataclasses.field(default_factory=list)  # in the env's order
    observed: set[AgentID] = dataclasses.field(default_factory=set)


class ReferenceMultiAgentEnvRunner(MultiAgentRunnerBase):
    """Steps `num_envs_per_env_runner` MultiAgentEnvs one agent at a time (see the module
    docstring for the rows it returns; envs, spaces, metrics and state: MultiAgentRunnerBase).

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> from rlmod.testing import MultiAgentCartPole
        >>> config = (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
        ...           .multi_agent(policies={"p0", "p1"},
        ...                        policy_mapping_fn=lambda aid, episode: f"p{aid}"))
        >>> batch = ReferenceMultiAgentEnvRunner(config=config).sample(num_timesteps=20)
        >>> sorted(batch), batch["p0"]["obs"].shape[1]
        (['p0', 'p1'], 4)
    """

    def __init__(self, *, config: AlgorithmConfig, worker_index: int = 0) -> None:
        missing = unsupported_features(config)
        if missing:
            raise ValueError(
                f"ReferenceMultiAgentEnvRunner does not support {', '.join(missing)}; leave "
                "config.env_runners(env_runner_cls=None) to get MultiAgentEnvRunner for them."
            )
        super().__init__(config=config, worker_index=worker_index)
        self._agent_index = {a: i for i, a in enumerate(self._agents)}
        with self.own_torch_rng():  # the driver's RNG stays as if no EnvRunner were built
            module = self._spec.build()
        self._use_module(module)
        self._episodes: list[_Episode] = []  # empty: the next sample() resets every env
        self._next_episode_id = self._next_eps_id = 0
        self._next_row_id = 0  # time order of rows
        self._num_steps = 0  # steps of all envs together, named in errors
        self._checking: list[_Observation] = []  # being checked (errors name them)
        self._closed: list[Row] = []  # closed in this call
        self._done_eps: set[int] = set()  # agent-episodes of episodes ended in this call

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
        explore = self.config.explore if explore is None else explore
        self._closed, self._done_eps = [], set()
        env_steps = agent_steps = 0
        first_done = len(self._stats)
        with self._sampling_call(), torch.inference_mode():  # one that raises leaves no trace
            if num_episodes is not None or not self._episodes:
                self._reset_all()  # whole episodes only: start every env afresh
            while (
                len(self._stats) - first_done < num_episodes
                if num_episodes is not None
                else env_steps < (num_timesteps or 0)
            ):
                actions = self._act(explore)
                agent_steps += sum(len(a) for a in actions)
                self._step(actions)
                env_steps += self.num_envs
        if num_episodes is not None:  # rows of unfinished episodes are dropped
            self._closed = [r for r in self._closed if r[Columns.EPS_ID] in self._done_eps]
            for ep in self._episodes:
                ep.open_row.clear()
        self._count_steps(env_steps, agent_steps)
        return self._collect()

    def _forget_call(self) -> None:
        self._episodes = []  # the next call starts every env afresh

    def _reset_all(self) -> None:
        queue: list[_Observation] = []
        self._episodes = [self._reset(e, queue) for e in range(self.num_envs)]
        self._to_module_space(queue)

    def _reset(self, e: int, queue: list[_Observation]) -> _Episode:
        """Resets env `e`; its agents' first observations join the step's `queue`."""
        obs, _ = self._reset_env_once(e)
        ep = _Episode(EpisodeInfo(self._next_episode_id, e, self.worker_index))
        self._next_episode_id += 1
        for agent, o in obs.items():
            queue.append(self._entry(e, ep, agent, o, acts=True))
        ep.observed, ep.acting = set(obs), list(obs)
        return ep

    def _map(self, e: int, ep: _Episode, agent: AgentID) -> None:
        """Maps an agent to its module once per episode, when it first appears."""
        if agent in ep.module_of:
            return
        if agent not in self._agent_index:
            raise unknown_agent_error(self.config.env, e, agent, self._agents)
        mid = self.config.policy_mapping_fn(agent, ep.info)
        if mid not in self._module_index:
            raise UnknownModuleIDError(self.config.mapping_error_message(agent, mid))
        index = np.array([self._module_index[mid]]), np.array([self._agent_index[agent]])
        self._spaces.check_new_agents(e, self.envs[e], [agent], [mid], *index)
        ep.module_of[agent], ep.eps_id[agent] = mid, self._next_eps_id
        self._next_eps_id += 1
        ep.returns[agent] = ep.pending_reward[agent] = 0.0

    def _entry(self, e: int, ep: _Episode, agent: AgentID, raw: object, acts: bool) -> _Observation:
        """The agent's observation `raw`, mapped to its module."""
        self._map(e, ep, agent)
        start = agent not in ep.observed
        return _Observation(e, agent, ep.module_of[agent], raw, acts, start, ep.length)

    def _locate(self, key: int) -> AgentPlace:
        """Where the key-th of the observations being checked came from (for errors)."""
        o = self._checking[key]
        return AgentPlace(o.env, o.agent, o.t, self._num_steps, self._spaces.raw[o.module][0])

    def _act(self, explore: bool) -> list[dict[AgentID, object]]:
        """One forward pass per module over its acting agents (all envs); opens their rows
        and returns each env's action dict (in the env's acting order)."""
        by_module: dict[ModuleID, list[tuple[int, AgentID]]] = {}
        for e, ep in enumerate(self._episodes):
            for agent in ep.acting:
                by_module.setdefault(ep.module_of[agent], []).append((e, agent))
        env_actions: dict[tuple[int, AgentID], object] = {}
        for mid in self._module_ids:  # module order: the vectorized runner's RNG order
            who = by_module.get(mid, [])
            if not who:
                continue
            module = self.module[mid]
            obs = np.stack([self._episodes[e].obs[a] for e, a in who])
            batch = {Columns.OBS: torch.from_numpy(obs)}
            out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
            data = self._module_to_env[mid](out, rl_module=module, explore=explore)
            acts = env_actions_per_row(data, len(who))
            logp = cast("torch.Tensor | None", data.get(Columns.ACTION_LOGP))
            for i, (e, agent) in enumerate(who):
                ep = self._episodes[e]
                ep.open_row[agent] = {
                    "slot": e * len(self._agents) + self._agent_index[agent],
                    "id": self._next_row_id,
                    "module": mid,
                    Columns.EPS_ID: ep.eps_id[agent],
                    Columns.OBS: obs[i],
                    Columns.ACTIONS: cast(torch.Tensor, data[Columns.ACTIONS])[i].numpy(),
                    Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS][i].numpy(),
                    **({} if logp is None else {Columns.ACTION_LOGP: logp[i].numpy()}),
                }
                self._next_row_id += 1
                a = acts[i]
                env_actions[(e, agent)] = a.item() if isinstance(a, np.generic) else a
        return [{a: env_actions[(e, a)] for a in ep.acting} for e, ep in enumerate(self._episodes)]

    def _step(self, actions: list[dict[AgentID, object]]) -> None:
        """Steps every env and books what came back; resets envs whose episode is over."""
        returns = []  # every env steps before flags are read (the order eps_ids follow)
        self._num_steps += 1
        for e, (env, ep) in enumerate(zip(self.envs, self._episodes, strict=True)):
            try:
                obs, rewards, te, tr, _ = env.step(actions[e])
            except Exception as err:
                raise step_failed_error(
                    self.config.env, e, ep.length + 1, self._num_steps, err
                ) from err
            ep.length += 1
            for agent in (*obs, *rewards):
                self._map(e, ep, agent)
            for agent, r in rewards.items():
                reward = float(cast(float, r))
                if not math.isfinite(reward):
                    self._checking = [self._entry(e, ep, agent, None, acts=False)]
                    self._intake.raise_non_finite(np.zeros(1, np.int64), "rewards")
                ep.pending_reward[agent] += reward
                ep.returns[agent] += reward
            returns.append((obs, te, tr))
        queue: list[_Observation] = []
        over: list[tuple[int, bool]] = []
        for e, (obs, te, tr) in enumerate(returns):
            ep = self._episodes[e]
            te_all, tr_all = bool(te.get(ALL_AGENTS)), bool(tr.get(ALL_AGENTS))
            ep.acting = []
            for agent, o in obs.items():
                term, trunc = bool(te.get(agent)), bool(tr.get(agent))
                if (te_all or tr_all) and not (term or trunc):  # "__all__": agents w/o flags
                    term, trunc = te_all, not te_all
                entry = self._entry(e, ep, agent, o, acts=not (term or trunc))
                queue.append(entry)
                ep.observed.add(agent)
                self._close(ep, agent, term, trunc, new_obs=entry)
                if entry.acts:
                    ep.acting.append(agent)
            done_te = [a for a, v in te.items() if v and a != ALL_AGENTS and a not in obs]
            done_tr = [a for a, v in tr.items() if v and a != ALL_AGENTS and a not in obs]
            for agent in dict.fromkeys((*done_te, *done_tr)):  # done without a final obs
                self._map(e, ep, agent)
                self._close(ep, agent, agent in done_te, agent not in done_te, new_obs=None)
            if te_all or tr_all:
                over.append((e, te_all))
        for e, terminated in over:
            ep = self._episodes[e]
            for agent in list(ep.open_row):  # episode over: open rows close with "__all__"
                self._close(ep, agent, terminated, not terminated, new_obs=None)
            part = sorted(ep.module_of, key=self._agent_index.__getitem__)  # took part
            self._stats.add(
                ep.length,
                np.array([self._agent_index[a] for a in part], np.int64),
                np.array([ep.returns[a] for a in part]),
                np.array([self._module_index[ep.module_of[a]] for a in part], np.int64),
            )
            self._done_eps.update(ep.eps_id.values())
            self._episodes[e] = self._reset(e, queue)
        self._to_module_space(queue)

    def _close(
        self, ep: _Episode, agent: AgentID, term: bool, trunc: bool, new_obs: _Observation | None
    ) -> None:
        """Completes the agent's open row, if any; `new_obs`: the queue entry of its next
        observation (None: the row's own obs stands in)."""
        row = ep.open_row.pop(agent, None)
        if row is None:
            return
        row[Columns.REWARDS] = ep.pending_reward[agent]
        ep.pending_reward[agent] = 0.0
        row[Columns.TERMINATEDS], row[Columns.TRUNCATEDS] = term, trunc
        row["next"] = new_obs
        self._closed.append(row)

    def _to_module_space(self, queue: list[_Observation]) -> None:
        """Checks each module's observations of the step (all envs, in queue order), runs
        them through its env-to-module pipeline and stores what each agent acts on next."""
        by_module: dict[ModuleID, list[_Observation]] = {}
        for o in queue:
            by_module.setdefault(o.module, []).append(o)
        for mid, entries in by_module.items():
            self._checking = entries
            raw, where = [o.raw for o in entries], np.arange(len(entries))
            obs = self._intake.stack_checked(self._spaces.raw[mid][0], raw, where)
            pipeline = self._spaces.env_to_module.get(mid)
            if pipeline is not None and len(pipeline):
                obs = pipeline(obs, episode_starts=np.array([o.start for o in entries]))
            for i, o in enumerate(entries):
                o.obs = cast(Array, obs)[i]
                if o.acts:
                    self._episodes[o.env].obs[o.agent] = o.obs

    def _collect(self) -> SampleResult:
        """The closed rows as per-module batches, ordered by slot, then time."""
        result: SampleResult = {}
        for mid in self._module_ids:
            rows = sorted(
                (r for r in self._closed if r["module"] == mid),
                key=lambda r: (cast(int, r["slot"]), cast(int, r["id"])),
            )
            if not rows:
                continue
            for r in rows:  # None: done without a next obs, the row's own obs stands in
                nxt = cast("_Observation | None", r.pop("next"))
                r[Columns.NEXT_OBS] = r[Columns.OBS] if nxt is None else nxt.obs
            keys = [k for k in rows[0] if k not in ("slot", "id", "module")]
            batch = {k: np.stack([np.asarray(r[k]) for r in rows]) for k in keys}
            batch[Columns.REWARDS] = batch[Columns.REWARDS].astype(np.float32)
            batch[Columns.SEQ_ENDS] = sequence_ends(  # eps_ids differ per slot
                batch[Columns.TERMINATEDS], batch[Columns.TRUNCATEDS], batch[Columns.EPS_ID]
            )
            add_action_logp(batch, self.module[mid])
            result[mid] = batch
        self._closed = []
        return result
