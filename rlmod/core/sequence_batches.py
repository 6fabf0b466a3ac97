"""Sequence batches: how a Learner cuts a stateful module's rows into zero-padded sequences,
and takes the padding out again before any loss or statistic reads them.

Rows arrive as EnvRunners give them: flat `[B]`, each sub-env's rows contiguous and in time
order, `seq_ends` where an episode or fragment ends. A stateful module trains on chunks of
at most `max_seq_len` rows of one sequence, laid out `[S, T, ...]` (T = max_seq_len, real
steps first, then zeros) with `loss_mask` `[S, T]` and the recorded `state_in` of each
chunk's first row `[S, D]`. Minibatches then take whole chunks (dim 0), and after
`forward_train` the Learner keeps only the masked-in steps (`unpad`): losses, advantages
and diagnostics see the same rows as without padding.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from rlmod.core.columns import Columns
from rlmod.core.rl_module import RLModule
from rlmod.core.types import Array, IntArray

TensorDict = dict[str, torch.Tensor]

DEFAULT_MAX_SEQ_LEN = 20
"""RLlib's DefaultModelConfig.max_seq_len."""


def max_seq_len_of(module: RLModule) -> int:
    """The module's `model_config["max_seq_len"]` (RLlib's default 20 where unset)."""
    config = module.model_config
    value = (
        config.get("max_seq_len")
        if isinstance(config, Mapping)
        else getattr(config, "max_seq_len", None)
    )
    return DEFAULT_MAX_SEQ_LEN if value is None else int(value)


def chunk_index(seq_ends: Array, max_seq_len: int) -> tuple[IntArray, IntArray]:
    """(first row, length) of each chunk: sequences (ended by `seq_ends`, `[B]`; the last
    row always ends one) cut into pieces of at most `max_seq_len` rows, in row order."""
    n = len(seq_ends)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ends = np.flatnonzero(np.asarray(seq_ends[:-1]) != 0)
    seq_starts = np.concatenate([[0], ends + 1])
    seq_lens = np.diff(np.append(seq_starts, n))
    num_chunks = -(-seq_lens // max_seq_len)  # per sequence
    first_chunk = np.repeat(np.cumsum(num_chunks) - num_chunks, num_chunks)
    k = np.arange(int(num_chunks.sum())) - first_chunk  # chunk number within its sequence
    starts = np.repeat(seq_starts, num_chunks) + k * max_seq_len
    lengths = np.minimum(max_seq_len, np.repeat(seq_starts + seq_lens, num_chunks) - starts)
    return starts.astype(np.int64), lengths.astype(np.int64)


def pad_index(
    starts: IntArray, lengths: IntArray, max_seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(`[S, T]` row index, `[S, T]` mask): row `starts[s] + t` where `t < lengths[s]`;
    padded slots point at the chunk's first row and are masked out."""
    t = np.arange(max_seq_len)[None]
    mask = t < lengths[:, None]
    index = np.where(mask, starts[:, None] + t, starts[:, None])
    return torch.from_numpy(index), torch.from_numpy(mask)


def pad_column(x: torch.Tensor, index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`[B, ...]` rows -> `[S, T, ...]`, zeros where `mask` is False."""
    out = x[index.to(x.device)]
    m = mask.to(x.device).view(*mask.shape, *([1] * (x.dim() - 1)))
    return torch.where(m, out, torch.zeros((), dtype=out.dtype, device=out.device))


def to_sequences(columns: Mapping[str, torch.Tensor], max_seq_len: int) -> TensorDict:
    """A module's flat rows as zero-padded chunks: every `[B, ...]` column becomes
    `[S, T, ...]`, `state_in` `[S, D]` (each chunk's first row), plus `loss_mask`."""
    seq_ends = columns[Columns.SEQ_ENDS].cpu().numpy()
    starts, lengths = chunk_index(seq_ends, max_seq_len)
    index, mask = pad_index(starts, lengths, max_seq_len)
    out: TensorDict = {}
    for key, value in columns.items():
        if key == Columns.STATE_IN:
            out[key] = value[torch.from_numpy(starts).to(value.device)]
        else:
            out[key] = pad_column(value, index, mask)
    out[Columns.LOSS_MASK] = mask.to(columns[Columns.SEQ_ENDS].device)
    return out


def unpad(
    columns: Mapping[str, torch.Tensor], fwd_out: Mapping[str, object]
) -> tuple[TensorDict, TensorDict]:
    """A minibatch of chunks and its `forward_train` outputs with the padding taken out:
    each `[S, T, ...]` tensor becomes `[N, ...]` (the N real steps, in order); `state_in`,
    `state_out` and `loss_mask` are dropped. What a loss reads is then exactly the real
    steps, as if no padding had been added."""
    mask = columns[Columns.LOSS_MASK]
    lead = tuple(mask.shape)

    def real(cols: Mapping[str, object]) -> TensorDict:
        return {
            k: v[mask]
            for k, v in cols.items()
            if isinstance(v, torch.Tensor) and tuple(v.shape[:2]) == lead and k != Columns.LOSS_MASK
        }

    return real(columns), real(fwd_out)


def sequence_minibatch_size(
    batch: Mapping[str, Mapping[str, torch.Tensor]], minibatch_size: int | None
) -> int | None:
    """`minibatch_size` counts env steps (RLlib's); where a module's rows are chunks, a
    minibatch takes whole chunks: as many as hold `minibatch_size` real steps on average
    (at least one). Unchanged where no module has chunks."""
    if minibatch_size is None:
        return None
    for cols in batch.values():
        mask = cols.get(Columns.LOSS_MASK)
        if mask is not None and mask.shape[0]:
            mean_len = float(mask.sum()) / mask.shape[0]
            return max(1, round(minibatch_size / mean_len))
    return minibatch_size


def real_steps(columns: Mapping[str, torch.Tensor]) -> int | None:
    """The number of real (unpadded) steps of a module's chunks; None for flat rows."""
    mask = columns.get(Columns.LOSS_MASK)
    return None if mask is None else int(mask.sum())
