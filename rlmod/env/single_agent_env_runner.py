"""SingleAgentEnvRunner: samples a gymnasium vector env with one inference-only module.

Built by EnvRunnerGroup from the config; its module comes from
`config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True)`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

import gymnasium as gym
import numpy as np
import torch

from rlmod.connectors.connector_v2 import row_of
from rlmod.connectors.module_to_env import ENV_ACTIONS, add_action_logp
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.core.rl_module import TensorDict, acting_forward
from rlmod.core.types import Array, ArrayTree, BoolArray, Components, MetricsDict, StateDict
from rlmod.env.env_runner import (
    ENV_SINGLE_SPACES_KEY,
    ENV_SPACES_KEY,
    EnvRunner,
    SampleResult,
)
from rlmod.env.episodes import SingleAgentEpisode, VectorInfos, chunk_start, info_of
from rlmod.env.guards import SubEnvGuard, failing_sub_env, non_finite_rows
from rlmod.env.recurrent_state import RecurrentState
from rlmod.env.registry import make_env, make_vector_env
from rlmod.env.step_buffer import StepBuffer
from rlmod.env.sub_env_failures import SubEnvFailureStreaks
from rlmod.errors import EnvError, NonFiniteActionError
from rlmod.offline import struct_obs
from rlmod.offline.writer import EpisodeWriter
from rlmod.utils.checkpoints import select_components
from rlmod.utils.seeding import derive_seed
from rlmod.utils.space_checks import fits_space, out_of_space_rows, outside_space_problem

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

logger = logging.getLogger(__name__)

# Recording only: step columns of raw observations and env actions (what the writer stores).
_RAW_OBS, _RAW_NEXT_OBS, _ENV_ACTIONS = "_raw_obs", "_raw_new_obs", "_env_actions"


class SingleAgentEnvRunner(EnvRunner):
    """Steps all sub-envs at once: one forward pass per step for the whole vector env.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> from rlmod.env import SingleAgentEnvRunner
        >>> config = PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=4)
        >>> runner = SingleAgentEnvRunner(config=config)
        >>> batch = runner.sample(num_timesteps=100)["default_policy"]
        >>> batch["obs"].shape[0] >= 100
        True

    Guards (see the settings' docs): non-finite observations and rewards raise an EnvError
    naming the sub-env, step and key, checked once per `sample()` over the whole batch
    (`on_non_finite_env_data="truncate_episode"`: every step, ending that episode instead);
    so do Discrete / MultiDiscrete / MultiBinary observations outside their space, checked
    every step before the env-to-module connectors one-hot them (about 1 us per vector
    step);
    a sub-env that raises is named in an EnvError, after which the next `sample()` starts
    every sub-env afresh (`restart_failed_sub_environments=True`: recreated in place, its
    unfinished episode dropped). Counters count only the rows that reached a batch.
    """

    def __init__(self, *, config: AlgorithmConfig, worker_index: int = 0) -> None:
        super().__init__(config=config, worker_index=worker_index)
        self.num_envs = config.num_envs_per_env_runner
        self._truncate_non_finite = config.on_non_finite_env_data == "truncate_episode"
        self._restart = config.restart_failed_sub_environments
        self._failures: list[tuple[int, BaseException]] = []  # from SubEnvGuard, per step
        self.env = make_vector_env(
            config.env,
            config.env_config,
            self.num_envs,
            per_sub_env=self._restart or self._truncate_non_finite,
            wrap=self._guard if self._restart else None,
        )
        self._env_spaces = (self.env.single_observation_space, self.env.single_action_space)
        self.callbacks.call(
            "on_environment_created",
            env_runner=self,
            metrics_logger=self.metrics,
            env=self.env,
            env_context=dict(config.env_config),
        )
        self._env_to_module = config.build_env_to_module_connector(self.env, *self._env_spaces)
        assert self._env_to_module.observation_space is not None  # set from the input space
        self._module_to_env = config.build_module_to_env_connector(
            self.env, self._env_to_module.observation_space, self._env_spaces[1]
        )
        spec = config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True)
        with self.own_torch_rng():  # the driver's RNG stays as if no EnvRunner were built
            self.module = spec.build()
        self.module.eval()
        # A stateful module's per-sub-env state (use_lstm), reset at episode starts.
        self._recurrent = (
            RecurrentState(self.module, self.num_envs) if self.module.is_stateful() else None
        )
        self._seed = derive_seed(config.seed, self.seed_index)
        self._obs: Array | None = None  # what the module sees next, [N, ...]
        self._prev_done = np.zeros(self.num_envs, dtype=bool)
        self._eps_id = np.arange(self.num_envs, dtype=np.int64)
        self._next_eps_id = self.num_envs
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self._done_returns: list[float] = []
        self._done_lens: list[int] = []
        self._num_env_steps = 0
        self.num_env_steps_sampled_lifetime = 0
        self._buffer = StepBuffer(1)  # reused by every sample() call; grows to fit
        self._logp_recorded = False
        self._num_steps = 0  # vector env step() calls, named in errors
        self._dropped: list[tuple[int, int]] = []  # (row, sub-env) ending a dropped episode
        self._last_raw: ArrayTree | None = None  # truncate mode: the last finite raw observations
        self._num_truncated_non_finite = 0
        self._num_restarts = 0
        self._failure_streaks = SubEnvFailureStreaks(  # restart mode's bound
            env=config.env,
            num_envs=self.num_envs,
            limit=config.max_consecutive_sub_environment_failures,
        )
        self._check_finite_data = True  # benchmarks/guard_overhead.py turns it off to compare
        # Discrete / MultiDiscrete / MultiBinary observations inside their space (decided
        # once: Box-only envs pay nothing per step); benchmarks/guard_overhead.py turns it
        # off to compare.
        self._fits_space = fits_space(self._env_spaces[0])
        self._check_obs_space = self._fits_space is not None
        self._writer = self._make_writer()  # config.offline_data(output=DIR)
        self._raw: ArrayTree | None = None  # recording: the raw observations the module sees next
        # Callbacks' episode objects (only with an episode hook, see EnvRunner.__init__).
        self._episodes: list[SingleAgentEpisode | None] = [None] * self.num_envs
        self._episodes_done: list[SingleAgentEpisode] = []  # finished in this sample()
        # id(episode) -> (episode, its length when this sample() call began)
        self._chunk_starts: dict[int, tuple[object, int]] = {}
        self._next_callback_eps_id = 0

    def _make_writer(self) -> EpisodeWriter | None:
        """An EpisodeWriter when `config.output` is set; it stores raw observations and env
        actions, so the data does not depend on this config's connectors."""
        if self.config.output is None:
            return None
        self._record_raw_obs = bool(self._env_to_module)
        self._record_env_actions = len(self._module_to_env) > 1  # actions are mapped
        spaces = self.get_spaces()
        # Rows are single steps of one sub-env: store one sub-env's spaces as "__env__",
        # not the vector env's batched ones (`Box(.., (N, 4))`, which no reader can use).
        spaces[ENV_SPACES_KEY] = spaces.pop(ENV_SINGLE_SPACES_KEY)
        return EpisodeWriter(
            self.config.output,
            spaces=spaces,
            max_rows_per_file=self.config.output_max_rows_per_file,
            file_prefix=f"env_runner_{self.worker_index}",
        )

    def _raw_rows(self, raw: ArrayTree) -> ArrayTree:
        """Raw observations as the writer stores them: Dict/Tuple ones as one structured
        array (a field per part, dtypes kept), so they travel in a StepBuffer column."""
        space = self._env_spaces[0]
        return struct_obs.to_rows(space, raw) if struct_obs.is_nested(space) else raw

    def _guard(self, env: gym.Env[object, object], index: int) -> gym.Env[object, object]:
        return SubEnvGuard(
            env,
            index=index,
            failures=self._failures,
            make_env=lambda: make_env(self.config.env, self.config.env_config),
        )

    # ------------------------------------------------------------------ spaces
    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        assert self._env_to_module.observation_space is not None
        return {
            ENV_SPACES_KEY: (self.env.observation_space, self.env.action_space),  # batched
            ENV_SINGLE_SPACES_KEY: self._env_spaces,
            DEFAULT_MODULE_ID: (self._env_to_module.observation_space, self._env_spaces[1]),
        }

    # ------------------------------------------------------------------ sampling
    def _reset(self) -> None:
        try:
            raw, infos = self.env.reset(seed=self._seed)  # seeds sub-env i with seed + i
        except Exception as e:
            raise EnvError(f"env={self.config.env!r} raised in reset(): {e!r}") from e
        if self._check_obs_space:
            self._raise_outside_space(raw, at_reset=True)
        self._seed = None  # seed once; later resets continue the seeded RNGs
        self._prev_done[:] = False
        if self._recurrent is not None:
            self._recurrent.reset_all()
        self._ep_return[:] = 0.0
        self._ep_len[:] = 0
        self._eps_id = np.arange(self._next_eps_id, self._next_eps_id + self.num_envs)
        self._next_eps_id += self.num_envs
        self._failures.clear()  # a sub-env recreated while resetting: nothing to drop
        if self._truncate_non_finite:
            self._last_raw = _copy(raw)
        if self._writer is not None:
            self._writer.drop_pending()  # episodes cut off by this reset are never written
            self._raw = self._raw_rows(raw)
        self._obs = self._env_to_module(
            raw,
            episode_starts=np.ones(self.num_envs, bool),
            rl_module=self.module,
            explore=self.config.explore,
        )
        if self._track_episodes:
            for i in range(self.num_envs):
                self._start_episode(i, raw, infos)

    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
    ) -> SampleResult:
        num_timesteps = self._timesteps_to_sample(num_timesteps, num_episodes)
        try:
            with self.own_torch_rng():
                restarts = self._num_restarts
                result = self._sample(num_timesteps, num_episodes, explore)
                # Restart mode: if every row was dropped (each episode sampled failed), sample
                # on rather than hand a Learner an empty batch; rounds that only fail are
                # bounded by max_consecutive_sub_environment_failures (SubEnvFailureStreaks).
                while self._num_restarts > restarts and not len(
                    result[DEFAULT_MODULE_ID][Columns.EPS_ID]
                ):
                    restarts = self._num_restarts
                    result = self._sample(num_timesteps, num_episodes, explore)
                return result
        except BaseException:
            # This call's rows never reach a batch (counters and episode metrics count
            # none of them); the next call starts every sub-env afresh.
            self._obs = None
            self._dropped = []
            raise

    def _sample(
        self, num_timesteps: int | None, num_episodes: int | None, explore: bool | None
    ) -> SampleResult:
        explore = self.config.explore if explore is None else explore
        if num_episodes is not None:
            self._reset()  # whole episodes only: start every sub-env afresh
        elif self._obs is None:
            self._reset()
        per_env = -(-(num_timesteps or self.num_envs) // self.num_envs)
        cols = self._buffer
        cols.clear(per_env + per_env // 8 + 2)  # slack for topping up after resets
        self._logp_recorded = False  # a module-to-env connector recorded action_logp
        prev_done_at_start = self._prev_done
        self._episodes_done = []
        # Steps earlier calls gave each ongoing episode: on_sample_end gets chunks of
        # this call's steps only (RLlib's), which add up to the steps sampled.
        self._chunk_starts = {id(ep): (ep, len(ep)) for ep in self._episodes if ep is not None}
        forward = acting_forward(self.module, explore)
        with torch.inference_mode():
            if num_episodes is None:
                assert num_timesteps is not None
                steps = 0
                while steps < num_timesteps:  # reset rows do not count: top up if short
                    for _ in range(-(-(num_timesteps - steps) // self.num_envs)):
                        self._step(cols, forward, explore)
                    done = (
                        cast(BoolArray, cols[Columns.TERMINATEDS])[:-1]
                        | cast(BoolArray, cols[Columns.TRUNCATEDS])[:-1]
                    )
                    steps = cols.t * self.num_envs - int(
                        prev_done_at_start.sum() + np.count_nonzero(done)
                    )
            else:
                num_done = 0
                while num_done < num_episodes:
                    num_done += int(np.count_nonzero(self._step(cols, forward, explore)))
        batch, done_eps_ids = self._to_batch(cols, prev_done_at_start)
        if num_episodes is not None:  # keep the completed episodes only
            batch = {k: v[np.isin(batch[Columns.EPS_ID], done_eps_ids)] for k, v in batch.items()}
        if self._track_episodes:
            starts = self._chunk_starts
            chunks = [
                ep.chunk(chunk_start(starts, ep))
                for ep in [*self._episodes_done, *self._episodes]
                if ep is not None and len(ep) > chunk_start(starts, ep)
            ]
            self.callbacks.call(
                "on_sample_end", env_runner=self, metrics_logger=self.metrics, samples=chunks
            )
        return {DEFAULT_MODULE_ID: batch}

    def _step(
        self, cols: StepBuffer, forward: Callable[[TensorDict], TensorDict], explore: bool
    ) -> Array:
        """One step of all sub-envs (the hot loop: no per-env Python); returns which are done."""
        obs = self._obs
        assert obs is not None
        inputs = {Columns.OBS: torch.from_numpy(obs)}
        if self._recurrent is not None:
            inputs = self._recurrent.inputs(inputs)
        out = forward(inputs)
        try:
            data = self._module_to_env(out, rl_module=self.module, explore=explore)
        except NonFiniteActionError:
            self._raise_non_finite_input(obs)  # the env's NaN, not the module's: name it
            raise
        try:
            raw, rew, term, trunc, infos = self.env.step(data[ENV_ACTIONS])
        except Exception as e:
            i = failing_sub_env(e)
            where = "a natively vectorized env (all sub-envs)" if i is None else f"sub-env {i}"
            raise EnvError(
                f"env={self.config.env!r} raised in step() of {where} at step "
                f"{self._num_steps + 1} of this EnvRunner: {e!r}. This sample() call's steps "
                "are dropped (episodes finished earlier are kept in the metrics) and the "
                "next sample() starts every sub-env afresh; "
                "config.fault_tolerance(restart_failed_sub_environments=True) recreates a "
                "failing sub-env instead and goes on."
            ) from e
        self._num_steps += 1
        failed: tuple[int, ...] = ()  # no allocation on the usual path
        if self._failures:  # restart mode: SubEnvGuard recreated these sub-envs
            failed = tuple(i for i, _ in self._failures)
            self._drop_failed(cols.t)
        if self._truncate_non_finite:
            raw, rew, trunc = self._truncate_non_finite_rows(raw, rew, trunc)
        elif self._check_obs_space and not self._fits_space(  # type: ignore[misc]
            raw, self.num_envs
        ):
            self._raise_outside_space(raw)  # before the connectors one-hot them
        step = {
            Columns.OBS: obs,
            Columns.ACTIONS: data[Columns.ACTIONS].numpy(),
            Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS].numpy(),
            Columns.REWARDS: rew,
            Columns.TERMINATEDS: term,
            Columns.TRUNCATEDS: trunc,
        }
        if self._recurrent is not None:  # the state this step began with, for Learners
            step.update(self._recurrent.record(inputs))
        if Columns.ACTION_LOGP in data:  # else computed for the whole batch in _to_batch
            step[Columns.ACTION_LOGP] = data[Columns.ACTION_LOGP].numpy()
            self._logp_recorded = True
        if self._writer is not None:
            if self._record_raw_obs:
                step[_RAW_OBS] = self._raw
                self._raw = self._raw_rows(raw)
            if self._record_env_actions:
                step[_ENV_ACTIONS] = data[ENV_ACTIONS]
        cols.add(step)
        # NEXT_STEP autoreset: a sub-env done at the previous step is reset by this step
        # (its action ignored, reward 0, flags False); its observation now starts an episode.
        started = self._prev_done
        self._prev_done = done = term | trunc
        if self._recurrent is not None:  # reset rows and recreated sub-envs start episodes
            starts = started.copy()
            starts[list(failed)] = True
            self._recurrent.advance(
                cast("Mapping[str, torch.Tensor]", out[Columns.STATE_OUT]),
                data[Columns.ACTIONS].numpy(),
                rew,
                starts,  # type: ignore[arg-type]
            )
        if self._failure_streaks.active:  # restart mode: an episode that ended is kept
            self._failure_streaks.kept(done, failed=failed)
        if self._track_episodes:  # one bool per vector step; False unless a hook reads them
            self._episode_step(
                raw, data[Columns.ACTIONS].numpy(), rew, term, trunc, infos, started, failed
            )
        if self._env_to_module:  # an empty pipeline (CartPole's) is skipped
            raw = self._env_to_module(
                raw, episode_starts=started, rl_module=self.module, explore=explore
            )
        self._obs = raw
        return done

    def _to_batch(
        self, cols: StepBuffer, prev_done_at_start: Array
    ) -> tuple[dict[str, Array], Array]:
        """Stacks `[T, N]` step arrays into flat, env-major rows without the reset rows,
        and does the episode bookkeeping for all steps at once."""
        assert self._obs is not None
        term = cast(BoolArray, cols[Columns.TERMINATEDS])  # [T, N]
        trunc = cast(BoolArray, cols[Columns.TRUNCATEDS])
        done = term | trunc
        started = np.concatenate([prev_done_at_start[None], done[:-1]])  # reset rows
        valid = ~started
        obs_all = cols.with_next(Columns.OBS, self._obs)  # [T + 1, N, ...]
        if self._check_finite_data and not self._truncate_non_finite:  # else at every step
            self._check_finite(obs_all, cols[Columns.REWARDS], valid)
        eps_id = self._assign_episode_ids(started)
        keep_ended = None
        if self._dropped:  # episodes of restarted sub-envs: no row, no metrics
            rows_t, rows_n = np.array(self._dropped).T
            valid &= ~np.isin(eps_id, eps_id[rows_t, rows_n])
            keep_ended = np.ones_like(done)
            keep_ended[rows_t, rows_n] = False
            self._dropped = []
        if self._failure_streaks.active:  # restart mode: sub-envs with a step kept
            self._failure_streaks.kept(cast(BoolArray, valid.any(axis=0)))
        rewards = np.where(valid, cols[Columns.REWARDS], 0.0)
        done_eps_ids = eps_id[done & valid]
        self._record_episodes(rewards, valid, done, keep_ended)
        t, n = valid.shape
        stacked = {
            Columns.OBS: obs_all[:-1],
            # new_obs[t] is what the env returned for row t; at an episode end that is the
            # final observation (NEXT_STEP mode returns it; the reset comes one step later).
            Columns.NEXT_OBS: obs_all[1:],
            Columns.ACTIONS: cols[Columns.ACTIONS],
            Columns.ACTION_DIST_INPUTS: cols[Columns.ACTION_DIST_INPUTS],
            Columns.REWARDS: rewards.astype(np.float32),
            Columns.TERMINATEDS: term,
            Columns.TRUNCATEDS: trunc,
            Columns.EPS_ID: eps_id,
        }
        # Env-major row order, so each sub-env's rows are contiguous: one gather per column
        # from the time-major arrays (flat index t * N + n), reset rows left out.
        env_i, time_i = np.nonzero(valid.T)
        rows = time_i * n + env_i
        if self._logp_recorded:
            stacked[Columns.ACTION_LOGP] = cols[Columns.ACTION_LOGP]
        if self._recurrent is not None:
            stacked.update({k: cols[k] for k in self._recurrent.columns})
        if self._writer is not None and self._record_raw_obs:
            raw_all = cols.with_next(_RAW_OBS, cast(Array, self._raw))
            stacked[_RAW_OBS], stacked[_RAW_NEXT_OBS] = raw_all[:-1], raw_all[1:]
        if self._writer is not None and self._record_env_actions:
            stacked[_ENV_ACTIONS] = cols[_ENV_ACTIONS]
        # np.take: half the time of fancy indexing for the 2-D columns.
        batch = {
            k: np.take(v.reshape(t * n, *v.shape[2:]), rows, axis=0) for k, v in stacked.items()
        }
        add_action_logp(batch, self.module)
        # A sequence ends where its episode ends or where this fragment stops.
        seq_end = np.ones(len(rows), dtype=bool)
        seq_end[:-1] = env_i[1:] != env_i[:-1]
        batch[Columns.SEQ_ENDS] = seq_end | batch[Columns.TERMINATEDS] | batch[Columns.TRUNCATEDS]
        if self._writer is not None:
            self._write(batch)
        steps = int(valid.sum())
        self._num_env_steps += steps
        self.num_env_steps_sampled_lifetime += steps
        return batch, done_eps_ids

    def _write(self, batch: dict[str, Array]) -> None:
        """Hands the batch's rows to the EpisodeWriter with raw observations and env
        actions in place of the module's (popped off the batch, which keeps the module's)."""
        rows = dict(batch)
        for ours, recorded in (
            (_RAW_OBS, Columns.OBS),
            (_RAW_NEXT_OBS, Columns.NEXT_OBS),
            (_ENV_ACTIONS, Columns.ACTIONS),
        ):
            if ours in batch:
                rows[recorded] = batch.pop(ours)
                del rows[ours]
        assert self._writer is not None
        self._writer.add_batch({DEFAULT_MODULE_ID: rows})

    def _assign_episode_ids(self, started: Array) -> Array:
        """`[T, N]` episode IDs: each reset row starts a new, globally unique ID."""
        k = np.cumsum(started, axis=0, dtype=np.int32)  # new episodes so far, per sub-env
        num_new = k[-1]
        first_new = self._next_eps_id + np.concatenate([[0], np.cumsum(num_new)[:-1]])
        eps_id = np.where(k == 0, self._eps_id[None], first_new[None] + k - 1)
        self._eps_id = eps_id[-1].copy()
        self._next_eps_id += int(num_new.sum())
        return eps_id

    def _record_episodes(
        self, rewards: Array, valid: Array, done: Array, keep_ended: Array | None = None
    ) -> None:
        """Appends the return and length of every episode that ended (where `keep_ended`,
        if given), in time order, and carries the unfinished ones over to the next call
        (all vectorized over `[T, N]`)."""
        cum_r = np.cumsum(rewards, axis=0)  # [T, N]
        cum_n = np.cumsum(valid, axis=0, dtype=np.int32)  # bool to int32: 4x faster than int64
        env_idx, t_idx = np.nonzero(done.T)  # ended episodes, sorted by sub-env, then time
        end_r, end_n = cum_r[t_idx, env_idx], cum_n[t_idx, env_idx]
        # Each episode's sums start after the previous end in its sub-env; the first one in
        # a sub-env also includes what an earlier sample() call carried over.
        first = np.ones(len(env_idx), dtype=bool)
        first[1:] = env_idx[1:] != env_idx[:-1]
        start_r = np.concatenate([[0.0], end_r[:-1]])
        start_n = np.concatenate([[0], end_n[:-1]])
        start_r[first] = -self._ep_return[env_idx[first]]
        start_n[first] = -self._ep_len[env_idx[first]]
        order = np.argsort(t_idx, kind="stable")
        if keep_ended is not None:
            order = order[keep_ended[t_idx, env_idx][order]]
        self._done_returns += (end_r - start_r)[order].tolist()
        self._done_lens += (end_n - start_n)[order].astype(np.int64).tolist()
        last = np.ones(len(env_idx), dtype=bool)
        last[:-1] = env_idx[:-1] != env_idx[1:]
        base_r, base_n = -self._ep_return, -self._ep_len
        base_r[env_idx[last]] = end_r[last]
        base_n[env_idx[last]] = end_n[last]
        self._ep_return = cum_r[-1] - base_r
        self._ep_len = cum_n[-1] - base_n

    # ------------------------------------------------------------------ callbacks
    def _episode_kwargs(self, i: int) -> dict[str, object]:
        return {
            "episode": self._episodes[i],
            "env_runner": self,
            "metrics_logger": self.metrics,
            "env": self.env,
            "env_index": i,
            "rl_module": self.module,
        }

    def _start_episode(self, i: int, raw: ArrayTree, infos: VectorInfos) -> None:
        self._episodes[i] = SingleAgentEpisode(
            id_=self._next_callback_eps_id,
            observation=row_of(raw, i),
            info=info_of(infos, i),
            env_index=i,
        )
        self._next_callback_eps_id += 1
        self.callbacks.call("on_episode_created", **self._episode_kwargs(i))
        self.callbacks.call("on_episode_start", **self._episode_kwargs(i))

    def _episode_step(
        self,
        raw: ArrayTree,
        actions: Array,
        rew: Array,
        term: Array,
        trunc: Array,
        infos: VectorInfos,
        started: Array,
        failed: tuple[int, ...],
    ) -> None:
        """Per sub-env Python for the callbacks' episode objects (only with episode hooks).

        NEXT_STEP autoreset: a sub-env done at the previous step returned its reset
        observation now (its action ignored), which starts its next episode.
        """
        # Python scalars and rows once per step, not per sub-env (tolist is one C call).
        rows = list(raw) if isinstance(raw, np.ndarray) else None
        acts, rews = actions.tolist(), rew.tolist()
        terms, truncs, starts = term.tolist(), trunc.tolist(), started.tolist()
        step_hook = self.callbacks.has("on_episode_step")
        for i in range(self.num_envs):
            if starts[i]:
                self._start_episode(i, raw, infos)
                continue
            episode = self._episodes[i]
            if episode is None:
                continue
            if i in failed:  # restart mode: the unfinished episode is dropped, no end hook
                self._episodes[i] = None
                continue
            episode.add_env_step(
                rows[i] if rows is not None else row_of(raw, i),
                action=acts[i],
                reward=rews[i],
                info=info_of(infos, i) if infos else {},
                terminated=terms[i],
                truncated=truncs[i],
            )
            if step_hook:
                self.callbacks.call("on_episode_step", **self._episode_kwargs(i))
            if episode.is_done:
                self.callbacks.call(
                    "on_episode_end", prev_episode_chunks=[], **self._episode_kwargs(i)
                )
                self._episodes_done.append(episode)
                self._episodes[i] = None

    # ------------------------------------------------------------------ guards
    def _check_finite(self, obs_all: Array, rewards: Array, valid: BoolArray) -> None:
        """Raises an EnvError naming the first non-finite observation or reward of this
        call's `[T + 1, N]` observations and `[T, N]` rewards (one check per array)."""
        for key, arr, mask in ((Columns.REWARDS, rewards, valid), (Columns.OBS, obs_all, None)):
            found = non_finite_rows(arr, arr.shape[0] * arr.shape[1], key)
            if found is None:
                continue
            bad = found[0].reshape(arr.shape[:2])
            if mask is not None:
                bad &= mask
                if not bad.any():
                    continue
            t, i = (int(x[0]) for x in np.nonzero(bad))
            # The last row of either array came from the last step (observations have one
            # row more: row 0 came from the step before this call, or a reset).
            step = self._num_steps - arr.shape[0] + t + 1
            raise EnvError(
                f"env={self.config.env!r} returned a non-finite (NaN or inf) {found[1]} in "
                f"sub-env {i} at step {step} of this EnvRunner. Nothing of "
                "this sample() call reaches a Learner. Fix the env, or set "
                "config.env_runners(on_non_finite_env_data='truncate_episode') to end such "
                "episodes as truncated and go on."
            )

    def _raise_non_finite_input(self, obs: ArrayTree) -> None:
        """Raises the EnvError of `_check_finite` if the observations the module just saw
        (from the last step, or a reset) are not finite: a NaN observation makes NaN action
        distribution inputs before the once-per-sample() check would name the env."""
        found = non_finite_rows(obs, self.num_envs, Columns.OBS)
        if found is None:
            return
        i = int(np.flatnonzero(found[0])[0])
        # Truncate mode replaces a step's non-finite observations: this one came from a reset.
        tail = (
            "Fix the env; an episode cannot be truncated before its first step, so "
            "on_non_finite_env_data='truncate_episode' does not cover reset()."
            if self._truncate_non_finite or self._num_steps == 0
            else "Fix the env, or set config.env_runners(on_non_finite_env_data="
            "'truncate_episode') to end such episodes as truncated and go on."
        )
        raise EnvError(
            f"env={self.config.env!r} returned a non-finite (NaN or inf) {found[1]} in "
            f"sub-env {i} at step {self._num_steps} of this EnvRunner. Nothing of "
            f"this sample() call reaches a Learner. {tail}"
        )

    def _raise_outside_space(self, raw: ArrayTree, *, at_reset: bool = False) -> None:
        """Raises an EnvError naming the first sub-env whose raw observation has a
        Discrete / MultiDiscrete / MultiBinary part outside the observation space (one
        check over all sub-envs; the message is built on the slow path only)."""
        assert self._fits_space is not None
        if self._fits_space(raw, self.num_envs):
            return
        space = self._env_spaces[0]
        found = out_of_space_rows(space, raw, self.num_envs, Columns.OBS)
        assert found is not None
        i = int(np.flatnonzero(found[0])[0])
        when = "at reset (step" if at_reset else "at step"
        tail = (
            "Fix the env (or its declared observation_space); an episode cannot be "
            "truncated before its first step."
            if at_reset
            else "Fix the env (or its declared observation_space), or set config.env_runners("
            "on_non_finite_env_data='truncate_episode') to end such episodes as "
            "truncated and go on."
        )
        raise EnvError(
            f"env={self.config.env!r} returned an observation outside its observation space "
            f"in sub-env {i} {when} {self._num_steps} of this EnvRunner{')' if at_reset else ''}"
            f": {outside_space_problem(space, raw, i, Columns.OBS)}. Nothing of this "
            f"sample() call reaches a Learner. {tail}"
        )

    def _truncate_non_finite_rows(
        self, raw: ArrayTree, rew: Array, trunc: Array
    ) -> tuple[ArrayTree, Array, Array]:
        """Truncate mode: sub-envs with a non-finite observation or reward, or an
        observation outside its Discrete / MultiDiscrete / MultiBinary space, end their
        episode here; the last good observation stands in for the final one (what the
        value bootstrap reads), the reward counts as 0, and the sub-env resets at the next
        step as after any truncation."""
        found_obs = non_finite_rows(raw, self.num_envs, Columns.OBS)
        bad = ~np.isfinite(rew)
        if found_obs is not None:
            bad |= found_obs[0]
        if self._check_obs_space:
            found_outside = out_of_space_rows(self._env_spaces[0], raw, self.num_envs, Columns.OBS)
            if found_outside is not None:
                bad |= found_outside[0]
        if bad.any():
            rew = np.where(bad, 0.0, rew)
            trunc = trunc | bad
            raw = _replace_rows(raw, cast("ArrayTree", self._last_raw), bad)  # set at reset
            # NEXT_STEP autoreset, as if the sub-env had returned truncated itself.
            self.env._autoreset_envs[bad] = True  # type: ignore[attr-defined]
            self._num_truncated_non_finite += int(bad.sum())
            logger.warning(
                "env=%r returned non-finite data or observations outside the "
                "observation space in sub-envs %s at step %d; their episodes end "
                "as truncated.",
                self.config.env,
                np.flatnonzero(bad).tolist(),
                self._num_steps,
            )
        self._last_raw = _copy(raw)
        return raw, rew, trunc

    def _drop_failed(self, row: int) -> None:
        """Restart mode: the sub-envs that raised at this step (row `row`) were recreated;
        their unfinished episodes are dropped when the batch is built."""
        for index, err in self._failures:
            logger.warning(
                "env=%r: sub-env %d raised at step %d and was recreated (%r); "
                "its unfinished episode is dropped.",
                self.config.env,
                index,
                self._num_steps,
                err,
            )
            self._failure_streaks.record(index, err, step=self._num_steps)
            if not self._prev_done[index]:  # else it failed resetting: no episode to drop
                self._dropped.append((row, index))
        self._num_restarts += len(self._failures)
        self._failures.clear()

    # ------------------------------------------------------------------ metrics and state
    def get_metrics(self) -> MetricsDict:
        metrics = {
            "episode_returns": self._done_returns,
            "episode_lens": self._done_lens,
            "num_env_steps": self._num_env_steps,
            "module_episode_returns": {DEFAULT_MODULE_ID: list(self._done_returns)},
            "num_episodes_truncated_non_finite": self._num_truncated_non_finite,
            "num_sub_env_restarts": self._num_restarts,
        }
        if self.metrics:
            metrics["metrics_logger"] = self.metrics.export_period()
        self._done_returns, self._done_lens, self._num_env_steps = [], [], 0
        self._num_truncated_non_finite = self._num_restarts = 0
        return metrics

    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        state: StateDict = {
            "env_to_module": self._env_to_module.get_state(),
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
        }
        if select_components(components, not_components, "rl_module")[0]:
            state["rl_module"] = {
                DEFAULT_MODULE_ID: {
                    k: v.numpy() for k, v in self.module.get_state(inference_only=True).items()
                }
            }
        return state

    def set_state(self, state: StateDict) -> None:
        state = self._drop_stale_weights(state)
        weights = cast("Mapping[str, Mapping[str, Array]] | None", state.get("rl_module"))
        if weights is not None and DEFAULT_MODULE_ID in weights:
            self.module.set_state(weights[DEFAULT_MODULE_ID])
        if "env_to_module" in state:
            self._env_to_module.set_state(cast("dict[str, object]", state["env_to_module"]))
        if "num_env_steps_sampled_lifetime" in state:
            self.num_env_steps_sampled_lifetime = int(
                cast(int, state["num_env_steps_sampled_lifetime"])
            )

    def stop(self) -> None:
        """Closes the envs and writes the recorded episodes still queued."""
        if self._writer is not None:
            self._writer.close()
        self.env.close()


def _copy(x: ArrayTree) -> ArrayTree:
    """A copy of a (possibly dict/tuple) batch of observations."""
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_copy(v) for v in x)
    return np.array(x, copy=True)


def _replace_rows(x: ArrayTree, source: ArrayTree, rows: BoolArray) -> ArrayTree:
    """`x` with `rows` taken from `source` (same structure)."""
    if isinstance(x, dict):
        parts = cast("dict[str, ArrayTree]", source)
        return {k: _replace_rows(v, parts[k], rows) for k, v in x.items()}
    if isinstance(x, tuple):
        items = cast("tuple[ArrayTree, ...]", source)
        return tuple(_replace_rows(v, s, rows) for v, s in zip(x, items, strict=True))
    out = np.array(x, copy=True)
    out[rows] = cast(Array, source)[rows]
    return out
