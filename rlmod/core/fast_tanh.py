"""`tanh_`: tanh in place as `2 * sigmoid(2x) - 1`, for the stacked paths' `nn.Tanh` layers.

Why: torch 2.13's float tanh (the version rlmod pins) runs at scalar speed on the 2-core
AMD EPYC: 4.2 ns per element on one thread, against 0.44 ns for sigmoid. A stacked
group's hidden activations are large ([1,000 modules, 128 rows, 64] per layer and
minibatch when training), so there tanh was a third of the Learner's time: on
[1,000, 128, 64], two threads, torch's `tanh_` takes 10.9 ms and this 3.2 ms (the four
passes of mul, sigmoid, mul, sub, each vectorised). End to end, on that host: the
learn phase of the issue-17 `train()` of 1,000 modules (4,000 env steps, 3 epochs instead
of 30) 8.5 -> 7.2 s; sampling with the same 1,000 agents on 1,000 modules 394k -> 461k
agent steps/s, on 10 modules 581k -> 737k (benchmarks/investigations/stacked_acting.py); see
benchmarks/RESULTS.md, session 27.

Accuracy: at most 1.8e-7 from the exact tanh (float64) over [-20, 20], against torch's
3e-8; the stacked paths already differ from the per-module paths by float rounding (batched
matmuls sum in another order) and are tested against them to 1e-6. The backward pass of
the stacked training uses `1 - y**2` of this output, torch's `tanh_backward`.

Where: only where many rows of many modules run at once (rlmod.core.stacked_acting,
rlmod.core.stacked_train). A module's own forward (`nn.Tanh`, torch's tanh) is unchanged,
so a module acts and trains bit for bit alike outside stacking; tests/core/test_fast_tanh.py
holds this against torch.tanh.
"""

from __future__ import annotations

import torch


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh of `x`, in place (see the module docstring for why and how exact); returns `x`."""
    return x.mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)
