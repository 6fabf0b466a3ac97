"""StackedGroup: modules of one architecture run as one module with a leading module dim.

Used by Learners (one loss, backward and optimizer step per group) and multi-agent
EnvRunners (one forward per group per step); `find_stack_groups` decides which modules
of a MultiRLModule share an architecture.

Storage: each of a group's parameters is one tensor `[M, ...]` (M = modules in the group),
and every module's own parameter becomes a view into row `i` of it. The per-module API
(`get_state`/`set_state`, weight sync, checkpoints, `algo.get_module("p17")`) therefore
reads and writes the very memory the stacked forward uses: the two can never disagree.

Execution: `torch.func.vmap` runs the module class's own methods with the stacked tensors
swapped in (as `torch.func.functional_call` does), so a stacked forward computes what each
module's forward computes (measured at 1,000 PPO modules of [64, 64], one row each, on the
project's Xeon host: 2.9 ms against 43 ms for 1,000 separate forwards; a hand-written
`torch.baddbmm` MLP takes 1.4 ms but would duplicate every stackable class's forward).
EnvRunners' acting forwards (no autograd, few rows per module) take batched matmuls instead
where the class declares its acting layers: rlmod/core/stacked_acting.py.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, TypeAlias, TypeVar, cast, overload

import numpy as np
import torch
from torch import nn
from torch.func import vmap

from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.rl_module import RLModule, TensorDict
from rlmod.core.stacked_acting import StackedActing
from rlmod.core.types import ModelConfig
from rlmod.utils.spaces import space_to_dict

_T = TypeVar("_T")
ForwardMethod: TypeAlias = Literal["forward_train", "forward_exploration", "forward_inference"]
"""The module methods `call_padded` and `call_rows` run that return a TensorDict."""
StackKey: TypeAlias = tuple[type[RLModule], bool, str, str, str]
"""`stack_key`: class, inference-only flag, spaces and model config (as JSON text)."""

VALUES_CHUNK_SLOTS = 2**15
"""`StackedGroup.compute_values` without autograd (GAE over a whole batch) runs modules in
slices of at most this many padded rows: 1,000 modules of [64, 64] with 1,554 rows each
(obs and next obs: 3.1M padded rows) made [1000, 3108, 64] activations of 795 MB, whose
fresh pages cost more than the matmuls (2.7 s for the value pass of a 4,000-env-step
batch on the project's Xeon host; in 8 MB slices: see benchmarks/RESULTS.md, issue 17)."""

MIN_STACK_SIZE = 3
"""The fewest modules `stack_modules` stacks (Learners and EnvRunners): below it running
each module alone is as fast or faster. MultiAgentCartPole, 2 agents per [256, 256]
module, train() of PPO's defaults, stacked / unstacked seconds (2-core Xeon, 2026-12-07,
/tmp probe; iterations 1 and 2): 2 modules 7.6, 7.2 / 7.1, 6.9; 3: 8.5, 8.3 / 8.9, 8.5;
4: 8.1, 7.8 / 11.3, 11.2; 8: 10.3, 10.2 / 19.2, 18.5. Beside two CPU-bound processes:
3 modules 12.8, 13.1 / 12.5, 12.1; 4: 15.9, 15.9 / 16.2, 16.1; 8: 20.1, 20.1 / 26.1, 26.9."""

# module -> the group it was last stacked into (weak both ways: no attribute on the module,
# so modules stay picklable and copyable, and a dropped group or module is freed).
_GROUP_OF: weakref.WeakKeyDictionary[nn.Module, weakref.ref[StackedGroup]] = (
    weakref.WeakKeyDictionary()
)


def supports_stacking(module: RLModule) -> bool:
    """Whether `module`'s class declares `supports_stacking = True` itself.

    A subclass does not inherit the flag: it may change the forward in ways vmap cannot
    run (data-dependent control flow, randomness, in-place state), so it opts in anew.
    """
    return bool(type(module).__dict__.get("supports_stacking", False))


class RowLayout:
    """Where each of N rows sits in the padded `[M, K, ...]` layout of a group.

    `index[r]` is row r's module position in the group, `slot[r]` its place among that
    module's rows (in row order); K is the most rows any module has.
    """

    def __init__(self, index: torch.Tensor, num_modules: int) -> None:
        self.index = index.long()
        self.num_modules = num_modules
        self.counts = torch.bincount(self.index, minlength=num_modules)  # [M]
        n = self.index.shape[0]
        self.width = int(self.counts.max()) if n else 0
        order = torch.argsort(self.index, stable=True)
        starts = torch.cumsum(self.counts, 0) - self.counts
        slot = torch.empty_like(self.index)
        slot[order] = torch.arange(n, device=self.index.device) - starts[self.index[order]]
        self.slot = slot

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """`[N, ...]` rows -> `[M, K, ...]`, zeros where a module has fewer than K rows."""
        out = x.new_zeros((self.num_modules, self.width, *x.shape[1:]))
        out[self.index, self.slot] = x
        return out

    def unpad(self, y: torch.Tensor) -> torch.Tensor:
        """`[M, K, ...]` -> `[N, ...]` in the original row order."""
        return y[self.index, self.slot]


class StackedGroup:
    """Modules of one class, spaces and model config, held and run as one.

    Attributes:
        module_ids: The modules' IDs; a module's position here is its index in the group.
        modules: The modules themselves (their parameters are views into `params`).
        params: Parameter name -> stacked `nn.Parameter` `[M, *shape]`, owning the storage.

    Example:
        >>> import gymnasium as gym, torch
        >>> from rlmod.core import MultiRLModule
        >>> from rlmod.algorithms.ppo import DefaultPPORLModule
        >>> box, two = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
        >>> multi = MultiRLModule({f"p{i}": DefaultPPORLModule(
        ...     observation_space=box, action_space=two) for i in range(3)})
        >>> [group] = find_stack_groups(multi)
        >>> obs, index = torch.zeros(5, 4), torch.tensor([0, 2, 2, 1, 0])
        >>> group.forward_exploration(obs, index)["action_dist_inputs"].shape
        torch.Size([5, 2])
    """

    def __init__(self, module_ids: Sequence[ModuleID], modules: Sequence[RLModule]) -> None:
        if len(module_ids) != len(modules) or not modules:
            raise ValueError("StackedGroup needs one module per module ID, at least one.")
        self.module_ids: list[ModuleID] = list(module_ids)
        self.modules: list[RLModule] = list(modules)
        self.position: dict[ModuleID, int] = {m: i for i, m in enumerate(self.module_ids)}
        self._valid: bool = True
        template = self.modules[0]
        # One walk per module: (owner submodule, attribute, tensor) for every parameter
        # and buffer, in the template's order.
        slots = [_tensor_slots(m) for m in self.modules]
        names = [name for name, *_ in slots[0]]
        for m, own in zip(self.modules, slots, strict=True):
            if [name for name, *_ in own] != names:
                raise ValueError(
                    f"Cannot stack {type(m).__name__} modules whose parameters differ by name "
                    f"({names[:3]}... vs {[n for n, *_ in own][:3]}...); its class says "
                    "supports_stacking = True, so its spaces and model_config must fix them."
                )
        self.params: dict[str, nn.Parameter] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for j, (name, _, _, is_buffer, first) in enumerate(slots[0]):
                try:
                    data = torch.stack([own[j][4].detach() for own in slots])
                except RuntimeError as e:
                    raise ValueError(
                        f"Cannot stack {name!r} of {type(template).__name__} modules "
                        f"{self.module_ids[:3]}...: {e}"
                    ) from e
                if is_buffer:
                    self.buffers[name] = data
                else:
                    self.params[name] = nn.Parameter(data, requires_grad=first.requires_grad)
                for i, own in enumerate(slots):
                    _, owner, attr, _, old = own[j]
                    if is_buffer:
                        owner._buffers[attr] = data[i]
                    else:
                        owner._parameters[attr] = nn.Parameter(
                            data[i], requires_grad=old.requires_grad
                        )
        for m in self.modules:
            ref = _GROUP_OF.get(m)
            previous = ref() if ref is not None else None
            if previous is not None and previous is not self:
                previous._valid = False  # its modules no longer view its storage
            _GROUP_OF[m] = weakref.ref(self)
        # Where the template's tensors live, to swap in the stacked ones while it runs.
        # torch's own dicts of the template, into which `call_padded` writes plain tensors.
        self._slots: list[tuple[dict[str, torch.Tensor], str]] = [
            (
                cast("dict[str, torch.Tensor]", owner._buffers if is_buffer else owner._parameters),
                attr,
            )
            for _, owner, attr, is_buffer, _ in _tensor_slots(template)
        ]
        self._stacked = [*self.params.values(), *self.buffers.values()]
        self._module_slots = [
            [
                (owner._buffers if is_buffer else owner._parameters, attr)
                for _, owner, attr, is_buffer, _ in own
            ]
            for own in slots
        ]
        self._acting: StackedActing | bool | None = None  # built on first acting call

    def __len__(self) -> int:
        return len(self.module_ids)

    def __repr__(self) -> str:
        shown = self.module_ids[:3] + (["..."] if len(self) > 3 else [])
        return f"StackedGroup({type(self.modules[0]).__name__}, {len(self)} modules: {shown})"

    # ------------------------------------------------------------------ integrity
    def is_intact(self) -> bool:
        """Whether every module's parameters and buffers are still views into this group's
        storage (false after the module was restacked, moved to another device, or given
        new parameter objects, e.g. `load_state_dict(assign=True)`)."""
        if not self._valid:
            return False
        for j, stacked in enumerate(self._stacked):
            base, step = stacked.data_ptr(), stacked[0].numel() * stacked.element_size()
            for i, own in enumerate(self._module_slots):
                d, attr = own[j]
                t = d.get(attr)
                if t is None or t.data_ptr() != base + i * step:
                    return False
        return True

    def _check(self) -> None:
        if not self._valid:
            raise RuntimeError(
                f"{self!r} was replaced: its modules were stacked again into another group; "
                "use the group find_stack_groups returned last."
            )

    # ------------------------------------------------------------------ forwards
    @overload
    def call_padded(
        self,
        method: Literal["compute_values"],
        batch: TensorDict,
        *args: torch.Tensor,
        params: Mapping[str, torch.Tensor] | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor: ...

    @overload
    def call_padded(
        self,
        method: ForwardMethod,
        batch: TensorDict,
        *args: torch.Tensor,
        params: Mapping[str, torch.Tensor] | None = None,
        rows: torch.Tensor | None = None,
    ) -> TensorDict: ...

    def call_padded(
        self,
        method: str,
        batch: TensorDict,
        *args: torch.Tensor,
        params: Mapping[str, torch.Tensor] | None = None,
        rows: torch.Tensor | None = None,
    ) -> TensorDict | torch.Tensor:
        """`module.<method>(batch, *args)` of every module at once, on padded inputs.

        Args:
            method: Name of a method of the module class, e.g. "forward_train" or
                "compute_values".
            batch: Columns `[M, K, ...]`: module i's rows are `batch[col][i]`.
            args: More tensor arguments `[M, K, ...]`, passed positionally.
            params: Stacked parameters to use instead of `self.params` (names as in the
                module), e.g. a subset of modules' rows; same leading size for all. With
                buffers: all parameters, then all buffers (or pass `rows` instead).
            rows: Run only these modules (positions, `[M']`): their parameter and buffer
                rows are gathered (differentiably) and `batch` holds `M'` modules.

        Returns:
            What the method returns, with a leading module dim on every tensor.
        """
        self._check()
        if rows is not None:
            state = [t[rows] for t in self._stacked]
        elif params is not None:
            if self.buffers and len(params) != len(self._stacked):
                raise ValueError(
                    "call_padded(params=...) of modules with buffers: pass "
                    "rows=, or the parameters followed by the buffers."
                )
            state = list(params.values())
        else:
            state = self._stacked
        template = self.modules[0]

        def one(
            st: list[torch.Tensor], b: TensorDict, *a: torch.Tensor
        ) -> TensorDict | torch.Tensor:
            # What torch.func.functional_call does, without its per-call walk over the
            # module tree (a millisecond per call): the template runs with module i's
            # tensors in place of its own, which are put back after.
            saved = [d[attr] for d, attr in self._slots]
            try:
                for (d, attr), t in zip(self._slots, st, strict=True):
                    d[attr] = t
                return getattr(template, method)(b, *a)
            finally:
                for (d, attr), t in zip(self._slots, saved, strict=True):
                    d[attr] = t

        return vmap(one)(state, batch, *args)

    def call_rows(
        self, method: ForwardMethod, batch: TensorDict, index: torch.Tensor
    ) -> TensorDict:
        """`module.<method>(rows)` for rows of several modules: row r goes through module
        `index[r]` of the group; returns `[N, ...]` outputs in row order.

        Only the modules that have rows run: with fewer than all of them present their
        parameters are gathered first, so the cost follows the rows, not the group size.
        """
        self._check()
        n = index.shape[0]
        if n == 0:  # right keys and trailing shapes from one module's forward
            return getattr(self.modules[0], method)(batch)
        present = torch.unique(index)
        rows = None
        if present.shape[0] < len(self):
            rows = present
            index = torch.searchsorted(present, index)
        layout = RowLayout(index, present.shape[0])
        padded = {k: layout.pad(v) for k, v in batch.items()}
        out = self.call_padded(method, padded, rows=rows)
        return {k: layout.unpad(v) for k, v in out.items()}

    def forward_exploration(
        self, obs: torch.Tensor | TensorDict, index: torch.Tensor
    ) -> TensorDict:
        """Per row, what `modules[index[r]].forward_exploration` gives for that row.

        Args:
            obs: `[N, ...]` observations (or a dict of `[N, ...]` columns).
            index: `[N]` long: each row's module position in `module_ids`.
        """
        return self._act("forward_exploration", obs, index)

    def forward_inference(self, obs: torch.Tensor | TensorDict, index: torch.Tensor) -> TensorDict:
        """Per row, what `modules[index[r]].forward_inference` gives for that row."""
        return self._act("forward_inference", obs, index)

    def _act(
        self, method: ForwardMethod, obs: torch.Tensor | TensorDict, index: torch.Tensor
    ) -> TensorDict:
        """Acting without autograd (EnvRunners) goes through the group's StackedActing
        where its class declares acting layers; anything else through `call_rows`."""
        if isinstance(obs, torch.Tensor) and index.shape[0] and not torch.is_grad_enabled():
            if self._acting is None:
                self._acting = StackedActing.of(self) or False
            if isinstance(self._acting, StackedActing):
                self._check()
                return {Columns.ACTION_DIST_INPUTS: self._acting(obs, index)}
        return self.call_rows(method, _as_batch(obs), index)

    def compute_values(self, obs: torch.Tensor | TensorDict, index: torch.Tensor) -> torch.Tensor:
        """Per row, `modules[index[r]].compute_values(row)` (`[N]`), for modules with a
        value function (ValueFunctionAPI): GAE over a whole group at once."""
        self._check()
        batch = _as_batch(obs)
        n = index.shape[0]
        if n == 0:
            values: torch.Tensor = getattr(self.modules[0], "compute_values")(batch)  # noqa: B009
            return values
        index = index.long()
        counts = torch.bincount(index, minlength=len(self))
        if torch.is_grad_enabled() or len(self) * int(counts.max()) <= VALUES_CHUNK_SLOTS:
            layout = RowLayout(index, len(self))
            padded = {k: layout.pad(v) for k, v in batch.items()}
            return layout.unpad(self.call_padded("compute_values", padded))  # type: ignore[no-any-return]
        return self._values_in_chunks(batch, index, counts.tolist())

    def _values_in_chunks(
        self, batch: TensorDict, index: torch.Tensor, counts: list[int]
    ) -> torch.Tensor:
        """`compute_values` without autograd, over slices of modules of at most
        VALUES_CHUNK_SLOTS padded rows each (each slice padded to its own widest module,
        its parameters views): the activations stay small (see VALUES_CHUNK_SLOTS);
        `counts[i]`: module i's rows."""
        order = torch.argsort(index, stable=True)
        starts = np.cumsum([0, *counts]).tolist()  # module i's rows: order[starts[i]:starts[i+1]]
        out: torch.Tensor | None = None
        a = 0
        while a < len(self):
            b, widest = a + 1, counts[a]
            while b < len(self) and max(widest, counts[b]) * (b + 1 - a) <= VALUES_CHUNK_SLOTS:
                widest = max(widest, counts[b])
                b += 1
            rows = order[starts[a] : starts[b]]
            if rows.shape[0]:
                layout = RowLayout(index[rows] - a, b - a)
                padded = {k: layout.pad(v[rows]) for k, v in batch.items()}
                params = {str(j): t[a:b] for j, t in enumerate(self._stacked)}
                values = layout.unpad(self.call_padded("compute_values", padded, params=params))
                if out is None:
                    out = values.new_empty((index.shape[0], *values.shape[1:]))
                out[rows] = values
            a = b
        assert out is not None
        return out


def _as_batch(obs: torch.Tensor | TensorDict) -> TensorDict:
    return {"obs": obs} if isinstance(obs, torch.Tensor) else dict(obs)


def _tensor_slots(module: nn.Module) -> list[tuple[str, nn.Module, str, bool, torch.Tensor]]:
    """(full name, owning submodule, attribute, is_buffer, tensor) of every parameter and
    buffer of `module`, parameters first, in `named_parameters()` order."""
    params, buffers = [], []
    for prefix, sub in module.named_modules():
        head = f"{prefix}." if prefix else ""
        for attr, p in sub._parameters.items():
            if p is not None:
                params.append((head + attr, sub, attr, False, p))
        for attr, b in sub._buffers.items():
            if b is not None and attr not in sub._non_persistent_buffers_set:
                buffers.append((head + attr, sub, attr, True, b))
    return params + buffers


def stack_key(module: RLModule, memo: dict[int, str] | None = None) -> StackKey | None:
    """What must match for two modules to be stacked: class, inference-only flag, spaces
    and model config (which fix the parameter shapes of a class that supports stacking);
    None where the module cannot be stacked (a stateful one, e.g. with `use_lstm`, never
    is: its forward carries a recurrent state per row)."""
    if not supports_stacking(module) or module.learner_only or module.is_stateful():
        return None
    memo = {} if memo is None else memo

    def text(obj: _T, convert: Callable[[_T], object]) -> str:
        key = id(obj)
        if key not in memo:
            memo[key] = json.dumps(convert(obj), sort_keys=True, default=repr)
        return memo[key]

    return (
        type(module),
        module.inference_only,
        text(module.observation_space, space_to_dict),
        text(module.action_space, space_to_dict),
        text(module.model_config, _model_config_dict),
    )


def _model_config_dict(config: ModelConfig | None) -> dict[str, object]:
    import dataclasses

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    return dict(cast("Mapping[str, object] | None", config) or {})


def find_stack_groups(
    multi_module: MultiRLModule | Mapping[ModuleID, RLModule],
    module_ids: Iterable[ModuleID] | None = None,
    *,
    min_size: int = 2,
) -> list[StackedGroup]:
    """Stacks the modules of `multi_module` (or of `module_ids` among them) that share
    an architecture, and returns the groups.

    Modules are grouped when their classes declare `supports_stacking = True` (the class
    itself, not a base) and their class, `inference_only` flag, spaces, model config
    (after per-module overrides: each module's own) and parameter shapes all match.
    Learner-only modules and other classes are left alone, as are groups smaller than
    `min_size`. Module order within a group follows `multi_module`'s order.

    Stacking re-points every grouped module's parameters to views into the group's
    stacked storage. Modules that already are in an intact group keep it: that group is
    returned (whole, also where only some of its modules were asked for), and only the
    modules not stacked yet are grouped anew, so calling this twice returns the same
    group objects and never breaks a group someone else runs (a Learner's). To regroup
    on purpose, build `StackedGroup(ids, modules)` directly; the old group then refuses
    to run.
    """
    items = multi_module.items()
    wanted = None if module_ids is None else set(module_ids)
    memo: dict[int, str] = {}
    by_key: dict[StackKey, list[tuple[ModuleID, RLModule]]] = {}
    for mid, module in items:
        if wanted is not None and mid not in wanted:
            continue
        key = stack_key(module, memo)
        if key is not None:
            by_key.setdefault(key, []).append((mid, module))
    groups: list[StackedGroup] = []
    for members in by_key.values():
        fresh = []
        for mid, module in members:
            existing = stacked_group_of(module)
            if existing is not None and existing.is_intact():
                if all(g is not existing for g in groups):
                    groups.append(existing)
            else:
                fresh.append((mid, module))
        if len(fresh) >= max(min_size, 1):
            groups.append(StackedGroup([m for m, _ in fresh], [mod for _, mod in fresh]))
    return groups


def stacked_group_of(module: RLModule) -> StackedGroup | None:
    """The intact group `module` was last stacked into, or None."""
    ref = _GROUP_OF.get(module)
    group = ref() if ref is not None else None
    return group if group is not None and group._valid else None
