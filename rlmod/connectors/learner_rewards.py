"""A learner connector that rescales rewards by the running spread of the discounted return.

Run by a Learner before GAE when given as `config.training(learner_connector=...)`; the
EnvRunners' episode returns (the metrics) stay in the env's own units.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from rlmod.connectors.env_to_module import _RunningStat
from rlmod.connectors.learner import LearnerConnector
from rlmod.core.columns import Columns
from rlmod.core.learner import TensorBatch
from rlmod.core.multi_rl_module import MultiRLModule

_MAX_OPEN_EPISODES = 100_000
"""Unfinished episodes whose running return is kept for their next fragment; the oldest
beyond this are forgotten (their next fragment then starts from 0)."""


class NormalizeRewards(LearnerConnector):
    """Divides each training reward by the running standard deviation of the discounted
    return, as the reward half of Stable-Baselines3's `VecNormalize(norm_reward=True)`
    (and gymnasium's `NormalizeReward` wrapper) does; not an RLlib connector.

    Per episode it keeps `ret_t = gamma * ret_{t-1} + r_t` (from 0 at the episode's start,
    carried over to the episode's next fragment in a later batch by its `eps_id`), pushes
    every `ret_t` of the batch into a running mean and variance, then replaces the batch's
    `rewards` with `r_t / sqrt(var + epsilon)`, clipped to `[-clip, clip]`. Rewards are not
    centered (a constant shift would change which episode ends are good). Where PPO's
    value targets reach tens or hundreds (e.g. CartPole's, up to 1 / (1 - gamma)), this
    brings them near 1, which lets the value function fit them in fewer updates.

    Unlike VecNormalize, which updates its statistics at every vector step, the statistics
    here take a whole batch at once, then scale that batch; each Learner keeps its own
    (with several Learners they see different rows). Its state (`get_state`) is part of
    the Learner's checkpoint.

    Args:
        gamma: Discount of the running return; VecNormalize's default 0.99 (use the
            algorithm's `gamma`).
        epsilon: Added to the variance before the square root.
        clip: Bound of the scaled rewards' absolute value; VecNormalize's `clip_reward`.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> config = PPOConfig().training(
        ...     gamma=0.98, learner_connector=lambda obs_space, act_space: NormalizeRewards(
        ...         gamma=0.98))
    """

    def __init__(self, *, gamma: float = 0.99, epsilon: float = 1e-8, clip: float = 10.0) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"NormalizeRewards(gamma={gamma!r}): gamma must be in [0, 1].")
        if epsilon <= 0.0 or clip <= 0.0:
            raise ValueError(
                f"NormalizeRewards(epsilon={epsilon!r}, clip={clip!r}): both must be > 0."
            )
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
        self.clip = float(clip)
        self._stats: dict[str, _RunningStat] = {}
        self._open: dict[str, OrderedDict[int, float]] = {}

    def __call__(
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        for mid, cols in batch.items():
            if Columns.REWARDS not in cols or cols[Columns.REWARDS].shape[0] == 0:
                continue
            key = str(mid)
            stat = self._stats.setdefault(key, _RunningStat(()))
            returns = self._discounted_returns(key, cols)
            stat.push_batch(returns)
            std = np.sqrt(stat.m2 / stat.n + self.epsilon)
            rewards = cols[Columns.REWARDS]
            scaled = torch.clamp(rewards / float(std), -self.clip, self.clip)
            cols[Columns.REWARDS] = scaled.to(rewards.dtype)
        return batch

    def _discounted_returns(self, key: str, cols: dict[str, torch.Tensor]) -> np.ndarray:
        """`ret_t` of every row; rows of one sequence (up to a `seq_ends` row) are one
        episode's steps in time order, as GAE also assumes."""
        for col in (Columns.SEQ_ENDS, Columns.EPS_ID, Columns.TERMINATEDS, Columns.TRUNCATEDS):
            if col not in cols:
                raise ValueError(
                    f"NormalizeRewards needs the {col!r} column of EnvRunner batches; this "
                    "module's batch has only " + ", ".join(map(repr, cols)) + "."
                )
        rewards = cols[Columns.REWARDS].detach().cpu().numpy().astype(np.float64).tolist()
        seq_ends = cols[Columns.SEQ_ENDS].cpu().numpy().tolist()
        eps_ids = cols[Columns.EPS_ID].cpu().numpy().tolist()
        done = (cols[Columns.TERMINATEDS] | cols[Columns.TRUNCATEDS]).cpu().numpy().tolist()
        open_eps = self._open.setdefault(key, OrderedDict())
        out = np.empty(len(rewards), np.float64)
        ret, start = 0.0, True
        for t, r in enumerate(rewards):
            if start:  # a sequence's first row: carry the episode's earlier fragment on
                ret = open_eps.pop(eps_ids[t], 0.0)
            ret = self.gamma * ret + r
            out[t] = ret
            start = bool(seq_ends[t])
            if start and not done[t]:
                open_eps[eps_ids[t]] = ret
        while len(open_eps) > _MAX_OPEN_EPISODES:
            open_eps.popitem(last=False)
        return out

    def get_state(self) -> dict[str, Any]:
        """Per module: the return statistics and the running returns of unfinished
        episodes."""
        state: dict[str, Any] = {}
        for key, stat in self._stats.items():
            open_eps = self._open.get(key, OrderedDict())
            state[key] = {
                **stat.to_dict(),
                "open_eps_ids": np.array(list(open_eps), np.int64),
                "open_returns": np.array(list(open_eps.values()), np.float64),
            }
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        self._stats, self._open = {}, {}
        for key, s in state.items():
            stat = _RunningStat(())
            stat.merge(float(s["n"]), np.asarray(s["mean"]), np.asarray(s["m2"]))
            self._stats[key] = stat
            ids, rets = np.asarray(s["open_eps_ids"]), np.asarray(s["open_returns"])
            self._open[key] = OrderedDict(zip(ids.tolist(), rets.tolist(), strict=True))
