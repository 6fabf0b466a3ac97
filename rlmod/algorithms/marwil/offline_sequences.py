"""Learner connector piece for recurrent modules trained offline (BC, MARWIL): recorded
episodes become zero-padded chunks with the state each chunk starts from.

Run by MARWIL's Learner connector pipeline (MARWILConfig.build_learner_connector) on
batches of whole episodes (OfflineReader(whole_episodes=True)); the chunk layout and the
padding removal before the loss are PPO's (rlmod.core.sequence_batches).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlmod.connectors.learner import LearnerConnector
from rlmod.connectors.learner_sequences import sequence_values
from rlmod.core.apis import find_compute_values
from rlmod.core.columns import Columns
from rlmod.core.learner import TensorBatch
from rlmod.core.multi_rl_module import MultiRLModule
from rlmod.core.recurrent import (
    PREV_ACTIONS,
    PREV_REWARDS,
    flatten_state,
    initial_state_batch,
)
from rlmod.core.rl_module import RLModule
from rlmod.core.sequence_batches import (
    chunk_index,
    max_seq_len_of,
    pad_column,
    pad_index,
    to_sequences,
)
from rlmod.core.types import BoolArray, IntArray
from rlmod.offline.returns import BOOTSTRAP_DISCOUNT, BOOTSTRAP_OBS

TensorDict = dict[str, torch.Tensor]


class AddStatesFromOfflineEpisodes(LearnerConnector):
    """Each stateful module's rows (whole episodes, each contiguous and in time order) as
    chunks of at most `max_seq_len` steps, `[S, T, ...]`, zero-padded, with `loss_mask`
    and the `state_in` of each chunk; other modules pass through.

    Recorded rows carry no recurrent states. A chunk's `state_in` is what the module,
    run without gradient from `get_initial_state()` at its episode's first step, holds
    after the chunks of that episode before it (a burn-in with the current weights, one
    forward pass per chunk position; the gradient flows within chunks, as PPO's). Also
    adds `prev_actions` / `prev_rewards` (zeros at an episode's first step) and `seq_ends`.

    For MARWIL (rows with `bootstrap_discount`), the value of the observation after a
    truncated episode's last step is computed here too, over the episode's sequence from
    its last chunk's state, and added to the episode's `value_targets`
    (BootstrapTruncatedReturns does this for modules without memory).
    """

    def __call__(
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        for mid, cols in batch.items():
            module = rl_module[mid]
            if module.is_stateful() and Columns.STATE_IN not in cols:
                batch[mid] = offline_sequences(module, cols)
        return batch


def offline_sequences(module: RLModule, cols: TensorDict) -> TensorDict:
    """`AddStatesFromOfflineEpisodes` for one module's columns (whole episodes)."""
    cols = dict(cols)
    ends = _episode_ends(cols)
    device = cols[Columns.OBS].device
    cols[Columns.SEQ_ENDS] = torch.from_numpy(ends).to(device)
    firsts = np.r_[True, ends[:-1]]
    cols[PREV_ACTIONS] = _shift(cols[Columns.ACTIONS], firsts)
    cols[PREV_REWARDS] = _shift(cols[Columns.REWARDS].float(), firsts)
    discount = cols.pop(BOOTSTRAP_DISCOUNT, None)
    final_obs = cols.pop(BOOTSTRAP_OBS, None)
    max_len = max_seq_len_of(module)
    starts, lengths = chunk_index(ends, max_len)
    states = burn_in_states(module, cols, starts, lengths, max_len)  # [S, D]
    state_rows = torch.zeros(len(ends), states.shape[1], dtype=states.dtype, device=device)
    state_rows[torch.from_numpy(starts).to(device)] = states
    cols[Columns.STATE_IN] = state_rows
    bootstraps = discount is not None and bool(discount.any())  # a truncated episode
    if bootstraps and final_obs is not None and find_compute_values(module):
        assert discount is not None
        cols[Columns.VALUE_TARGETS] = _bootstrapped_targets(module, cols, ends, discount, final_obs)
    return to_sequences(cols, max_len)


def burn_in_states(
    module: RLModule, cols: TensorDict, starts: IntArray, lengths: IntArray, max_len: int
) -> torch.Tensor:
    """`[S, D]` (flattened as `flatten_state`): the state each chunk starts from (`starts`,
    `lengths`: `chunk_index` over `cols["seq_ends"]`). An episode's first chunk starts from
    the initial state, any other from the `state_out` of the chunk before it, which is full
    (`max_len` real steps, no padding) and was run from its own start state. Chunks at the
    same position in their episodes run together: one `forward_train` without gradient
    per position."""
    num = len(starts)
    template = module.get_initial_state()
    device = cols[Columns.OBS].device
    states = flatten_state(initial_state_batch(template, num, device))
    if num == 0:
        return states
    seq_ends = cols[Columns.SEQ_ENDS].cpu().numpy()
    continues = np.r_[~seq_ends[starts[1:] - 1], False]  # chunk s + 1 goes on from chunk s
    position = _position_in_episode(continues)
    index, mask = pad_index(starts, lengths, max_len)
    n = cols[Columns.OBS].shape[0]
    inputs = [c for c, v in cols.items() if c != Columns.STATE_IN and v.shape[:1] == (n,)]
    for k in range(int(position.max())):
        chunks = np.flatnonzero((position == k) & continues)
        if not len(chunks):
            continue
        chunk_t = torch.from_numpy(chunks)
        rows, row_mask = index[chunk_t], mask[chunk_t]
        step = {c: pad_column(cols[c], rows, row_mask) for c in inputs}
        step[Columns.STATE_IN] = states[chunk_t.to(device)]
        with torch.no_grad():
            out = module.forward_train(step)
        state_out = out[Columns.STATE_OUT]
        flat = state_out if isinstance(state_out, torch.Tensor) else flatten_state(state_out)
        states[torch.from_numpy(chunks + 1).to(device)] = flat.to(states.dtype)
    return states


def _bootstrapped_targets(
    module: RLModule,
    cols: TensorDict,
    ends: BoolArray,
    discount: torch.Tensor,
    final_obs: torch.Tensor,
) -> torch.Tensor:
    """`value_targets + bootstrap_discount * V(s_T)` per row, V(s_T) the value of the
    observation after the row's episode's last step, with the state after that step. Run
    over the truncated episodes only (their rows are those with a discount)."""
    rows_np = np.flatnonzero(discount.cpu().numpy())  # whole episodes, each contiguous
    rows = torch.from_numpy(rows_np).to(discount.device)
    n = len(ends)
    sub = {k: v[rows] for k, v in cols.items() if v.shape[:1] == (n,)}
    sub_ends = ends[rows_np]
    obs = sub[Columns.OBS]
    lasts = np.flatnonzero(sub_ends)
    next_obs = torch.empty_like(obs)  # within an episode the next row's obs; s_T at its end
    next_obs[:-1] = obs[1:]
    last_t = torch.from_numpy(lasts).to(obs.device)
    next_obs[last_t] = final_obs[rows][last_t].to(obs.dtype)
    sub[Columns.NEXT_OBS] = next_obs
    _, v_next = sequence_values(module, sub)
    episode = np.r_[0, np.cumsum(sub_ends[:-1])]  # each row's episode number
    v_final = torch.from_numpy(v_next[lasts[episode]]).to(discount.device)
    targets = cols[Columns.VALUE_TARGETS].clone()
    targets[rows] += discount[rows].to(targets.dtype) * v_final.to(targets.dtype)
    return targets


def _episode_ends(cols: TensorDict) -> BoolArray:
    """`[B]` bool, True at each episode's last row; rows that do not end in an episode
    end are a ValueError (they are not whole episodes)."""
    ends = (cols[Columns.TERMINATEDS] != 0) | (cols[Columns.TRUNCATEDS] != 0)
    out: BoolArray = ends.cpu().numpy().astype(bool)
    if len(out) and not out[-1]:
        raise ValueError(
            "A recurrent module (model_config use_lstm=True) trains offline on whole "
            "episodes, but this batch's last row ends none: its rows were shuffled or cut "
            "(OfflineReader(whole_episodes=True) keeps episodes whole)."
        )
    return out


def _shift(values: torch.Tensor, firsts: BoolArray) -> torch.Tensor:
    """The previous row's value, zeros at episodes' first rows (`firsts`)."""
    out = torch.zeros_like(values)
    out[1:] = values[:-1]
    first = torch.from_numpy(firsts).to(values.device)
    return torch.where(first.view(-1, *([1] * (values.dim() - 1))), torch.zeros_like(out), out)


def _position_in_episode(continues: BoolArray) -> IntArray:
    """Each chunk's number within its episode (0 for a first chunk), from `continues`
    (chunk s + 1 follows chunk s in the same episode)."""
    follows = np.r_[False, continues[:-1]]
    group_start = np.flatnonzero(~follows)
    counts = np.diff(np.r_[group_start, len(follows)])
    return (np.arange(len(follows)) - np.repeat(group_start, counts)).astype(np.int64)
