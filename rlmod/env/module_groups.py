"""ModuleGroups: which of an EnvRunner's modules run together in one forward pass per step.

Used by MultiAgentEnvRunner. Modules that `rlmod.core.stacked.find_stack_groups` puts into
one StackedGroup (same class, spaces and model config) form one execution group: all their
acting agents of all envs go through ONE stacked forward pass, each row with its module's
own weights. Every other module is an execution group of its own (one forward pass per
step, as before stacking). With stacking turned off, every module is its own group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from rlmod.connectors.module_to_env import ENV_ACTIONS, add_action_logp
from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.rl_module import acting_forward
from rlmod.core.stacked import MIN_STACK_SIZE, StackedGroup, find_stack_groups
from rlmod.core.types import Array, IntArray, TensorDict

if TYPE_CHECKING:
    from rlmod.connectors.pipeline import ConnectorPipeline


@dataclasses.dataclass(frozen=True)
class ExecutionGroup:
    """Modules that act in one forward pass per step.

    Attributes:
        modules: Their indices in the runner's module IDs, in increasing order.
        stacked: The StackedGroup that runs them, or None for a module run alone.
        lead: The module whose action distribution and module-to-env pipeline stand for
            all of them (stacked modules share class, spaces and model config, so these
            are alike; their weights are not used here).
    """

    modules: IntArray
    stacked: StackedGroup | None
    lead: ModuleID


class ModuleGroups:
    """The execution groups of a MultiRLModule's modules, and their forward passes.

    Arrays indexed by module index (position in `module_ids`): `group_of_module`,
    `index_in_group` (the row's index for `StackedGroup.forward_*`), and `sort_rank`: a
    module's position when modules are ordered group by group, by module index within a
    group. Sorting rows by `sort_rank` makes each group's rows contiguous and module-major,
    the order in which unstacked modules would sample one after another (so a seed gives
    the same actions stacked or not).
    """

    def __init__(
        self,
        module: MultiRLModule,
        module_ids: list[ModuleID],
        module_to_env: dict[ModuleID, ConnectorPipeline],
        *,
        stack: bool,
    ) -> None:
        self.module = module
        self.module_to_env = module_to_env
        index = {mid: i for i, mid in enumerate(module_ids)}
        n = len(module_ids)
        self.group_of_module = np.full(n, -1, np.int64)
        self.index_in_group = np.zeros(n, np.int64)
        found: list[tuple[IntArray, StackedGroup | None]] = []
        stack_groups = (
            find_stack_groups(module, module_ids, min_size=MIN_STACK_SIZE) if stack else []
        )
        for sg in stack_groups:
            mods = np.fromiter((index[mid] for mid in sg.module_ids), np.int64, len(sg.module_ids))
            self.index_in_group[mods] = np.arange(len(mods))
            self.group_of_module[mods] = len(found)
            found.append((np.sort(mods), sg))
        for m in np.flatnonzero(self.group_of_module < 0).tolist():
            self.group_of_module[m] = len(found)
            found.append((np.array([m]), None))
        # Groups in the order of their first module: with all modules in one group, or none
        # stacked, sort_rank is the module index itself.
        found.sort(key=lambda f: int(f[0][0]))
        renumber = np.empty(len(found), np.int64)
        self.groups: list[ExecutionGroup] = []
        self.sort_rank = np.empty(n, np.int64)
        rank = 0
        for g, (mods, stacked) in enumerate(found):
            renumber[self.group_of_module[mods[0]]] = g
            self.groups.append(ExecutionGroup(mods, stacked, module_ids[int(mods[0])]))
            self.sort_rank[mods] = np.arange(rank, rank + len(mods))
            rank += len(mods)
        self.group_of_module = renumber[self.group_of_module]

    @property
    def num_stacked(self) -> int:
        """How many modules run inside stacked groups."""
        return sum(len(g.modules) for g in self.groups if g.stacked is not None)

    def forward(
        self, g: int, obs: Array, modules: Array, *, explore: bool
    ) -> tuple[TensorDict, dict[str, object]]:
        """Group g's forward pass on its acting rows (`modules`: each row's module index),
        then its module-to-env pipeline: (forward outputs, pipeline outputs)."""
        group = self.groups[g]
        lead = self.module[group.lead]
        obs_t = torch.from_numpy(obs)
        if group.stacked is None:
            batch = {Columns.OBS: obs_t}
            out = acting_forward(lead, explore)(batch)
        else:
            index = torch.from_numpy(self.index_in_group[modules])
            run = group.stacked.forward_exploration if explore else group.stacked.forward_inference
            out = run(obs_t, index)
        data = self.module_to_env[group.lead](out, rl_module=lead, explore=explore)
        return out, data

    def set_weights(
        self, weights: Mapping[ModuleID, Mapping[str, Array | torch.Tensor]]
    ) -> dict[ModuleID, Mapping[str, Array | torch.Tensor]]:
        """Loads the weights of whole stack groups straight into their stacked storage
        (one copy per parameter and group instead of one `set_state` per module: 0.17 s
        of Python at 1,000 modules); returns the weights left for `MultiRLModule.set_state`
        (modules run alone, groups not wholly in `weights`, and any state that does not
        fit exactly, which `set_state` then checks and names)."""
        rest = dict(weights)
        for group in self.groups:
            sg = group.stacked
            if sg is None or not all(mid in rest for mid in sg.module_ids):
                continue
            tensors = {**sg.params, **sg.buffers}
            states = [rest[mid] for mid in sg.module_ids]
            if not sg.is_intact() or any(s.keys() != tensors.keys() for s in states):
                continue
            rows = {name: [np.asarray(s[name]) for s in states] for name in tensors}
            if any(r.shape != tuple(t.shape[1:]) for n, t in tensors.items() for r in rows[n]):
                continue  # some module's tensor has another shape: set_state names it
            with torch.no_grad():
                for name, tensor in tensors.items():
                    _copy_rows(rows[name], tensor)
            for mid in sg.module_ids:
                del rest[mid]
        return rest

    def add_action_logp(self, g: int, batch: dict[str, Array]) -> None:
        """Adds the log-probs of group g's rows (all its modules at once)."""
        add_action_logp(batch, self.module[self.groups[g].lead])


