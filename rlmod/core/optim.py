"""Adam on torch's fused Adam kernel: the optimizer every Learner uses per module.

Why not torch.optim.Adam: its constructor imports torch._dynamo (2.0 s on torch 2.13 on
the project's 2-core machine), and its state dict nests Python objects. This one keeps
plain tensors (checkpoints store them as safetensors) and steps all of a module's
parameters in one call of the kernel `torch.optim.Adam(fused=True)` runs on CPU, which
torch has had since 2.4 (the floor pyproject.toml declares). GroupAdam runs the same
kernel for the modules of a stacked group (rlmod.core.stacked), with one AdamSlot per
module giving each its own Adam interface and checkpoint state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, SupportsFloat, TypedDict, cast

import numpy as np
import torch

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.optim_state import CheckedAdamState, check_adam_state
from rlmod.core.types import BoolArray, Components, IntArray, StateDict
from rlmod.errors import CheckpointError
from rlmod.utils.checkpoints import Checkpointable, select_components

FLUSH_EVERY = 100
"""Adam steps between two flushes of tiny moments (see `Adam._flush_tiny_moments`)."""
TINY = 1e-30
"""Moments below this magnitude are set to 0 at each flush."""


def _adam_kernel(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avg: list[torch.Tensor],
    exp_avg_sq: list[torch.Tensor],
    *,
    step: int,
    lr: float,
    betas: tuple[float, float],
    eps: float,
) -> None:
    """One Adam step of `params` in place, Adam and GroupAdam alike: torch's fused Adam
    kernel (what `torch.optim.Adam(fused=True)` runs), one call for all the tensors, 4x
    faster than the seven foreach kernels of the same update. It reads one step count per
    parameter; one shared tensor serves them all (on the parameters' device: CUDA's kernel
    wants it there)."""
    count = torch.tensor(float(step), device=params[0].device)
    torch._fused_adam_(
        params,
        grads,
        exp_avg,
        exp_avg_sq,
        [],
        [count] * len(params),
        lr=lr,
        beta1=betas[0],
        beta2=betas[1],
        weight_decay=0.0,
        eps=eps,
        amsgrad=False,
        maximize=False,
    )


class ParamGroup(TypedDict):
    """`param_groups[i]` of rlmod's optimizers: the learning rate schedules set, and the
    parameters it applies to (as torch.optim's, with only these two keys)."""

    lr: float
    params: list[torch.nn.Parameter]


class GroupLayout(NamedTuple):
    """One named parameter group of an Adam: `size` parameters (consecutive, after the
    previous groups') stepped with their own learning rate (e.g. SAC's policy, qf and
    alpha, as RLlib's separate optimizers with actor_lr, critic_lr and alpha_lr)."""

    name: str
    size: int
    lr: float


class AdamState(TypedDict):
    """An optimizer's `state_dict()`: plain tensors and numbers, per module."""

    step: int
    lr: float
    exp_avg: list[torch.Tensor]
    exp_avg_sq: list[torch.Tensor]


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1) with bias correction.

    `param_groups[0]["lr"]` is read at every step, so schedules set it there, as with
    torch.optim optimizers. `names` (the parameters' names, as `named_parameters()` gives
    them) only name a parameter in the errors of `load_state_dict`.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        names: Iterable[str] | None = None,
        groups: Sequence[GroupLayout] | None = None,
    ) -> None:
        self.params = list(params)
        self.param_names = _names(names, len(self.params))
        self.param_groups: list[ParamGroup] = [{"lr": lr, "params": self.params}]
        self.group_names: list[str] = []
        self._group_of: list[int] | None = None  # param index -> group index (groups only)
        if groups:
            if sum(g.size for g in groups) != len(self.params):
                raise ValueError(
                    f"Adam groups cover {sum(g.size for g in groups)} parameters, "
                    f"not the {len(self.params)} given."
                )
            self.param_groups, self._group_of, start = [], [], 0
            for i, g in enumerate(groups):
                self.param_groups.append(
                    {"lr": g.lr, "params": self.params[start : start + g.size]}
                )
                self._group_of += [i] * g.size
                start += g.size
            self.group_names = [g.name for g in groups]
        self.betas = betas
        self.eps = eps
        self.step_count = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, stepped: BoolArray | None = None) -> None:
        """One Adam step of the parameters that have a gradient; none where `stepped`
        (`[1]` bool, a step unit's mask: rlmod.core.update_guard) is False."""
        if stepped is not None and not stepped[0]:
            return
        with_grad = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not with_grad:
            return
        params: list[torch.Tensor] = [self.params[i] for i in with_grad]
        grads: list[torch.Tensor] = [g for i in with_grad if (g := self.params[i].grad) is not None]
        self.step_count += 1
        if self._group_of is None:
            parts = [(with_grad, params, grads, self.param_groups[0]["lr"])]
        else:  # one kernel call per group, each with its own lr
            parts = []
            for gi, group in enumerate(self.param_groups):
                pos = [k for k, i in enumerate(with_grad) if self._group_of[i] == gi]
                if pos:
                    parts.append(
                        (
                            [with_grad[k] for k in pos],
                            [params[k] for k in pos],
                            [grads[k] for k in pos],
                            group["lr"],
                        )
                    )
        for idx, ps, gs, lr in parts:
            _adam_kernel(
                ps,
                gs,
                [self.exp_avg[i] for i in idx],
                [self.exp_avg_sq[i] for i in idx],
                step=self.step_count,
                lr=lr,
                betas=self.betas,
                eps=self.eps,
            )
        if self.step_count % FLUSH_EVERY == 0:
            self._flush_tiny_moments()

    def _flush_tiny_moments(self) -> None:
        """Sets moments below `TINY` in magnitude to 0, before they become denormal floats.

        The first moment of a parameter whose gradient stays 0 (a dead ReLU unit: most of
        the weights of a 256x256 Q-network on CartPole) shrinks by beta1 per step through
        float32's denormal range (below 1.2e-38), where x86 CPUs compute about 10x slower:
        the fused kernel took 0.55 ms instead of 0.05 ms per step, a fifth of a DQN gradient
        step. A moment below 1e-30 moves its parameter by less than lr * 1e-22 per step.
        Every `FLUSH_EVERY` steps suffices for beta1 >= 0.85: in 100 steps such a value
        shrinks by at most 0.85^100 (9e-8), which keeps it above the denormal range.
        """
        for t in self.exp_avg + self.exp_avg_sq:
            t.masked_fill_(t.abs() < TINY, 0.0)

    def state_dict(self) -> AdamState:
        """Plain tensors and numbers only."""
        return {
            "step": self.step_count,
            "lr": self.param_groups[0]["lr"],
            "exp_avg": [t.clone() for t in self.exp_avg],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
        }

    def load_state_dict(self, state: AdamState) -> None:
        """Loads a `state_dict()`, checked first (`check_adam_state`): CheckpointError
        naming the field and parameter, and nothing changed, if it does not fit."""
        self.load_checked(check_adam_state(state, self.params, self.param_names))

    def load_checked(self, checked: CheckedAdamState) -> None:
        """Loads a state that `check_adam_state` returned for this optimizer's parameters."""
        self.step_count = checked.step
        self.param_groups[0]["lr"] = checked.lr
        with torch.no_grad():
            for dst, src in zip(self.exp_avg + self.exp_avg_sq, checked.moments, strict=True):
                dst.copy_(src)


