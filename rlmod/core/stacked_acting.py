"""StackedActing: a StackedGroup's acting forward as batched matmuls instead of `vmap`.

Used by `StackedGroup.forward_exploration` / `forward_inference` (multi-agent EnvRunners:
one forward per group per step, no autograd). It applies where the module class declares
`stacked_acting_layers()` on itself (as `supports_stacking`, not inherited): the layers
(`nn.Linear` and elementwise activations) whose composition on the flattened observation
is all that its acting forwards return (`Columns.ACTION_DIST_INPUTS`). Anything else runs
the plain path, `StackedGroup.call_rows` (vmap over the class's own methods).

Why: an EnvRunner's group sees few rows per module each step (1,000 agents in 32 envs of
MultiAgentCartPole, one module per agent: 1-32 rows per module, and only some modules
present late in an episode). `vmap` pads every module to the most rows any module has and,
with modules missing, first copies the parameters of those present; its linear then costs
3-4x what the same rows cost at 10 modules. Here the rows are padded to `[modules, width,
features]` over all the group's modules (over the present ones only where very few are:
GATHER_BELOW) and each layer is one torch `baddbmm` against a
transposed weight copy (a layer of at most NARROW_OUT outputs multiplies its weights from
the left). Only torch's matmuls: numpy's (an earlier fast path here) runs products of 256
x 256 weights on OpenBLAS's own pool of threads, outside torch's thread setting, whose
spinning slowed the torch work after it (1,000 modules of [256, 256], one row each: torch's
bmm 27 ms after numpy's against 20 ms with OPENBLAS_NUM_THREADS=1). Forward of 1,000
modules, ms, numpy / torch, at 1 / 4 / 32 rows per module (2-core Intel Xeon, one torch
thread, 2026-12-07, /tmp probe): [64, 64] quiet 1.25 / 2.00 / 11.7 against 1.45 / 1.86 /
11.2, beside two CPU-bound processes 1.46 / 2.07 / 13.6 against 1.56 / 1.94 / 15.8; PPO's
default [256, 256] quiet 23.7 / 36.0 / 86 against 22.2 / 33.7 / 91, busy 34.3 / 50.0 / 142
against 28.7 / 42.7 / 150: no clear win either way, so one library's threads.

Measured with `python benchmarks/investigations/stacked_acting.py --rounds 4` (80 recorded
steps of 1,000 agents in 32 envs replayed, 2-core Intel Xeon, one thread, 2026-12-07):
forward per step vmap 10.66 -> 5.79 ms at 1,000 modules, 3.66 -> 3.40 ms at 10. A cost
model that picked per step between this layout, a gathered one and a sparse CSR one was
no faster there (5.88 and 3.32 ms in the same run) and was removed; the one rule kept,
GATHER_BELOW, applies to calls with far fewer rows than modules.
Tested against the plain path in tests/core/test_stacked_acting.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from rlmod.core.fast_tanh import tanh_

if TYPE_CHECKING:
    from rlmod.core.stacked import StackedGroup

# A layer with at most this many outputs multiplies its weights from the left with torch
# (h @ W^T with 2 columns is 5x slower than W @ h^T).
NARROW_OUT = 4
# A call of N rows computes only the modules present in it (copying their weight rows) when
# GATHER_BELOW * N < the group's modules, i.e. at most one module in GATHER_BELOW has a row.
# Late in a MultiAgentCartPole episode of 1,000 agents, one module each, few agents are
# left (14 in one seeded run). A forward over all 1,000 modules against over the P present
# ones, one row each (2-core Intel Xeon, one thread, 2026-12-07, /tmp probe): PPO's [256,
# 256]: 22.9 ms against 1.0 / 8.0 / 10.3 / 13.2 ms at P = 14 / 100 / 125 / 160, but 44 ms
# (copies of 65 MB) against 20.6 at P = 249; [64, 64]: 1.45 ms against 0.21 / 0.48 / 0.78
# at P = 14 / 60 / 120.
GATHER_BELOW = 8

# Elementwise activations, applied in place to the fresh output of the layer before.
_IN_PLACE: dict[type[nn.Module], Callable[[torch.Tensor], torch.Tensor]] = {
    nn.Tanh: tanh_,  # the vectorised form: rlmod/core/fast_tanh.py
    nn.ReLU: torch.Tensor.relu_,
    nn.Sigmoid: torch.Tensor.sigmoid_,
    nn.SiLU: lambda h: nn.functional.silu(h, inplace=True),
    nn.Identity: lambda h: h,
}
_ELEMENTWISE = (*_IN_PLACE, nn.ELU, nn.GELU, nn.LeakyReLU, nn.Softplus)

Step = tuple[torch.Tensor, torch.Tensor | None] | Callable[[torch.Tensor], torch.Tensor]


def acting_layers(module: nn.Module) -> Sequence[nn.Module] | None:
    """`module.stacked_acting_layers()` where its class declares that method itself, else
    None (a subclass may change its forwards, so it declares the method anew)."""
    method = type(module).__dict__.get("stacked_acting_layers")
    return None if method is None else method(module)


class StackedActing:
    """The acting forward of one StackedGroup: `[N, ...]` observations and each row's module
    position -> `[N, out]` action distribution inputs, each row through its own module.

    Build it with `StackedActing.of(group)`, which returns None where the plain path must run.
    """

    def __init__(self, group: StackedGroup, steps: list[Step]) -> None:
        self.group = group
        self.steps = steps
        self.num_modules = len(group)
        self._transposed: dict[int, tuple[int, torch.Tensor]] = {}  # step -> (version, W^T)

    @classmethod
    def of(cls, group: StackedGroup) -> StackedActing | None:
        """The fast path for `group`, or None: its class declares no acting layers, or a
        layer is neither `nn.Linear` nor a known elementwise activation."""
        template = group.modules[0]
        layers = acting_layers(template)
        if not layers:
            return None
        name_of = {id(sub): name for name, sub in template.named_modules()}
        steps: list[Step] = []
        for layer in layers:
            if isinstance(layer, nn.Linear):
                prefix = name_of.get(id(layer))
                weight = group.params.get(f"{prefix}.weight")
                if prefix is None or weight is None:
                    return None
                bias = group.params.get(f"{prefix}.bias") if layer.bias is not None else None
                steps.append((weight, bias))
            elif type(layer) in _IN_PLACE:
                steps.append(_IN_PLACE[type(layer)])
            elif type(layer) in _ELEMENTWISE:
                steps.append(layer)
            else:
                return None
        return cls(group, steps)

    def __call__(self, obs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Row r of `obs` through module `index[r]`'s layers (N > 0)."""
        n = index.shape[0]
        x = obs.reshape(n, -1)
        counts = torch.bincount(index, minlength=self.num_modules)
        present: torch.Tensor | None = None  # the modules computed, where not all
        if GATHER_BELOW * n < self.num_modules:
            present = torch.nonzero(counts).squeeze(1)
            index = torch.searchsorted(present, index)
            counts = counts[present]
        width = int(counts.max())
        order = torch.argsort(index, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.empty_like(index)  # each row's position among its module's rows
        slot[order] = torch.arange(n) - starts[index[order]]
        h = x.new_zeros((len(counts), width, x.shape[1]))  # [modules, width, features]
        h[index, slot] = x
        for j, step in enumerate(self.steps):
            if not isinstance(step, tuple):
                h = step(h)
                continue
            weight, bias = step
            m, out_dim, in_dim = weight.shape
            rows = slice(None) if present is None else present  # a view, or copied rows
            bias = None if bias is None else bias[rows]
            # A layer of few outputs multiplies from the left, the others as h @ W^T against
            # the cached contiguous W^T: 1.5-3x faster than W @ h^T for [1,000, 64, 64]
            # weights at 4-32 rows per module.
            if out_dim <= NARROW_OUT:
                h_t = h.transpose(1, 2)
                h = (
                    torch.bmm(weight[rows], h_t)
                    if bias is None
                    else torch.baddbmm(bias.unsqueeze(2), weight[rows], h_t)
                ).transpose(1, 2)
            else:
                w = self._weights_by_input(j, weight).view(m, in_dim, out_dim)[rows]
                h = torch.bmm(h, w) if bias is None else torch.baddbmm(bias.unsqueeze(1), h, w)
        return h[index, slot]

    def _weights_by_input(self, j: int, weight: torch.Tensor) -> torch.Tensor:
        """`[M, out, in]` -> `[M * in, out]` (a copy), remade when the weights changed
        (every call for weights made under inference mode: those have no version)."""
        version = None if weight.is_inference() else weight._version
        cached = self._transposed.get(j)
        if cached is None or version is None or cached[0] != version:
            m, out, in_dim = weight.shape
            copy = weight.detach().transpose(1, 2).reshape(m * in_dim, out).contiguous()
            if version is None:
                return copy
            cached = (version, copy)
            self._transposed[j] = cached
        return cached[1]
