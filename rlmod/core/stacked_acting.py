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
3-4x what the same rows cost at 10 modules. Here each step takes the cheaper of two
layouts by a cost model (constants below):

- **padded** (`[modules, width, features]`, one batched matmul per layer against the
  transposed weight copy below: numpy's where each module's product is small, BLAS_SMALL_WORK,
  else torch's `baddbmm`, a layer of at most NARROW_OUT outputs then multiplying its weights
  from the left): all the group's modules, or only the modules present, their parameters
  gathered first; or all modules padded to fewer rows than the most any has, the rows past
  that through a second pass over only the modules that have them (gathered);
- **sparse** (no padding and no gather): each layer is one CSR x dense product, row r of the
  sparse matrix holding its input at its module's block of columns, against the weights
  laid out `[modules * in, out]` (a transposed copy, kept per weight and refreshed when the
  weights change: tensor versions, which every in-place write bumps, `set_state` included;
  the padded layout reads the same copy as `[modules, in, out]`).

Measured on the issue-17 trace (80 steps of 1,000 agents in 32 envs, Xeon host, one thread,
machine shared): forward per step 13.3 -> 7.1 ms at 1,000 modules, 4.1 -> 2.3 ms at 10 modules.
On the AMD host (benchmarks/investigations/stacked_acting.py, one thread), numpy's matmul and the refitted
cost model took the 1,000-module pass from 3.76 to 3.00 ms, and the capped pass from 3.34 to
3.10 ms in a later run (10 modules: 1.62-1.77 ms, unchanged).
Tested against the plain path in tests/core/test_stacked_acting.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from rlmod.core.fast_tanh import tanh_

if TYPE_CHECKING:
    from rlmod.core.stacked import StackedGroup