def _copy_rows(rows: list[Array], tensor: torch.Tensor) -> None:
    """`tensor[i] = rows[i]` for every row, as one numpy call writing straight into the
    tensor's memory where it is a contiguous CPU tensor: no `[M, ...]` intermediate (at
    1,000 [256, 256] modules, `np.stack` into fresh memory cost 1.4 s of an EnvRunner's
    first `set_state`, the copy itself 0.05 s)."""
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        try:
            out = tensor.detach().numpy()
        except TypeError:  # a dtype numpy lacks (bfloat16)
            pass
        else:  # casting as `Tensor.copy_` casts (the path below, and set_state's)
            if any(np.may_share_memory(r, out) for r in rows):  # rows of this very tensor
                out = out.copy()
                np.stack(rows, out=out, casting="unsafe")
                tensor.copy_(torch.from_numpy(out))
                return
            np.stack(rows, out=out, casting="unsafe")
            # A write through numpy leaves torch's version counter alone; caches keyed on
            # it (stacked_acting's transposed weights) must see the new weights.
            torch.autograd.graph.increment_version(tensor)
            return
    tensor.copy_(torch.from_numpy(np.stack(rows)))


def env_actions_per_row(data: Mapping[str, object], n: int) -> Array:
    """The env actions of `n` agents as an array with one row per agent: as they are, or,
    for Tuple/Dict action spaces (a tuple/dict of batched arrays), an object array of one
    tuple/dict per agent (the env takes one per agent anyway)."""
    env_actions = data[ENV_ACTIONS]
    if not isinstance(env_actions, tuple | dict):
        return np.asarray(env_actions)
    out = np.empty(n, object)
    for i in range(n):
        out[i] = _row(env_actions, i)
    return out


def _row(x: object, i: int) -> object:
    if isinstance(x, dict):
        return {k: _row(v, i) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_row(v, i) for v in x)
    return cast(Array, x)[i]  # a leaf: one batched array
