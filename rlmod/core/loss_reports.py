"""LossReports: what a loss tells its Learner besides the loss, routed to the modules' step units,
and what an update reports per module.

The base of Learner (rlmod.core.learner) for `log`, `log_rows` and `stop_early`, called
from `compute_losses` (or RLlib's `compute_loss_for_module`) with a module ID or the
LossGroup of the call: a module alone's values go to its TrainAlone, a stacked group's
`[M]` values to its TrainStack; the guarded step (rlmod.core.update_guard) then keeps
them, or drops those of a module it did not step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

import torch

from rlmod.core.columns import ALL_MODULES
from rlmod.core.learner_stacks import StackBucket
from rlmod.core.loss_group import LossGroup, OneModule
from rlmod.core.minibatch_stats import GroupReduce, RowStat
from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.optim import Adam, AdamSlot
from rlmod.core.stacked_trainer import StackedTrainer
from rlmod.core.train_alone import TrainAlone
from rlmod.core.update_guard import NonFiniteGuard

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig


class LossReports:
    """Diagnostics and early stops of a Learner's modules, per update."""

    config: AlgorithmConfig
    device: torch.device
    guard: NonFiniteGuard
    stacked: StackedTrainer
    _alone: dict[ModuleID, TrainAlone]
    _group_means: dict[ModuleID, dict[str, float]]
    _defer_diagnostics: bool
    _num_parameters: dict[ModuleID, int]
    _optimizers: Mapping[ModuleID, Adam | AdamSlot]

    def update_results(
        self,
        optimizer_names: Mapping[ModuleID, list[str]],
        steps: Mapping[ModuleID, int],
        stops: dict[ModuleID, bool],
    ) -> dict[str, dict[str, float]]:
        """`Learner.update`'s results: per trained module (the keys of `optimizer_names`:
        its optimizer groups' names, in order) its mean diagnostics, early stop, learning
        rates (RLlib's `<optimizer name>_learning_rate`) and counts (`steps`: the env
        steps it trained on per epoch), plus `__all_modules__` totals."""
        epochs = self.config.num_epochs
        results: dict[str, dict[str, float]] = {}
        for mid, names in optimizer_names.items():
            alone = self._alone.get(mid)
            results[mid] = alone.means() if alone else self._group_means.get(mid, {})
            if alone:
                stops.update(alone.early_stops())
            if mid in stops:
                results[mid]["early_stopped"] = float(stops[mid])
            for group, name in zip(self._optimizers[mid].param_groups, names, strict=True):
                results[mid][f"{name}_learning_rate"] = group["lr"]
            results[mid]["num_module_steps_trained"] = steps[mid] * epochs
            results[mid]["num_non_finite_updates"] = self.guard.counts[mid]
        results[ALL_MODULES] = {
            "num_non_finite_updates": sum(self.guard.counts.values()),
            "num_module_steps_trained": sum(steps.values()) * epochs,
            "num_trainable_parameters": sum(self._num_parameters[m] for m in optimizer_names),
        }
        return results

    def log(
        self,
        where: ModuleID | LossGroup,
        valid: Sequence[bool] | None = None,
        /,
        **values: torch.Tensor | float,
    ) -> None:
        """Records diagnostics; `update()` returns their mean over minibatches.

        `where` is a module ID (scalar values) or the LossGroup of `compute_losses`
        (`[M]` values, one per module; a float: the same for all); `valid` (M bools,
        positional) marks the modules the values apply to (None: all)."""
        if isinstance(where, StackBucket):
            m = len(where)
            tensors = {
                k: torch.as_tensor(v, device=self.device).expand(m) for k, v in values.items()
            }
            ok = None if valid is None else torch.tensor(list(valid), device=self.device)
            self.stacked.log(where, tensors, ok)
            return
        if valid is None or valid[0]:
            self._alone_of(where).log(
                {
                    k: v
                    if isinstance(v, torch.Tensor)
                    else torch.tensor(float(v), device=self.device)
                    for k, v in values.items()
                }
            )

    def _alone_of(self, where: ModuleID | LossGroup) -> TrainAlone:
        """The TrainAlone of a module ID or of a LossGroup of one module."""
        mid = where if isinstance(where, str) else where.module_ids[0]
        if mid not in self._alone:
            raise ValueError(
                f"Module {mid!r} does not train alone in this Learner (it is stacked, not "
                "trainable, or unknown): log and stop_early take a stacked module's values "
                "through the group of compute_losses."
            )
        return self._alone[mid]

    def log_rows(
        self, where: LossGroup, key: str, reduce: GroupReduce, *rows: torch.Tensor
    ) -> None:
        """Records a diagnostic the loss does not need, `reduce(group, *rows) -> [M]` (rows
        `[M, B, ...]`, reduced with `group.mean` / `group.var`), as `log` does.

        For a module trained alone it is computed later, once per update on every
        minibatch's rows stacked (`[N, B, ...]`: one set of kernels per update instead of
        per minibatch; rlmod.core.minibatch_stats); the rows are kept (detached) until
        then. For a stacked group it is computed now."""
        if isinstance(where, OneModule) and self._defer_diagnostics:
            rows_alone = tuple(r.detach() for r in rows)  # [1, B, ...]
            self._alone_of(where).log({key: RowStat(partial(reduce, where.rows), rows_alone)})
            return
        with torch.no_grad():
            self.log(where, **{key: reduce(where, *rows)})

    def stop_early(
        self, where: ModuleID | LossGroup, value: torch.Tensor, limit: float | torch.Tensor
    ) -> None:
        """An early stop of an update (e.g. PPO's kl_early_stop), called from the loss:
        where `value` (a statistic of this minibatch, such as its mean KL) exceeds `limit`,
        the module is not stepped on this minibatch nor on any later one of this update,
        and what it logs from then on is left out of its means. The update's results say
        per checked module whether it stopped (`early_stopped`).

        `where` as in `log`: a module ID with scalars, or a LossGroup with `[M]` values and
        limits (an inf limit: no check for that module)."""
        if isinstance(where, StackBucket):
            limits = torch.as_tensor(limit, device=self.device).expand(len(where))
            self.stacked.request_stop(where, value, limits)
            return
        limit = float(limit.reshape(-1)[0]) if isinstance(limit, torch.Tensor) else limit
        if math.isfinite(limit):
            self._alone_of(where).request_stop(value, limit)

    def logged_mean(self, module_id: ModuleID, key: str) -> float | None:
        """The mean of what `module_id` logged under `key` in the last update, over the
        minibatches it was stepped in (None if it logged nothing under `key`)."""
        if module_id in self._alone:
            return self._alone[module_id].logged_mean(key)
        return self._group_means.get(module_id, {}).get(key)