# The cost model that picks a layout per step, in microseconds (least squares over 200
# passes of 1,000, 100 and 10 [64, 64] modules in 1, 8 and 32 envs of the issue-17 env, AMD
# host, one thread: `python benchmarks/investigations/stacked_acting.py --fit`): the padded layout costs
# PER_MODULE per module it runs plus PER_SLOT per padded slot, and GATHER more per module to
# gather the parameters of only those present; a capped pass's second pass costs PASS once
# (its extra calls; estimated, not fitted); the sparse layout costs SPARSE once plus PER_ROW
# per row. Four fits gave PER_MODULE 0.42-0.63, PER_SLOT 0.23-0.24, GATHER 1.1-1.3, PER_ROW
# 0.72-0.92 and SPARSE anywhere in 7-544 (a loose intercept). Only the ratios matter: a
# layout is picked, the outputs are the same.
PER_MODULE_US = 0.42
GATHER_US = 1.1
PER_SLOT_US = 0.24
PER_ROW_US = 0.78
SPARSE_US = 250.0
PASS_US = 150.0
# In the sparse layout, a layer with at most this many outputs gathers each row's weights
# instead (CSR x dense is slow with few dense columns: 0.34 vs 0.64 ms, 5,000 rows, 64 -> 2).
NARROW_OUT = 4
# The padded layout multiplies each module's rows by its weights with numpy's matmul where
# one module's product (rows x in x out) is at most this: numpy's bundled OpenBLAS runs such
# a GEMM on one thread (its interface/gemm.c: up to 65,536 x GEMM_MULTITHREAD_THRESHOLD 4)
# with its small-matrix kernels, 2-4x faster than torch's bmm for [1,000, 4-31, 64] x
# [1,000, 64, 64] on the AMD host, one thread (equal at 10 x [2,162, 64]).
BLAS_SMALL_WORK = 2**18

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
        width = int(counts.max())
        present = int(torch.count_nonzero(counts))
        # All modules padded to `cap` rows, the rows past it padded again over only the
        # modules that have more (their parameters gathered); cap = width: one pass.
        caps = torch.arange(1, width + 1)
        more = present - torch.cumsum(torch.bincount(counts, minlength=width + 1)[1:], 0)
        capped = (
            self.num_modules * (PER_MODULE_US + PER_SLOT_US * caps)
            + (more > 0) * PASS_US
            + more * (PER_MODULE_US + GATHER_US + PER_SLOT_US * (width - caps))
        )
        cap = int(torch.argmin(capped)) + 1
        all_modules = float(capped[cap - 1])
        gathered = present * (PER_MODULE_US + GATHER_US + PER_SLOT_US * width)
        if min(all_modules, gathered) > SPARSE_US + PER_ROW_US * n:
            return self._sparse(x.contiguous(), index)
        if gathered < all_modules:
            return self._padded(x, index, counts, width, gather=True)
        return self._padded(x, index, counts, width, gather=False, cap=cap)

    def _padded(
        self,
        x: torch.Tensor,
        index: torch.Tensor,
        counts: torch.Tensor,
        width: int,
        *,
        gather: bool,
        cap: int | None = None,
    ) -> torch.Tensor:
        """`gather`: only the modules present, their parameters gathered first. `cap`
        (without `gather`): each module's rows past its first `cap` through a second,
        gathered pass."""
        rows = None
        if gather:
            rows = torch.nonzero(counts).squeeze(1)  # sorted module positions
            index = torch.searchsorted(rows, index)
            counts = counts[rows]
        n = index.shape[0]
        order = torch.argsort(index, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.empty_like(index)
        slot[order] = torch.arange(n) - starts[index[order]]
        past = keep = rest = None
        if cap is not None and cap < width:
            past = slot >= cap
            rest = self._padded(
                x[past], index[past], (counts - cap).clamp_(min=0), width - cap, gather=True
            )
            keep = ~past
            x, index, slot, width = x[keep], index[keep], slot[keep], cap
        h = x.new_zeros((counts.shape[0], width, x.shape[1]))  # [modules, width, features]
        h[index, slot] = x
        for j, step in enumerate(self.steps):
            if not isinstance(step, tuple):
                h = step(h)
                continue
            weight, bias = step
            m, out_dim, in_dim = weight.shape
            # Small per-module products: numpy's matmul (mixed dtypes excepted: numpy would
            # promote where torch raises). With torch, a layer of few outputs multiplies
            # from the left (h @ W^T with 2 columns is 5x slower), the others as h @ W^T
            # against the cached contiguous W^T (the sparse layout's copy): 1.5-3x faster
            # than W @ h^T for [1,000, 64, 64] weights at 4-32 rows per module.
            small = (
                h.device.type == "cpu"
                and h.dtype == weight.dtype
                and width * in_dim * out_dim <= BLAS_SMALL_WORK
            )
            narrow = out_dim <= NARROW_OUT and not small
            w = weight if narrow else self._weights_by_input(j, weight).view(m, in_dim, out_dim)
            if rows is not None:  # index_select: 5-10x faster than w[rows] here
                w = w.index_select(0, rows)
                bias = None if bias is None else bias.index_select(0, rows)
            if small:
                h = torch.from_numpy(np.matmul(h.numpy(), w.numpy()))
                if bias is not None:
                    h.add_(bias.unsqueeze(1))
            elif narrow:
                h_t = h.transpose(1, 2)
                h = (
                    torch.bmm(w, h_t) if bias is None else torch.baddbmm(bias.unsqueeze(2), w, h_t)
                ).transpose(1, 2)
            else:
                h = torch.bmm(h, w) if bias is None else torch.baddbmm(bias.unsqueeze(1), h, w)
        if rest is None:
            return h[index, slot]
        out = rest.new_empty((n, rest.shape[1]))
        out[past] = rest
        out[keep] = h[index, slot]
        return out

    def _sparse(self, h: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        n = index.shape[0]
        cols_of: dict[int, torch.Tensor] = {}  # in_dim -> each row's CSR columns
        for j, step in enumerate(self.steps):
            if not isinstance(step, tuple):
                h = step(h)
                continue
            weight, bias = step
            in_dim = h.shape[1]
            if weight.shape[1] <= NARROW_OUT:  # each row's few output rows of weights
                h = torch.bmm(weight.index_select(0, index), h.unsqueeze(2)).squeeze(2)
                if bias is not None:
                    h.add_(bias.index_select(0, index))
                continue
            cols = cols_of.get(in_dim)
            if cols is None:  # row r's input sits at its module's block of columns
                cols = (index.unsqueeze(1) * in_dim + torch.arange(in_dim)).reshape(-1)
                cols_of[in_dim] = cols
            crow = torch.arange(0, (n + 1) * in_dim, in_dim)
            with warnings.catch_warnings():  # torch's once-per-process "beta" notice
                warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
                sparse = torch.sparse_csr_tensor(
                    crow,
                    cols,
                    h.reshape(-1),
                    (n, self.num_modules * in_dim),
                    check_invariants=False,
                )
            h = sparse @ self._weights_by_input(j, weight)
            if bias is not None:
                h.add_(bias.index_select(0, index))
        return h

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
