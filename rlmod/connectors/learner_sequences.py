"""Learner connector pieces for stateful modules (`use_lstm`): values over sequences for GAE,
and the cut into zero-padded chunks the loss trains on.

Run by a Learner's connector pipeline; the chunk layout is rlmod.core.sequence_batches'.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlmod.connectors.learner import LearnerConnector
from rlmod.core.apis import find_compute_values
from rlmod.core.columns import Columns
from rlmod.core.learner import TensorBatch
from rlmod.core.multi_rl_module import MultiRLModule
from rlmod.core.recurrent import PREV_ACTIONS, PREV_REWARDS
from rlmod.core.rl_module import RLModule
from rlmod.core.sequence_batches import (
    chunk_index,
    max_seq_len_of,
    pad_column,
    pad_index,
    to_sequences,
)


class AddTimeDimToBatchAndZeroPad(LearnerConnector):
    """RLlib's name: each stateful module's flat rows become chunks of at most its
    `max_seq_len` steps, `[S, T, ...]`, zero-padded, with `loss_mask` and each chunk's
    `state_in`. Runs last (after GAE, which reads flat rows); other modules pass through."""

    def __call__(
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        for mid, cols in batch.items():
            module = rl_module[mid]
            if Columns.STATE_IN in cols and module.is_stateful():
                batch[mid] = to_sequences(cols, max_seq_len_of(module))
        return batch


def sequence_values(
    module: RLModule, cols: dict[str, torch.Tensor]
) -> tuple[np.ndarray, np.ndarray]:
    """V(obs) and V(new_obs) of a stateful module's flat rows, `[B]` each, as the module
    sees them in training: over chunks of at most `max_seq_len` steps from each chunk's
    recorded `state_in`. A chunk gets its last row's `new_obs` as one more step, so
    V(new_obs_t) is the value one step on (within a chunk, `new_obs_t` is `obs_{t+1}`)."""
    compute_values = find_compute_values(module)
    assert compute_values is not None
    n = cols[Columns.OBS].shape[0]
    if n == 0:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    max_len = max_seq_len_of(module)
    starts, lengths = chunk_index(cols[Columns.SEQ_ENDS].cpu().numpy(), max_len)
    # Chunk s is rows starts[s] .. starts[s] + lengths[s] - 1 of an extended row list in
    # which each chunk's next observation follows its last row: steps T = max_len + 1.
    index, mask = pad_index(starts, lengths, max_len + 1)
    last = starts + lengths - 1
    ext = torch.from_numpy(np.arange(n, n + len(starts)))  # the appended steps
    s_idx = torch.arange(len(starts))
    t_last = torch.from_numpy(lengths)
    index[s_idx, t_last] = ext
    mask[s_idx, t_last] = True
    last_t = torch.from_numpy(last)

    def extended(key: str, extra: torch.Tensor) -> torch.Tensor:
        return torch.cat([cols[key], extra.to(cols[key].device)])

    obs = extended(Columns.OBS, cols[Columns.NEXT_OBS][last_t])
    batch = {Columns.OBS: pad_column(obs, index, mask)}
    if PREV_ACTIONS in cols:  # the appended step follows the last row's action and reward
        batch[PREV_ACTIONS] = pad_column(
            extended(PREV_ACTIONS, cols[Columns.ACTIONS][last_t].to(cols[PREV_ACTIONS].dtype)),
            index,
            mask,
        )
        batch[PREV_REWARDS] = pad_column(
            extended(PREV_REWARDS, cols[Columns.REWARDS][last_t]), index, mask
        )
    batch[Columns.STATE_IN] = cols[Columns.STATE_IN][torch.from_numpy(starts)]
    with torch.no_grad():
        fwd = module.forward_train(batch)
        values = compute_values(batch, embeddings=fwd.get(Columns.EMBEDDINGS))  # [S, T + 1]
    values = values.cpu()
    real = torch.from_numpy(np.arange(max_len)[None] < lengths[:, None])  # [S, max_len]
    rows = index[:, :max_len][real]  # every real row once
    v = torch.empty(n, dtype=values.dtype)
    v_next = torch.empty(n, dtype=values.dtype)
    v[rows] = values[:, :max_len][real]
    v_next[rows] = values[:, 1:][real]  # the step after each real row, within its chunk
    return v.numpy(), v_next.numpy()