def _names(names: Iterable[str] | None, num: int) -> list[str] | None:
    """An optimizer's parameter names (for errors), checked against its parameter count."""
    if names is None:
        return None
    out = list(names)
    if len(out) != num:
        raise ValueError(f"Got {len(out)} parameter names for {num} parameters.")
    return out


def grad_norm(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The global L2 norm of the gradients (0 with none), without changing them, computed
    as `torch.nn.utils.clip_grad_norm_` does."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0, device=params[0].device if params else None)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


class GroupAdam:
    """One Adam per module for the modules of a stacked group (rlmod.core.stacked), run as
    few calls of the fused kernel as their settings allow.

    Each parameter is `[M, ...]` (one row per module); each module has its own learning
    rate and step count, as with one `Adam` per module. `step(stepped)` updates the rows
    of the modules marked in `stepped` (a module with no rows or a non-finite minibatch is
    left bit-identical); modules next to each other with the same (lr, step count) share
    one kernel call on contiguous row ranges, which are views, so the update is exactly
    what per-module Adams compute: one call for a whole group in the usual case, a few
    more for a handful of modules with an `lr` override.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        *,
        lrs: Iterable[float],
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params: list[torch.Tensor] = list(params)
        self.lrs = np.asarray(list(lrs), dtype=np.float64)
        num = len(self.lrs)
        if any(p.shape[0] != num for p in self.params):
            raise ValueError(
                f"GroupAdam got {num} learning rates for parameters of "
                f"{sorted({p.shape[0] for p in self.params})} rows."
            )
        self.steps = np.zeros(num, dtype=np.int64)
        self.betas = betas
        self.eps = eps
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.grad_pieces: Callable[[], list[list[tuple[int, torch.Tensor]]]] | None = None
        """Where `step` finds the gradients when not given them (default: `.grad`)."""

    def __len__(self) -> int:
        return len(self.lrs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(
        self, stepped: BoolArray, grads: list[list[tuple[int, torch.Tensor]]] | None = None
    ) -> None:
        """One Adam step of the modules where `stepped` ([M] bool) is True.

        `grads` (default: `grad_pieces()`, else each parameter's `.grad`): per parameter,
        its gradient as pieces `(first row, tensor)` that cover its rows in order, e.g.
        one per row bucket as a Learner's backward pass left them (no copy into one tensor).
        """
        stepped = np.asarray(stepped, dtype=bool)
        if grads is None and self.grad_pieces is not None:
            grads = self.grad_pieces()
        if grads is None:
            grads = [[(0, g)] if (g := p.grad) is not None else [] for p in self.params]
        with_grad = [i for i, pieces in enumerate(grads) if pieces]
        if not with_grad or not stepped.any():
            return
        # runs of neighbours with equal (stepped, lr, step): one kernel call per stepped run
        change = (
            (stepped[1:] != stepped[:-1])
            | (self.lrs[1:] != self.lrs[:-1])
            | (self.steps[1:] != self.steps[:-1])
        )
        bounds = [0, *(np.flatnonzero(change) + 1).tolist(), len(stepped)]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            if not stepped[a]:
                continue
            params, grad_parts, m, v = [], [], [], []
            for i in with_grad:
                for first, g in grads[i]:
                    lo, hi = max(a, first), min(b, first + g.shape[0])
                    if lo < hi:
                        params.append(self.params[i][lo:hi])
                        grad_parts.append(g[lo - first : hi - first])
                        m.append(self.exp_avg[i][lo:hi])
                        v.append(self.exp_avg_sq[i][lo:hi])
            _adam_kernel(
                params,
                grad_parts,
                m,
                v,
                step=int(self.steps[a]) + 1,
                lr=float(self.lrs[a]),
                betas=self.betas,
                eps=self.eps,
            )
        self.steps[stepped] += 1
        due = np.flatnonzero(stepped & (self.steps % FLUSH_EVERY == 0))
        if len(due):  # as Adam._flush_tiny_moments, for the modules at their flush step
            rows = torch.from_numpy(due).to(self.params[0].device)
            for t in self.exp_avg + self.exp_avg_sq:
                part = t[rows]
                t[rows] = part.masked_fill(part.abs() < TINY, 0.0)

    def rows(self, order: IntArray, params: list[torch.Tensor]) -> GroupAdam:
        """This optimizer's modules `order` (positions, in that order) as a GroupAdam of
        their own over `params` (`[len(order), ...]` each, those modules' parameter rows
        in that order): their learning rates, step counts and moments, so that stepping
        it steps those modules exactly as this one would. The moments are this one's own
        tensors where `order` is every position in order, else gathered copies; write
        them back with `put_rows`.

        A Learner trains a group in an order of its own for a whole update (its modules
        sorted by rows, so that row buckets are contiguous slices: rlmod.core.learner_stacks).
        """
        if len(params) != len(self.params):
            raise ValueError(
                f"GroupAdam.rows got {len(params)} parameters for a group of {len(self.params)}."
            )
        work = GroupAdam.__new__(GroupAdam)
        work.params = list(params)
        work.lrs = self.lrs[order].copy()
        work.steps = self.steps[order].copy()
        work.betas, work.eps = self.betas, self.eps
        if is_identity_order(order, len(self)):
            work.exp_avg, work.exp_avg_sq = self.exp_avg, self.exp_avg_sq
        else:
            rows = torch.from_numpy(np.asarray(order, dtype=np.int64)).to(self.params[0].device)
            work.exp_avg = [t[rows] for t in self.exp_avg]
            work.exp_avg_sq = [t[rows] for t in self.exp_avg_sq]
        return work

    def put_rows(self, work: GroupAdam, order: IntArray) -> None:
        """Writes the state of `work` (made by `rows(order)`) back into modules `order`:
        step counts always, moments where they were copies. Learning rates are not
        written back: they are set per update, before `rows`."""
        self.steps[order] = work.steps
        if work.exp_avg is self.exp_avg:
            return
        rows = torch.from_numpy(np.asarray(order, dtype=np.int64)).to(self.params[0].device)
        with torch.no_grad():
            for dst, src in zip(
                self.exp_avg + self.exp_avg_sq, work.exp_avg + work.exp_avg_sq, strict=True
            ):
                dst.index_copy_(0, rows, src)

    def slot(
        self,
        index: int,
        params: Iterable[torch.nn.Parameter],
        *,
        names: Iterable[str] | None = None,
    ) -> AdamSlot:
        """Module `index`'s share, with `Adam`'s interface; `params` are the module's own
        (view) parameters, in the order of this optimizer's (`names`: theirs, for errors)."""
        return AdamSlot(self, index, list(params), names=names)


class _SlotParamGroup(dict[str, object]):
    """`param_groups[0]` of an AdamSlot: reading or setting ["lr"] goes to the group."""

    def __init__(self, optimizer: GroupAdam, index: int, params: list[torch.nn.Parameter]) -> None:
        super().__init__(params=params)
        self._optimizer, self._index = optimizer, index

    def __getitem__(self, key: str) -> object:
        if key == "lr":
            return float(self._optimizer.lrs[self._index])
        return super().__getitem__(key)

    def __setitem__(self, key: str, value: object) -> None:
        if key == "lr":
            self._optimizer.lrs[self._index] = float(cast(SupportsFloat, value))
        else:
            super().__setitem__(key, value)


class AdamSlot:
    """One module's Adam inside a GroupAdam: the same `param_groups[0]["lr"]`,
    `state_dict()` / `load_state_dict()` (so checkpoints stay per module and load into
    either kind), `exp_avg`, `exp_avg_sq` and `step_count` as that module's own `Adam`."""

    def __init__(
        self,
        optimizer: GroupAdam,
        index: int,
        params: list[torch.nn.Parameter],
        *,
        names: Iterable[str] | None = None,
    ) -> None:
        if len(params) != len(optimizer.params):
            raise ValueError(
                f"AdamSlot got {len(params)} parameters for a group of {len(optimizer.params)}."
            )
        self.group = optimizer
        self.index = index
        self.params = params
        self.param_names = _names(names, len(params))
        self.param_groups: list[ParamGroup] = [
            cast(ParamGroup, _SlotParamGroup(optimizer, index, params))
        ]

    @property
    def step_count(self) -> int:
        return int(self.group.steps[self.index])

    @property
    def exp_avg(self) -> list[torch.Tensor]:
        return [t[self.index] for t in self.group.exp_avg]

    @property
    def exp_avg_sq(self) -> list[torch.Tensor]:
        return [t[self.index] for t in self.group.exp_avg_sq]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Steps this module alone, with the gradient rows of the group's parameters."""
        stepped = np.zeros(len(self.group), dtype=bool)
        stepped[self.index] = True
        self.group.step(stepped)

    def state_dict(self) -> AdamState:
        return {
            "step": self.step_count,
            "lr": self.param_groups[0]["lr"],
            "exp_avg": [t.clone() for t in self.exp_avg],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
        }

    def load_state_dict(self, state: AdamState) -> None:
        """As `Adam.load_state_dict`: checked first, by the same `check_adam_state`."""
        self.load_checked(check_adam_state(state, self.params, self.param_names))

    def load_checked(self, checked: CheckedAdamState) -> None:
        """Loads a state that `check_adam_state` returned for this module's parameters."""
        self.group.steps[self.index] = checked.step
        self.param_groups[0]["lr"] = checked.lr
        with torch.no_grad():
            for dst, src in zip(self.exp_avg + self.exp_avg_sq, checked.moments, strict=True):
                dst.copy_(src)


def is_identity_order(order: IntArray, size: int) -> bool:
    """Whether `order` lists positions 0..size-1 in order."""
    return len(order) == size and bool(np.array_equal(order, np.arange(size)))


class OptimizerStates(Checkpointable):
    """A Learner's optimizers as one checkpoint component (`learner/optimizer/`): moments
    and step counts of every module, keyed by module ID, in one safetensors file."""

    def __init__(self, optimizers: Mapping[ModuleID, Adam | AdamSlot]) -> None:
        self.optimizers = optimizers

    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        return {
            m: cast(StateDict, opt.state_dict())
            for m, opt in self.optimizers.items()
            if select_components(components, not_components, m)[0]
        }

    def set_state(self, state: StateDict) -> None:
        """Loads the optimizers of the modules named in `state` (modules this Learner does
        not train are skipped), all or none: every module's state is checked
        (`check_adam_state`) before any is loaded, and a CheckpointError names the module,
        the field and the parameter."""
        if not isinstance(state, Mapping):
            raise CheckpointError(
                f"Optimizer states are a {type(state).__name__}, not a dict "
                "keyed by module ID; the checkpoint is corrupt or was edited."
            )
        checked = {
            mid: check_adam_state(
                opt_state, opt.params, opt.param_names, where=f"Optimizer state of module {mid!r}"
            )
            for mid, opt_state in state.items()
            if (opt := self.optimizers.get(mid)) is not None
        }
        for mid, ready in checked.items():
            self.optimizers[mid].load_checked(ready)
