"""torch intra-op threads for large work: the one mechanism behind the Learner's rule for
large stacked groups (rlmod.core.learner_stacks.update_threads) and the local EnvRunner's
for large forward passes (rlmod.env.acting_threads), each with its own measured limits.

Why a rule at all: the process runs on one thread (Algorithm.setup), where small networks
are fastest; large batched matmuls gain from a second core that a synchronous algorithm
leaves idle while it samples or learns.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def more_threads(work: int, large: int, threads: int) -> int | None:
    """`threads` (at most the CPU count) where `work` is at least `large` and that is more
    than the process has now; None (leave the count alone) otherwise."""
    if work < large:
        return None
    wanted = min(threads, os.cpu_count() or 1)
    return wanted if wanted > torch.get_num_threads() else None


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Runs the block with `threads` torch intra-op threads (None: unchanged), restoring
    the previous count after, also when the block raised (EnvRunners in this process
    sample with the previous count)."""
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
