"""What data-parallel Learners (`num_learners > 1`) exchange through torch.distributed:
joining the group, averaging gradients, agreeing on a count. The Learner calls these only
when its world size is above 1.

Each Learner trains on its own share of the batch: after every backward pass the gradients
are averaged over all Learners, weighted by their minibatch rows, so each step is the step
of one Learner on the union of the minibatches (for losses that are means over rows), and
all Learners hold identical weights throughout.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.optim import Adam, AdamSlot


def join(*, device: torch.device, rank: int, world_size: int, init_method: str) -> None:
    """Joins this process to the group of `world_size` Learners (NCCL on CUDA, else gloo)."""
    import torch.distributed as dist

    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=init_method,
        rank=rank,
        world_size=world_size,
    )


def broadcast_weights(module: torch.nn.Module) -> None:
    """Every Learner starts from rank 0's weights (in parameter-name order)."""
    import torch.distributed as dist

    for _, param in sorted(module.named_parameters()):
        dist.broadcast(param.data, src=0)


def all_reduce_gradients(
    optimizers: Mapping[ModuleID, Adam | AdamSlot],
    rows: Mapping[ModuleID, int],
    device: torch.device,
) -> None:
    """Every module's gradient becomes the row-weighted mean over all Learners (sum of rows
    x gradient, over the sum of rows), one all-reduce per module in a fixed order. `rows`:
    this Learner's minibatch rows per module; a module without rows contributes zeros."""
    import torch.distributed as dist

    for mid in sorted(optimizers):
        params = optimizers[mid].params
        flat = torch.cat(
            [
                *(
                    p.grad.reshape(-1)
                    if p.grad is not None
                    else torch.zeros(p.numel(), device=device)
                    for p in params
                ),
                torch.ones(1, device=device),
            ]
        ) * float(rows.get(mid, 0))  # last entry: rows
        dist.all_reduce(flat)
        flat = flat[:-1] / max(float(flat[-1]), 1.0)
        offset = 0
        for p in params:
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()


def agree_max(value: int, device: torch.device) -> int:
    """The largest `value` over all Learners (the number of minibatches, so that every
    Learner makes the same number of all-reduces)."""
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())
