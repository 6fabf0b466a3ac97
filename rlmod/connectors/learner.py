"""Learner connectors: turn the episodes a Learner receives into train batches.

Run by Learners once per `update()`, before the epochs:
`batch = pipeline(batch, rl_module=multi_rl_module)` where `batch` maps module IDs to
column dicts of tensors. GAE is here as a plain function plus the connector that calls it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlmod.connectors.pipeline import Connector
from rlmod.core.apis import find_compute_values
from rlmod.core.columns import Columns
from rlmod.core.learner import TensorBatch
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule


class LearnerConnector(Connector):
    """Base: `(batch: {module_id: {column: tensor}}, *, rl_module) -> batch`."""

    def __call__(
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        raise NotImplementedError


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminateds: np.ndarray,
    seq_ends: np.ndarray,
    *,
    gamma: float,
    lambda_: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16) over flat sequences.

    All inputs are `[B]`, rows of one sequence contiguous and in time order.
    `next_values[t]` is V(s_{t+1}); it is dropped where the episode terminated (no future
    reward after a terminal state) but kept where it was truncated by a time limit or the
    sequence was cut by the fragment end, since the episode would have gone on.

    Returns:
        (advantages, value_targets), each `[B]` float32; value_targets = advantages + values.
    """
    deltas = rewards + gamma * next_values * (1.0 - terminateds) - values
    # A_t = delta_t + gamma * lambda * A_{t+1}, restarting at each sequence end.
    carry = (gamma * lambda_) * (1.0 - seq_ends)
    adv = np.empty(len(deltas), dtype=np.float64)
    last = 0.0
    d_list, c_list = deltas.tolist(), carry.tolist()
    for t in range(len(d_list) - 1, -1, -1):
        last = d_list[t] + c_list[t] * last
        adv[t] = last
    return adv.astype(np.float32), (adv + values).astype(np.float32)


class GeneralAdvantageEstimation(LearnerConnector):
    """Adds `vf_preds`, `advantages` (normalized if asked) and `value_targets` per module.

    Modules are evaluated with their value function (`compute_values`) on `obs` and
    `new_obs`; modules without one (e.g. learner-only curiosity models) are skipped.
    With `config`, each module's `gamma` and `lambda_` come from
    `config.get_config_for_module(module_id)` (per-module overrides apply).
    """

    def __init__(
        self, *, gamma: float = 0.99, lambda_: float = 0.95, normalize_advantages: bool = True,
        config: Any = None,
    ) -> None:
        self.gamma = gamma
        self.lambda_ = lambda_
        self.normalize_advantages = normalize_advantages
        self.config = config

    def _coefficients(self, module_id: ModuleID) -> tuple[float, float]:
        if self.config is None:
            return self.gamma, self.lambda_
        cfg = self.config.get_config_for_module(module_id)
        return cfg.gamma, cfg.lambda_

    def __call__(
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        for mid, cols in batch.items():
            compute_values = find_compute_values(rl_module[mid])
            if compute_values is None or Columns.REWARDS not in cols:
                continue
            obs, next_obs = cols[Columns.OBS], cols[Columns.NEXT_OBS]
            n = obs.shape[0]
            with torch.no_grad():
                v = compute_values({Columns.OBS: torch.cat([obs, next_obs])})
            # GAE runs in numpy on the CPU (a loop over time); a GPU Learner's columns go
            # there and the results come back to the batch's device.
            values, next_values = v[:n].cpu().numpy(), v[n:].cpu().numpy()
            gamma, lambda_ = self._coefficients(mid)
            adv, targets = compute_gae(
                cols[Columns.REWARDS].cpu().numpy().astype(np.float64),
                values.astype(np.float64),
                next_values.astype(np.float64),
                cols[Columns.TERMINATEDS].cpu().numpy().astype(np.float64),
                cols[Columns.SEQ_ENDS].cpu().numpy().astype(np.float64),
                gamma=gamma,
                lambda_=lambda_,
            )
            if self.normalize_advantages and n > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            cols[Columns.VF_PREDS] = torch.from_numpy(values).to(obs.device)
            cols[Columns.ADVANTAGES] = torch.from_numpy(adv).to(obs.device)
            cols[Columns.VALUE_TARGETS] = torch.from_numpy(targets).to(obs.device)
        return batch
