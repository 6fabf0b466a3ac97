"""SingleAgentEnvRunner: samples a gymnasium vector env with one inference-only module.

Built by EnvRunnerGroup from the config; its module comes from
`config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True)`.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlmod.connectors.module_to_env import ENV_ACTIONS
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.env.env_runner import ENV_SPACES_KEY, EnvRunner, SampleResult
from rlmod.env.registry import make_vector_env
from rlmod.errors import EnvError
from rlmod.utils.seeding import derive_seed

logger = logging.getLogger(__name__)


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
    """

    def __init__(self, *, config: Any, worker_index: int = 0) -> None:
        super().__init__(config=config, worker_index=worker_index)
        self.num_envs = config.num_envs_per_env_runner
        self.env = make_vector_env(config.env, config.env_config, self.num_envs)
        self._env_spaces = (self.env.single_observation_space, self.env.single_action_space)
        self._env_to_module = config.build_env_to_module_connector(self.env, *self._env_spaces)
        self._module_to_env = config.build_module_to_env_connector(
            self.env, self._env_to_module.observation_space, self._env_spaces[1]
        )
        spec = config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True)
        self.module = spec.build()
        self.module.eval()
        self._seed = derive_seed(config.seed, worker_index)
        self._obs: np.ndarray | None = None  # what the module sees next, [N, ...]
        self._prev_done = np.zeros(self.num_envs, dtype=bool)
        self._eps_id = np.arange(self.num_envs, dtype=np.int64)
        self._next_eps_id = self.num_envs
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self._done_returns: list[float] = []
        self._done_lens: list[int] = []
        self._num_env_steps = 0
        self.num_env_steps_sampled_lifetime = 0

    # ------------------------------------------------------------------ spaces
    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        assert self._env_to_module.observation_space is not None
        return {
            ENV_SPACES_KEY: self._env_spaces,
            DEFAULT_MODULE_ID: (self._env_to_module.observation_space, self._env_spaces[1]),
        }

    # ------------------------------------------------------------------ sampling
    def _reset(self) -> None:
        try:
            raw, _ = self.env.reset(seed=self._seed)  # seeds sub-env i with seed + i
        except Exception as e:
            raise EnvError(f"env={self.config.env!r} raised in reset(): {e!r}") from e
        self._seed = None  # seed once; later resets continue the seeded RNGs
        self._prev_done[:] = False
        self._ep_return[:] = 0.0
        self._ep_len[:] = 0
        self._eps_id = np.arange(self._next_eps_id, self._next_eps_id + self.num_envs)
        self._next_eps_id += self.num_envs
        self._obs = self._env_to_module(raw, episode_starts=np.ones(self.num_envs, bool))

    def sample(self, *, num_timesteps: int | None = None, num_episodes: int | None = None,
               explore: bool | None = None) -> SampleResult:
        if num_timesteps is not None and num_episodes is not None:
            raise ValueError("sample() takes num_timesteps or num_episodes, not both.")
        explore = self.config.explore if explore is None else explore
        if num_episodes is not None:
            self._reset()  # whole episodes only: start every sub-env afresh
        elif self._obs is None:
            self._reset()
        if num_timesteps is None and num_episodes is None:
            num_timesteps = self.config.get_rollout_fragment_length() * self.num_envs
        forward = self.module.forward_exploration if explore else self.module.forward_inference
        cols: dict[str, list[np.ndarray]] = {k: [] for k in (
            Columns.OBS, Columns.ACTIONS, Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS,
            Columns.REWARDS, Columns.TERMINATEDS, Columns.TRUNCATEDS, Columns.EPS_ID, "valid")}
        first_done_eps = len(self._done_returns)
        done_eps_ids: list[np.ndarray] = []
        steps = 0
        with torch.inference_mode():
            while (steps < num_timesteps if num_episodes is None
                   else len(self._done_returns) - first_done_eps < num_episodes):
                obs = self._obs
                assert obs is not None
                out = forward({Columns.OBS: torch.from_numpy(obs)})
                data = self._module_to_env(out, rl_module=self.module, explore=explore)
                try:
                    raw, rew, term, trunc, _ = self.env.step(data[ENV_ACTIONS])
                except Exception as e:
                    raise EnvError(
                        f"env={self.config.env!r} raised in step(): {e!r}. The episodes "
                        "finished before this step are kept in the EnvRunner's metrics."
                    ) from e
                # NEXT_STEP autoreset: a sub-env done at the previous step was reset by this
                # step, which ignored its action; that row is no transition (valid=False).
                valid = ~self._prev_done
                rew = np.where(valid, rew, 0.0)
                cols[Columns.OBS].append(obs)
                cols[Columns.ACTIONS].append(data[Columns.ACTIONS].numpy())
                cols[Columns.ACTION_LOGP].append(data[Columns.ACTION_LOGP].numpy())
                cols[Columns.ACTION_DIST_INPUTS].append(out[Columns.ACTION_DIST_INPUTS].numpy())
                cols[Columns.REWARDS].append(rew)
                cols[Columns.TERMINATEDS].append(term)
                cols[Columns.TRUNCATEDS].append(trunc)
                cols[Columns.EPS_ID].append(self._eps_id.copy())
                cols["valid"].append(valid)
                steps += int(valid.sum())
                self._ep_return += rew
                self._ep_len += valid
                done = (term | trunc) & valid
                if done.any():
                    idx = np.flatnonzero(done)
                    self._done_returns += self._ep_return[idx].tolist()
                    self._done_lens += self._ep_len[idx].tolist()
                    done_eps_ids.append(self._eps_id[idx].copy())
                    self._ep_return[idx] = 0.0
                    self._ep_len[idx] = 0
                started = ~valid  # these sub-envs show their first observation now
                if started.any():
                    idx = np.flatnonzero(started)
                    self._eps_id[idx] = np.arange(self._next_eps_id, self._next_eps_id + len(idx))
                    self._next_eps_id += len(idx)
                self._prev_done = term | trunc
                self._obs = self._env_to_module(raw, episode_starts=started)
        self._num_env_steps += steps
        self.num_env_steps_sampled_lifetime += steps
        batch = self._to_batch(cols)
        if num_episodes is not None:  # keep the completed episodes only
            keep = np.isin(batch[Columns.EPS_ID], np.concatenate(done_eps_ids))
            batch = {k: v[keep] for k, v in batch.items()}
        return {DEFAULT_MODULE_ID: batch}

    def _to_batch(self, cols: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
        """Stacks `[T, N]` step arrays into flat, env-major rows without the reset rows."""
        assert self._obs is not None
        valid = np.stack(cols.pop("valid")).T  # [N, T]
        obs_all = np.stack([*cols[Columns.OBS], self._obs])  # [T + 1, N, ...]
        # new_obs[t] is what the env returned for row t; at episode ends it is the final
        # observation (NEXT_STEP mode returns it, the reset comes one step later).
        stacked = {k: np.stack(v) for k, v in cols.items() if k != Columns.OBS}
        stacked[Columns.OBS] = obs_all[:-1]
        stacked[Columns.NEXT_OBS] = obs_all[1:]
        batch = {k: np.swapaxes(v, 0, 1)[valid] for k, v in stacked.items()}
        batch[Columns.REWARDS] = batch[Columns.REWARDS].astype(np.float32)
        # A sequence ends where its episode ends or where this fragment stops.
        t = valid.shape[1]
        last = np.zeros_like(valid)
        has_any = valid.any(axis=1)
        last[np.flatnonzero(has_any), t - 1 - np.argmax(valid[has_any, ::-1], axis=1)] = True
        batch[Columns.SEQ_ENDS] = (
            last[valid] | batch[Columns.TERMINATEDS] | batch[Columns.TRUNCATEDS]
        )
        return batch

    # ------------------------------------------------------------------ metrics and state
    def get_metrics(self) -> dict[str, Any]:
        metrics = {
            "episode_returns": self._done_returns,
            "episode_lens": self._done_lens,
            "num_env_steps": self._num_env_steps,
            "module_episode_returns": {DEFAULT_MODULE_ID: list(self._done_returns)},
        }
        self._done_returns, self._done_lens, self._num_env_steps = [], [], 0
        return metrics

    def get_state(self) -> dict[str, Any]:
        return {
            "rl_module": {DEFAULT_MODULE_ID: {
                k: v.numpy() for k, v in self.module.get_state(inference_only=True).items()}},
            "env_to_module": self._env_to_module.get_state(),
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if "rl_module" in state and DEFAULT_MODULE_ID in state["rl_module"]:
            self.module.set_state(state["rl_module"][DEFAULT_MODULE_ID])
        if "env_to_module" in state:
            self._env_to_module.set_state(state["env_to_module"])
        if "num_env_steps_sampled_lifetime" in state:
            self.num_env_steps_sampled_lifetime = int(state["num_env_steps_sampled_lifetime"])

    def stop(self) -> None:
        self.env.close()

