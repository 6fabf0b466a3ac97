"""Numpy copies of a MultiRLModule's weights, one copy per stacked parameter.

`Learner.get_weights` (weight sync, `LearnerGroup.get_weights`) hands out numpy copies of
its modules' tensors. Modules of an intact StackedGroup (rlmod.core.stacked) hold their
parameters as views into one `[M, ...]` tensor per parameter, so their weights are copied
with one copy of that tensor and handed out as its rows: at 1,000 modules that is a few
copies instead of 6,000 (and no 1,000 `state_dict()` walks). What the caller gets is the
same: per module, its state-dict names (only the inference-only ones if asked), in order,
to arrays that no later update changes.

Pickled (a weight sync's `ray.put`), the result travels as those stacked arrays, one
buffer per stacked parameter, and is unpickled into a plain dict whose modules' arrays are
rows of them: at 1,000 [256, 256] modules 6 buffers instead of 6,000 (Ray serialises and
maps each out-of-band buffer separately).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.stacked import StackedGroup, stacked_group_of
from rlmod.core.types import Array


def numpy_weights(
    module: MultiRLModule,
    module_ids: Sequence[ModuleID],
    *,
    inference_only: bool = False,
    copy: bool = True,
) -> dict[ModuleID, dict[str, Array]]:
    """What `{m: {k: v.numpy().copy() for k, v in module[m].get_state(inference_only=...)
    .items()} for m in module_ids}` gives (same names, order and values), with the modules
    of a stacked group copied as one, where at least half of the group is asked for.

    `copy=False` hands out views of the module's own (CPU) tensors instead, for a caller
    that copies them at once itself (`ray.put` of a weight sync: a copy of 270 MB fewer
    on the driver at 1,000 [256, 256] modules); they change with the next update."""
    group_of = {mid: stacked_group_of(module[mid]) for mid in module_ids}
    asked = Counter(id(g) for g in group_of.values() if g is not None)
    copies: dict[int, tuple[list[str], dict[str, Array]] | None] = {}
    out = ModuleWeights()
    for mid in module_ids:
        group = group_of[mid]
        if group is not None and 2 * asked[id(group)] >= len(group):
            if id(group) not in copies:
                made = copies[id(group)] = _group_copy(group, module[mid], inference_only, copy)
                if made is not None and asked[id(group)] == len(group):  # pickled whole
                    out.stacked[id(group)] = (list(group.module_ids), *made)
            group_copy = copies[id(group)]
            if group_copy is not None:
                names, arrays = group_copy
                row = group.position[mid]
                out[mid] = {name: arrays[name][row] for name in names}
                continue
        state = module[mid].get_state(inference_only=inference_only)
        out[mid] = {k: _copy(v, copy) for k, v in state.items()}
    return out


class ModuleWeights(dict[ModuleID, dict[str, Array]]):
    """`numpy_weights`' result: a plain `{module_id: {name: array}}` dict that also knows
    which modules' arrays are the rows of one `[M, ...]` array per name (a stacked group
    asked for whole), so that pickling sends those arrays instead of M x names rows.
    Unpickled, it is a plain dict again, the same modules in the same order, each array a
    row of the received stacked arrays."""

    def __init__(self) -> None:
        super().__init__()
        # id(group) -> (the group's module IDs in row order, names, {name: [M, ...] array})
        self.stacked: dict[int, tuple[list[ModuleID], list[str], dict[str, Array]]] = {}

    def __reduce__(self) -> tuple[object, ...]:
        # A group whose entries were replaced or changed since travels row by row.
        parts = [
            (mids, names, arrays)
            for mids, names, arrays in self.stacked.values()
            if all(self._is_row(mid, row, names, arrays) for row, mid in enumerate(mids))
        ]
        packed = {mid for mids, _, _ in parts for mid in mids}
        rest = {mid: state for mid, state in self.items() if mid not in packed}
        return _unpack, (list(self), parts, rest)

    def _is_row(self, mid: ModuleID, row: int, names: list[str], arrays: dict[str, Array]) -> bool:
        state = self.get(mid)
        return (
            isinstance(state, dict)
            and list(state) == names
            and all(
                isinstance(v := state[n], np.ndarray)
                and v.shape == arrays[n].shape[1:]
                and v.__array_interface__["data"][0]
                == arrays[n][row].__array_interface__["data"][0]
                for n in names
            )
        )


def _unpack(
    order: list[ModuleID],
    parts: list[tuple[list[ModuleID], list[str], dict[str, Array]]],
    rest: dict[ModuleID, dict[str, Array]],
) -> dict[ModuleID, dict[str, Array]]:
    """`ModuleWeights` unpickled: the plain dict, stacked groups' arrays as rows."""
    found = dict(rest)
    for mids, names, arrays in parts:
        for row, mid in enumerate(mids):
            found[mid] = {name: arrays[name][row] for name in names}
    return {mid: found[mid] for mid in order}


def _group_copy(
    group: StackedGroup, lead: torch.nn.Module, inference_only: bool, copy: bool
) -> tuple[list[str], dict[str, Array]] | None:
    """The state-dict names of the group's modules and a copy of each stacked tensor;
    None if the group's modules no longer view its storage."""
    if not group.is_intact():
        return None
    names = list(lead.get_state(inference_only=inference_only))  # type: ignore[operator]
    tensors = {**group.params, **group.buffers}
    if not all(name in tensors for name in names):
        return None
    return names, {name: _copy(tensors[name], copy) for name in names}


def _copy(tensor: torch.Tensor, copy: bool = True) -> Array:
    array = tensor.detach().cpu().numpy()
    # A tensor on another device is a fresh CPU copy already.
    return array.copy() if copy and tensor.device.type == "cpu" else array
