"""StackedTrainer: the stacked groups a Learner trains, as one object the Learner uses.

Used by Learner (rlmod.core.learner) when `stack_modules` is on and its loss is
`compute_losses` (written once for a module alone and for a group, rlmod.core.loss_group).
The Learner keeps epochs, minibatches, the per-module path and the non-finite guard's
counts; this object keeps what only stacking needs: the groups (TrainStack, each with its
GroupAdam and row buckets, rlmod.core.learner_stacks) and which module is in which; the
Learner computes each bucket's `compute_losses` and steps each group as a module alone
(rlmod.core.update_guard).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlmod.core.learner_stacks import StackBucket, StackMinibatch, TrainStack
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.optim import AdamSlot, GroupAdam
from rlmod.core.stacked import MIN_STACK_SIZE, find_stack_groups
from rlmod.core.types import IntArray

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

TensorBatch = dict[ModuleID, dict[str, torch.Tensor]]


class StackedTrainer:
    """The stacked groups of a Learner's trainable modules and their per-update state."""

    def __init__(self, stacks: list[TrainStack], device: torch.device) -> None:
        self.stacks = stacks
        self.device = device
        self.stack_of: dict[ModuleID, TrainStack] = {
            mid: st for st in stacks for mid in st.group.module_ids
        }

    @classmethod
    def build(
        cls,
        module: MultiRLModule,
        module_ids: Iterable[ModuleID],
        lrs: Mapping[ModuleID, float],
        params: Mapping[ModuleID, list[torch.nn.Parameter]],
        names: Mapping[ModuleID, list[str]],
        device: torch.device,
    ) -> tuple[StackedTrainer, dict[ModuleID, AdamSlot]]:
        """Stacks the modules of `module_ids` that share an architecture (groups of at
        least MIN_STACK_SIZE), one GroupAdam per group starting at `lrs`; returns the
        trainer and each stacked module's share of its GroupAdam (its optimizer)."""
        stacks: list[TrainStack] = []
        slots: dict[ModuleID, AdamSlot] = {}
        for group in find_stack_groups(module, module_ids, min_size=MIN_STACK_SIZE):
            trained = [p for p in group.params.values() if p.requires_grad]
            optimizer = GroupAdam(trained, lrs=[lrs[m] for m in group.module_ids])
            stacks.append(TrainStack(group, optimizer))
            for i, mid in enumerate(group.module_ids):
                slots[mid] = optimizer.slot(i, params[mid], names=names[mid])
        return cls(stacks, device), slots

    def __contains__(self, module_id: object) -> bool:
        return module_id in self.stack_of

    # ------------------------------------------------------------------ an update
    def start_update(
        self,
        module: MultiRLModule,
        batch: TensorBatch,
        configs: Mapping[ModuleID, AlgorithmConfig],
        size: int | None,
    ) -> None:
        """Checks every group against `module` and takes the rows of the modules in
        `configs` out of `batch` (`TrainStack.start_update`)."""
        for stack in self.stacks:
            _check_intact(module, stack)
            stack.start_update(batch, configs, size)

    def finish_update(self) -> None:
        """Writes the working rows back (also when the update raised)."""
        for stack in self.stacks:
            stack.finish_update()

    def results(self) -> tuple[dict[ModuleID, dict[str, float]], dict[ModuleID, bool]]:
        """Per module of this update, its logged means, and whether each module checked
        for an early stop stopped."""
        means: dict[ModuleID, dict[str, float]] = {}
        stops: dict[ModuleID, bool] = {}
        for stack in self.stacks:
            means.update(stack.means())
            stops.update(stack.early_stops())
        return means, stops

    # ------------------------------------------------------------------ minibatches
    def start_epoch(self, perms: Mapping[ModuleID, IntArray] | None, num_steps: int) -> None:
        """This epoch's row order: each module's shuffle (None: rows in order, one
        minibatch of all of them)."""
        for stack in self.stacks:
            if not len(stack):
                continue
            if perms is None:
                stack.start_epoch(None, 1)
                continue
            order = [perms.get(mid, np.zeros(0, np.int64)) for mid in stack.ids]
            stack.start_epoch(order, num_steps)

    def minibatch(self, step: int) -> list[tuple[TrainStack, StackMinibatch]]:
        """Minibatch `step` of this epoch, per group with rows."""
        return [(st, st.minibatch(step)) for st in self.stacks if len(st)]

    # ------------------------------------------------------------------ from the loss
    def log(
        self,
        bucket: StackBucket,
        values: Mapping[str, torch.Tensor],
        valid: torch.Tensor | None,
    ) -> None:
        self.stack_of[bucket.module_ids[0]].log(values, valid, positions=bucket.positions)

    def request_stop(self, bucket: StackBucket, values: torch.Tensor, limits: torch.Tensor) -> None:
        self.stack_of[bucket.module_ids[0]].request_stop(values, limits, bucket.positions)


def _check_intact(module: MultiRLModule, stack: TrainStack) -> None:
    """Refuses to train a group whose modules were replaced in the MultiRLModule or given
    new parameter tensors since build(): the group would train stale storage."""
    group = stack.group
    same = all(module.get(m) is mod for m, mod in zip(group.module_ids, group.modules, strict=True))
    if not (same and group.is_intact()):
        raise RuntimeError(
            f"The Learner stacked modules {group.module_ids[:5]}... at build(), and one of "
            "them was since replaced in its MultiRLModule or given new parameter tensors "
            "(e.g. load_state_dict(assign=True), .to(device)); change weights with "
            "set_state()/set_weights(), which write into the stacked storage, or turn "
            "stacking off with config.multi_agent(stack_modules=False)."
        )
