"""Learner: owns the full (training) modules and their optimizers, and updates them.

Built by LearnerGroup from `config.get_multi_rl_module_spec(spaces=...)`; a Learner never
makes an env. Algorithms subclass it and write their math once, in `compute_losses` over
`[M, B, ...]` tensors (one module alone is M = 1; a stacked group is M modules), or, as
in RLlib, in `compute_loss_for_module` (then modules train one by one).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar, cast

import numpy as np
import torch

from rlmod.core import data_parallel
from rlmod.core.apis import find_self_supervised_loss
from rlmod.core.columns import ALL_MODULES
from rlmod.core.devices import learner_device
from rlmod.core.learner_stacks import StackBucket, StackMinibatch, TrainStack
from rlmod.core.loss_group import ColumnMap, LossGroup, OneModule
from rlmod.core.minibatch_stats import GroupReduce, Logged, RowStat, mean_over_minibatches
from rlmod.core.module_weights import numpy_weights
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule, MultiRLModuleSpec
from rlmod.core.optim import (
    Adam,
    AdamSlot,
    GroupLayout,
    OptimizerStates,
    grad_norm,
    update_is_finite,
)
from rlmod.core.stacked_trainer import StackedTrainer
from rlmod.core.types import Array, Components, IntArray, StateDict, StateValue
from rlmod.errors import NonFiniteUpdateError
from rlmod.fast_paths import plain_paths, use_plain_paths
from rlmod.utils.checkpoints import Checkpointable, select_components
from rlmod.utils.gc_pause import gc_paused
from rlmod.utils.schedules import scheduled_value

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

_P = ParamSpec("_P")
_R = TypeVar("_R")

LR_KEY = "default_optimizer_learning_rate"
"""RLlib's result key of a module's learning rate (`<optimizer name>_learning_rate`)."""

LearningRate = float | list[list[float]]
"""A learning rate or a piecewise-linear schedule [[env_step, lr], ...]."""
GRAD_NORM_KEY = "gradients_default_optimizer_global_norm"
"""RLlib's result key of a module's gradient norm before clipping."""

NumpyBatch = Mapping[ModuleID, Mapping[str, Array]]
"""Per module ID, its rows as numpy columns: what Learners receive (a `SampleResult`)."""
TensorBatch = dict[ModuleID, dict[str, torch.Tensor]]
"""Per module ID, its rows as tensor columns: what learner connectors and losses see."""


class Learner(Checkpointable):
    """Turns episodes into train batches (learner connector) and runs SGD on them.

    One Adam optimizer per trainable module, with that module's config
    (`config.get_config_for_module`) for its learning rate, schedule and gradient clip.
    Modules not in `policies_to_train` are never stepped. A module that brings its own
    loss (`compute_self_supervised_loss`, e.g. a curiosity model) is trained with it.

    Stacking (`stack_modules`, on by default): trainable modules of one architecture
    (rlmod.core.stacked) train as one group: one `compute_losses` call, one
    backward pass and one GroupAdam step per group and minibatch, with each module's own
    lr, schedule, gradient clip, guard and logs; `_optimizers[module_id]` is then that
    module's AdamSlot. Results, checkpoints and weights are those of training each module
    alone (within float rounding). Learners that train data-parallel, or whose loss is
    RLlib's per-module `compute_loss_for_module` only, train module by module.

    Numerical guard: a minibatch whose loss or gradient norm is NaN/inf does not step that
    module (weights and optimizer state stay bit-identical) and its logged diagnostics are
    left out of the means; `num_non_finite_updates` counts such minibatches per module, and
    `max_consecutive_non_finite_updates` in a row raise NonFiniteUpdateError.
    """

    def __init__(self, *, config: AlgorithmConfig, module_spec: MultiRLModuleSpec) -> None:
        use_plain_paths(config)
        self.config = config
        self.module_spec = module_spec
        self.module: MultiRLModule | None = None
        self._optimizers: dict[ModuleID, Adam | AdamSlot] = {}
        self._lr_schedules: dict[ModuleID, list[tuple[str, LearningRate, int]]] = {}
        """Modules with several optimizer groups (`optimizer_groups`): (name, lr, size)."""
        self._group_means: dict[ModuleID, dict[str, float]] = {}
        self._optimizer_states = OptimizerStates(self._optimizers)
        self._logged: dict[ModuleID, dict[str, list[Logged]]] = {}
        self._num_non_finite: dict[ModuleID, int] = {}  # skipped minibatches, this update
        self._non_finite_streak: dict[ModuleID, int] = {}  # skipped in a row, across updates
        # early stops (stop_early) of modules trained one by one: this minibatch's
        # requests, and the modules checked / stopped in this update
        self._stop_requests: dict[ModuleID, tuple[torch.Tensor, float]] = {}
        self._stop_checked: set[ModuleID] = set()
        self._stopped: set[ModuleID] = set()
        self._guard_non_finite = True  # benchmarks/guard_overhead.py turns it off to compare
        self._defer_diagnostics = not plain_paths()  # log_rows of one module: per update
        self._rng = np.random.default_rng(config.seed)
        self._world_size = 1  # Learners training data-parallel (setup_data_parallel)
        self.device: torch.device = learner_device(config)
        """Where modules, optimizer states and batches live (`num_gpus_per_learner`); read
        by `build()` and every tensor the Learner makes. Set it before `build()` to move."""
        self.stacked = StackedTrainer([], self.device)  # stack_modules: groups, at build()

    # ------------------------------------------------------------------ build
    @gc_paused()  # thousands of modules: rlmod/utils/gc_pause.py
    def build(self) -> None:
        """Builds the modules, the optimizers and the learner connector pipeline."""
        self.module = self.module_spec.build()
        if self.device.type != "cpu":  # built on the CPU (specs build there), then moved
            self.module.to(self.device)
        if not all(sub.training for sub in self.module.modules()):
            self.module.train()  # built in training mode unless a setup() said otherwise
        if self._world_size > 1:
            data_parallel.broadcast_weights(self.module)
        # names: only for the errors of a checkpoint's optimizer state that does not fit
        named = {
            mid: pairs
            for mid, sub in self.module.items()
            if (pairs := [(n, p) for n, p in sub.named_parameters() if p.requires_grad])
            and self.config.is_module_trainable(mid)
        }
        trainable = {mid: [p for _, p in pairs] for mid, pairs in named.items()}
        names = {mid: [n for n, _ in pairs] for mid, pairs in named.items()}
        self._lr_schedules = {}
        for mid in trainable:
            cfg = self.config.get_config_for_module(mid)
            groups = self.optimizer_groups(mid, cfg)
            if groups:  # parameters reordered by group; names follow
                order = _group_order(mid, names[mid], groups)
                trainable[mid] = [trainable[mid][i] for _, idx in order for i in idx]
                names[mid] = [names[mid][i] for _, idx in order for i in idx]
                self._lr_schedules[mid] = [(g, groups[g][1], len(idx)) for g, idx in order]
        slots = self._build_stacks(trainable, names)
        for mid, params in trainable.items():  # module order, stacked or not
            cfg = self.config.get_config_for_module(mid)
            if mid in self._lr_schedules:
                layout = [
                    GroupLayout(g, n, scheduled_value(lr, 0))
                    for g, lr, n in self._lr_schedules[mid]
                ]
                self._optimizers[mid] = Adam(
                    params, lr=layout[0].lr, names=names[mid], groups=layout
                )
                continue
            self._optimizers[mid] = slots.get(mid) or Adam(
                params, lr=scheduled_value(cfg.lr, 0), names=names[mid]
            )
        # Counted once: a sum over all parameters on every update was 4% of a DQN step.
        self._num_parameters = {
            mid: sum(p.numel() for p in sub.parameters()) for mid, sub in self.module.items()
        }
        default = next(iter(self.module_spec.rl_module_specs.values()), None)
        self._learner_connector = self.config.build_learner_connector(
            getattr(default, "observation_space", None), getattr(default, "action_space", None)
        )

    def optimizer_groups(
        self, module_id: ModuleID, config: AlgorithmConfig
    ) -> dict[str, tuple[tuple[str, ...], LearningRate]] | None:
        """Separate learning rates for parts of a module, as RLlib's Learners register
        several optimizers (SAC: "policy", "qf", "alpha"): {optimizer name: (parameter
        name prefixes, lr or schedule)}, every trainable parameter in exactly one group;
        results then hold `<name>_learning_rate` per group instead of
        `default_optimizer_learning_rate`. None (the default): one group with `config.lr`.
        Such modules are trained alone, not stacked."""
        return None

    def _build_stacks(
        self,
        trainable: Mapping[ModuleID, list[torch.nn.Parameter]],
        names: Mapping[ModuleID, list[str]],
    ) -> dict[ModuleID, AdamSlot]:
        """Stacks the trainable modules of one architecture (`stack_modules`); returns
        each stacked module's share of its group's GroupAdam."""
        assert self.module is not None
        self.stacked = StackedTrainer([], self.device)
        if not self._can_stack():
            return {}
        eligible = [
            m
            for m in trainable
            if find_self_supervised_loss(self.module[m]) is None
            and _clips_by_global_norm(self.config.get_config_for_module(m))
            and m not in self._lr_schedules
        ]
        lrs = {m: scheduled_value(self.config.get_config_for_module(m).lr, 0) for m in eligible}
        self.stacked, slots = StackedTrainer.build(
            self.module, eligible, lrs, trainable, names, self.device
        )
        return slots

    def _can_stack(self) -> bool:
        """Whether this Learner trains stacked groups: `stack_modules` is on, it trains on
        one process, its MultiRLModule is the plain one (a subclass may route batches
        through shared parts), and its loss is `compute_losses` (a class that overrides
        `compute_loss_for_module` below the one that implements `compute_losses` may
        compute something else per module: it is trained module by module)."""

        def owner(name: str) -> type:
            return next(k for k in type(self).__mro__ if name in k.__dict__)

        group_owner = owner("compute_losses")
        return (
            bool(getattr(self.config, "stack_modules", False))
            and not plain_paths()
            and self._world_size == 1
            and type(self.module) is MultiRLModule
            and group_owner is not Learner
            and issubclass(group_owner, owner("compute_loss_for_module"))
        )

    def setup_data_parallel(self, *, rank: int, world_size: int, init_method: str) -> None:
        """Joins a torch.distributed group (gloo) of `world_size` Learners; call before
        `build()`, in every Learner at once (LearnerGroup does, in each Learner actor).

        Each Learner then trains on its own share of the batch: after every backward pass
        the gradients are averaged over all Learners, weighted by their minibatch rows, so
        each step is the step of one Learner on the union of the minibatches (for losses
        that are means over rows), and all Learners hold identical weights throughout.
        """
        from rlmod.utils.seeding import seed_everything

        seed_everything(self.config.seed)  # this process's RNG: as the driver's at build
        self.device = learner_device(self.config, remote=True)  # Ray's GPU, if any
        data_parallel.join(
            device=self.device, rank=rank, world_size=world_size, init_method=init_method
        )
        self._world_size = world_size

    def apply(
        self, func: Callable[Concatenate[Learner, _P], _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> _R:
        """`func(self, *args, **kwargs)`, in-process or inside the Learner's Ray actor."""
        return func(self, *args, **kwargs)

    # ------------------------------------------------------------------ the algorithm's math
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: AlgorithmConfig,
        batch: dict[str, torch.Tensor],
        fwd_out: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """The scalar loss of one module on one minibatch (RLlib's hook); log diagnostics
        with `log`. By default `compute_losses` of this module alone (M = 1); a Learner
        that overrides only this method trains its modules one by one."""
        assert self.module is not None
        group = OneModule(module_id, self.module[module_id], batch, fwd_out)
        losses = self.compute_losses(
            group=group, configs=[config], batch=group.batch, fwd_out=group.fwd_out
        )
        return losses[0]

    def compute_losses(
        self,
        *,
        group: LossGroup,
        configs: Sequence[AlgorithmConfig],
        batch: ColumnMap,
        fwd_out: ColumnMap,
    ) -> torch.Tensor:
        """The losses of the modules of `group` on one minibatch, `[M]`: the algorithm's
        math, written once for one module trained alone (M = 1, no padding) and for a
        stacked group (rlmod.core.stacked), so that the sum's gradient is each module's
        own. Reduce rows with `group.mean` / `group.var` (padding never counts); log with
        `log(group, ...)`.

        Args:
            group: The modules (rlmod.core.loss_group); `group.module_ids[i]` is module i.
            configs: `configs[i]` is module i's config (`get_config_for_module`).
            batch: Columns `[M, B, ...]`: module i's rows are `batch[col][i]` where
                `group.mask[i]` (padded slots hold zeros).
            fwd_out: `forward_train` outputs `[M, B, ...]`.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement compute_losses (or, RLlib's way, "
            "compute_loss_for_module: its modules then train one by one)."
        )

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
        if valid is not None and not valid[0]:
            return
        module_id = where if isinstance(where, str) else where.module_ids[0]
        bucket = self._logged.setdefault(module_id, defaultdict(list))
        for key, value in values.items():
            bucket[key].append(
                value.detach()  # 0-d, or [1] from a LossGroup of one module
                if isinstance(value, torch.Tensor)
                else torch.tensor(float(value), device=self.device)
            )

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
            entries = self._logged.setdefault(where.module_ids[0], defaultdict(list))
            rows_alone = tuple(r.detach() for r in rows)  # [1, B, ...]
            entries[key].append(RowStat(partial(reduce, where.rows), rows_alone))
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
        module_id = where if isinstance(where, str) else where.module_ids[0]
        limit = float(limit.reshape(-1)[0]) if isinstance(limit, torch.Tensor) else limit
        if math.isfinite(limit):
            self._stop_requests[module_id] = (value.detach().reshape(()), limit)

    def logged_mean(self, module_id: ModuleID, key: str) -> float | None:
        """The mean of what `module_id` logged under `key` in the last update, over the
        minibatches it was stepped in (None if it logged nothing under `key`)."""
        if module_id in self._group_means:
            return self._group_means[module_id].get(key)
        values = self._logged.get(module_id, {}).get(key)
        return mean_over_minibatches(values) if values else None

    def after_gradient_based_update(self, *, timesteps: Mapping[str, int]) -> None:
        """Hook after all epochs of an update (e.g. PPO's adaptive KL coefficient)."""

    # ------------------------------------------------------------------ update
    def update(
        self,
        batches: NumpyBatch | Sequence[NumpyBatch],
        *,
        timesteps: Mapping[str, int] | None = None,
    ) -> dict[str, dict[str, float]]:
        """Runs `num_epochs` passes of minibatch SGD over the given episodes.

        Args:
            batches: What EnvRunners' `sample()` returned (one dict or a list of them).
            timesteps: Counters such as `num_env_steps_sampled_lifetime` for schedules.

        Returns:
            Mean diagnostics per module ID, plus `__all_modules__` totals.
        """
        assert self.module is not None, "call build() first"
        timesteps = dict(timesteps or {})
        now = int(timesteps.get("num_env_steps_sampled_lifetime", 0))
        batch = self._learner_connector(self._to_tensors(batches), rl_module=self.module)
        trainable = [
            m for m in batch if m in self._optimizers and self.config.is_module_trainable(m, batch)
        ]
        configs = {m: self.config.get_config_for_module(m) for m in trainable}
        for mid in trainable:
            if mid in self._lr_schedules:
                for group, (_, lr, _) in zip(
                    self._optimizers[mid].param_groups, self._lr_schedules[mid], strict=True
                ):
                    group["lr"] = scheduled_value(lr, now)
                continue
            for group in self._optimizers[mid].param_groups:
                group["lr"] = scheduled_value(configs[mid].lr, now)
        self._logged = {}
        self._group_means = {}
        self._num_non_finite = dict.fromkeys(trainable, 0)
        self._stop_checked, self._stopped = set(), set()
        num_rows = _num_rows({m: batch[m] for m in trainable})
        num_steps, size = self._minibatch_plan(num_rows)
        try:
            self.stacked.start_update(self.module, batch, configs, size if num_steps > 1 else None)
            for _ in range(self.config.num_epochs):
                for mb, stack_mbs in self._minibatches(
                    {m: batch[m] for m in trainable}, num_rows, num_steps, size
                ):
                    self._sgd_step(mb, stack_mbs, configs)
            self._group_means, stops = self.stacked.results()
        finally:  # the working rows go back into the modules, also when a guard raised
            self.stacked.finish_update()
        self.after_gradient_based_update(timesteps=timesteps)
        results = {
            mid: {k: mean_over_minibatches(v) for k, v in logged.items() if v}
            for mid, logged in self._logged.items()
        }
        for mid, means in self._group_means.items():
            results.setdefault(mid, {}).update(means)
        stops.update((mid, mid in self._stopped) for mid in self._stop_checked)
        for mid, stopped in stops.items():
            results.setdefault(mid, {})["early_stopped"] = float(stopped)
        for mid in trainable:
            if mid in self._lr_schedules:  # RLlib's "<optimizer name>_learning_rate"
                for (gname, _, _), group in zip(
                    self._lr_schedules[mid], self._optimizers[mid].param_groups, strict=True
                ):
                    results.setdefault(mid, {})[f"{gname}_learning_rate"] = group["lr"]
            else:
                results.setdefault(mid, {})[LR_KEY] = self._optimizers[mid].param_groups[0]["lr"]
            results[mid]["num_module_steps_trained"] = num_rows[mid] * self.config.num_epochs
            results[mid]["num_non_finite_updates"] = self._num_non_finite[mid]
        results[ALL_MODULES] = {
            "num_non_finite_updates": sum(self._num_non_finite.values()),
            "num_module_steps_trained": sum(num_rows.values()) * self.config.num_epochs,
            "num_trainable_parameters": sum(self._num_parameters[m] for m in trainable),
        }
        return results

    def _sgd_step(
        self,
        mb: TensorBatch,
        stack_mbs: Sequence[tuple[TrainStack, StackMinibatch]],
        configs: Mapping[ModuleID, AlgorithmConfig],
    ) -> None:
        """One minibatch: every module's loss (stacked groups' as one `[M]` vector), one
        backward pass for all, then a guarded, clipped optimizer step per module/group."""
        assert self.module is not None
        total: torch.Tensor | float = 0.0
        losses: dict[ModuleID, torch.Tensor] = {}
        # logged entries before this minibatch, so a skipped minibatch's can be dropped
        marks = {mid: {k: len(v) for k, v in self._logged.get(mid, {}).items()} for mid in mb}
        # One forward_train of the MultiRLModule, so that a subclass can route all
        # modules' batches through shared parts (RLlib's Learner does the same).
        fwd_outs = self.module.forward_train(mb) if mb else {}
        for mid, cols in mb.items():
            module = self.module[mid]
            fwd_out = fwd_outs[mid]
            own_loss = find_self_supervised_loss(module)
            if own_loss is not None:
                loss = own_loss(
                    learner=self, module_id=mid, config=configs[mid], batch=cols, fwd_out=fwd_out
                )
            else:
                loss = self.compute_loss_for_module(
                    module_id=mid, config=configs[mid], batch=cols, fwd_out=fwd_out
                )
            losses[mid] = loss
            total = total + loss
        stacked_total, group_losses = self.stacked.losses(stack_mbs, self._bucket_losses)
        total = total + stacked_total
        for mid in mb:
            self._optimizers[mid].zero_grad(set_to_none=True)
        assert isinstance(total, torch.Tensor)
        total.backward()
        for stack, loss_vec in group_losses:
            group_stepped = self.stacked.step(
                stack, loss_vec, guard=self._guard_non_finite, on_skip=self._count_non_finite
            )
            if any(self._non_finite_streak.values()):  # stepped modules end their run
                for i in np.flatnonzero(group_stepped).tolist():
                    self._non_finite_streak[stack.ids[i]] = 0
        if self._world_size > 1:
            data_parallel.all_reduce_gradients(self._optimizers, _num_rows(mb), self.device)
        for mid in mb:
            if (request := self._stop_requests.pop(mid, None)) is not None:
                self._stop_checked.add(mid)
                if float(request[0]) > request[1]:
                    self._stopped.add(mid)
            if mid in self._stopped:
                self._drop_logged(mid, marks[mid])
                continue
            clip = configs[mid].grad_clip
            optimizer = self._optimizers[mid]
            if clip is None and self._guard_non_finite and isinstance(optimizer, Adam):
                # the check on the step's own gradient list (Adam.step, guard_loss)
                stepped = optimizer.step(guard_loss=losses[mid])
                norm = None
            else:
                params = optimizer.params
                norm = clip_gradients(params, clip, configs[mid].grad_clip_by)
                stepped = not self._guard_non_finite or update_is_finite(losses[mid], norm, params)
                if stepped:
                    optimizer.step()
            if not stepped:
                self._skip_non_finite(mid, losses[mid], norm, marks[mid])
                continue
            self._non_finite_streak[mid] = 0
            if norm is not None:
                self.log(mid, **{GRAD_NORM_KEY: norm})

    def _bucket_losses(self, bucket: StackBucket, cols: dict[str, torch.Tensor]) -> torch.Tensor:
        """`compute_losses` of a stacked group's row bucket, `[m]`."""
        fwd = bucket.call_padded("forward_train", cols)
        return self.compute_losses(group=bucket, configs=bucket.configs, batch=cols, fwd_out=fwd)

    def _skip_non_finite(
        self, mid: ModuleID, loss: torch.Tensor, norm: torch.Tensor | None, marks: Mapping[str, int]
    ) -> None:
        """Leaves module `mid` unstepped for this minibatch, drops what it logged for it
        from the means, and raises after `max_consecutive_non_finite_updates` in a row."""
        terms = {
            k: float(e.value() if isinstance(e := v[-1], RowStat) else e)
            for k, v in self._logged.get(mid, {}).items()
            if len(v) > marks.get(k, 0)
        }
        self._drop_logged(mid, marks)
        self._count_non_finite(mid, loss, norm, terms)

    def _drop_logged(self, mid: ModuleID, marks: Mapping[str, int]) -> None:
        """Drops what `mid` logged since `marks` (entries per key before this minibatch)
        from its means."""
        for k, v in self._logged.get(mid, {}).items():
            del v[marks.get(k, 0) :]

    def _count_non_finite(
        self,
        mid: ModuleID,
        loss: torch.Tensor,
        norm: torch.Tensor | None,
        terms: Mapping[str, float],
    ) -> None:
        """Counts a skipped minibatch of `mid`; raises after
        `max_consecutive_non_finite_updates` in a row."""
        self._num_non_finite[mid] = self._num_non_finite.get(mid, 0) + 1
        streak = self._non_finite_streak.get(mid, 0) + 1
        self._non_finite_streak[mid] = streak
        limit = self.config.max_consecutive_non_finite_updates
        if streak >= limit:
            if norm is None:  # not clipped: the check did not need the norm, the message does
                norm = grad_norm(self._optimizers[mid].params)
            raise NonFiniteUpdateError(
                f"Module {mid!r}: the loss or its gradient was NaN/inf in {streak} "
                f"minibatches in a row (max_consecutive_non_finite_updates={limit}); its "
                f"weights were kept as they were before the first. Last loss={float(loss.detach())}, "
                f"gradient norm={float(norm)}, loss terms={terms}. Look for NaN/inf in the "
                "batch (rewards, observations), a too-high lr or a log of 0 in a custom loss."
            )

    def _minibatch_plan(self, num_rows: Mapping[ModuleID, int]) -> tuple[int, int | None]:
        """(minibatches per epoch, rows per module and minibatch (None: all its rows)):
        round(rows / minibatch_size) minibatches of the module with the most rows, one
        (of every row, in order) where that is 1 or `minibatch_size` is None."""
        size = self.config.minibatch_size
        longest = max(num_rows.values(), default=0)
        whole = size is None or size >= longest
        num_steps = 0 if longest == 0 else 1 if whole else max(1, round(longest / size))
        if self._world_size > 1:
            num_steps = data_parallel.agree_max(num_steps, self.device)
        return num_steps, None if num_steps <= 1 or size is None else size

    def _minibatches(
        self, batch: TensorBatch, num_rows: Mapping[ModuleID, int], num_steps: int, size: int | None
    ) -> Iterator[tuple[TensorBatch, list[tuple[TrainStack, StackMinibatch]]]]:
        """One epoch's shuffled minibatches of `size` rows per module (`_minibatch_plan`),
        `num_steps` of them (the few rows past a multiple of the size wait for the next
        epoch's shuffle); modules with fewer rows cycle through theirs again, as RLlib's
        cyclic iterator does.

        Yields the unstacked modules' minibatch and each stacked group's (in buckets).
        Every module draws its shuffle from the RNG in the same order, stacked or not, so
        both ways train on the same minibatches.
        """
        if num_steps == 0:
            return  # no trainable module (policies_to_train) has rows: nothing to step
        stacked = self.stacked
        own = {m: cols for m, cols in batch.items() if m not in stacked}
        if size is None:
            stacked.start_epoch(None, 1)
            yield own, stacked.minibatch(0)
            return
        # One gather per column and epoch, in shuffled order; minibatches are then slices
        # (views), not a gather per column and minibatch (small gathers cost ~4 us each).
        shuffled: TensorBatch = {}
        perms: dict[ModuleID, IntArray] = {}  # of stacked modules
        for mid, n in num_rows.items():
            if n > 0:
                perm = self._rng.permutation(n)
                if mid in stacked:
                    perms[mid] = perm
                    continue
                rows = torch.from_numpy(np.resize(perm, num_steps * min(size, n))).to(self.device)
                shuffled[mid] = {c: v[rows] for c, v in batch[mid].items()}
        stacked.start_epoch(perms, num_steps)
        for i in range(num_steps):
            mb: TensorBatch = {}
            for mid, cols in shuffled.items():
                k = min(size, num_rows[mid])
                mb[mid] = {c: v[i * k : (i + 1) * k] for c, v in cols.items()}
            yield mb, stacked.minibatch(i)

    def _to_tensors(self, batches: NumpyBatch | Sequence[NumpyBatch]) -> TensorBatch:
        """Concatenates per module and wraps as tensors on `self.device` (zero-copy on
        the CPU where possible)."""
        assert self.module is not None
        seq = [batches] if isinstance(batches, Mapping) else list(batches)
        out: TensorBatch = {}
        for mid in sorted({m for b in seq for m in b}):  # sorted: no hash-order dependence
            if mid not in self.module:
                continue
            parts = [b[mid] for b in seq if mid in b]
            # Writable and contiguous: arrays from Ray's object store are read-only (copied
            # here once; torch warns on a read-only view), local ones are taken as they are.
            out[mid] = {
                col: torch.from_numpy(
                    np.require(
                        parts[0][col]
                        if len(parts) == 1
                        else np.concatenate([p[col] for p in parts]),
                        requirements=("C", "W"),
                    )
                ).to(self.device)
                for col in parts[0]
            }
        return out

    # ------------------------------------------------------------------ weights and state
    def get_weights(
        self,
        module_ids: Sequence[ModuleID] | None = None,
        *,
        inference_only: bool = False,
        copy: bool = True,
    ) -> dict[ModuleID, dict[str, Array]]:
        """Numpy copies of the weights by module ID: all modules (learner-only ones
        included) unless `module_ids` names some, as RLlib's `get_weights`.

        `inference_only` (rlmod's addition) keeps only what inference-only twins hold;
        weight sync to EnvRunners uses it with the IDs of the modules they have.
        `copy=False` (rlmod's addition) gives views of the live weights instead, for a
        caller that copies them at once (a weight sync's `ray.put`).
        """
        assert self.module is not None
        ids = list(self.module.keys() if module_ids is None else module_ids)
        # Copies (a CPU tensor's .numpy() shares its memory), stacked groups in one each.
        return numpy_weights(self.module, ids, inference_only=inference_only, copy=copy)

    def set_weights(self, weights: Mapping[ModuleID, Mapping[str, Array | torch.Tensor]]) -> None:
        """Loads weights by module ID (RLlib's name for `set_state({"rl_module": ...})`)."""
        assert self.module is not None
        self.module.set_state(weights)

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        assert self.module is not None
        return [("rl_module", self.module), ("optimizer", self._optimizer_states)]

    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        """Module weights, optimizer states and the minibatch-shuffling RNG: everything a
        restored Learner needs to make the same update as the uninterrupted one."""
        assert self.module is not None
        state: StateDict = {}
        for name, part in self.get_checkpointable_components():
            wanted, inc, exc = select_components(components, not_components, name)
            if wanted:
                state[name] = part.get_state(inc, not_components=exc)
        if components is None:
            state["rng"] = self._rng.bit_generator.state
        return state

    def set_state(self, state: Mapping[str, StateValue]) -> None:
        assert self.module is not None
        if "rl_module" in state:
            self.module.set_state(
                cast("Mapping[ModuleID, Mapping[str, Array | torch.Tensor]]", state["rl_module"])
            )
        if "optimizer" in state:
            self._optimizer_states.set_state(cast(StateDict, state["optimizer"]))
        if "rng" in state:
            self._rng.bit_generator.state = cast("dict[str, object]", state["rng"])


def _num_rows(batch: TensorBatch) -> dict[ModuleID, int]:
    """Rows per module of a batch (every column of a module has its rows)."""
    return {m: next(iter(cols.values())).shape[0] for m, cols in batch.items()}


def _clips_by_global_norm(config: AlgorithmConfig) -> bool:
    """Whether a module's gradients are clipped by their global norm, or not at all (what
    a stacked group's step does); `grad_clip_by="value"` or `"norm"` trains it alone."""
    return config.grad_clip is None or config.grad_clip_by == "global_norm"


def clip_gradients(
    params: list[torch.nn.Parameter], clip: float | None, clip_by: str
) -> torch.Tensor | None:
    """Clips `params`' gradients in place as RLlib's torch Learner does (`grad_clip_by`):
    "global_norm" scales them all by `clip / global norm` where that norm exceeds `clip`,
    "norm" does so per tensor, "value" clamps each element to [-clip, clip]. Returns the
    global norm before clipping for "global_norm" (RLlib logs only that one), else None."""
    if clip is None:
        return None
    if clip_by == "global_norm":
        return torch.nn.utils.clip_grad_norm_(params, clip)
    grads = [p.grad for p in params if p.grad is not None]
    if clip_by == "value":
        for g in grads:
            g.clamp_(-clip, clip)
    else:
        for g in grads:
            norm = g.norm(2).nan_to_num(neginf=-1e9, posinf=1e9)
            if norm > clip:
                g.mul_(clip / norm)
    return None


def _group_order(
    module_id: ModuleID,
    names: Sequence[str],
    groups: Mapping[str, tuple[tuple[str, ...], LearningRate]],
) -> list[tuple[str, list[int]]]:
    """Each optimizer group's parameter positions (module order within a group); a
    parameter in no group, or in two, is an error naming it."""
    order: list[tuple[str, list[int]]] = [(g, []) for g in groups]
    for i, name in enumerate(names):
        hits = [k for k, (g, _) in enumerate(order) if name.startswith(groups[g][0])]
        if len(hits) != 1:
            where = "no" if not hits else "more than one"
            raise ValueError(
                f"Parameter {name!r} of module {module_id!r} is in {where} optimizer group "
                f"of {sorted(groups)}: each trainable parameter needs exactly one."
            )
        order[hits[0]][1].append(i)
    # Groups by where their first parameter is: parameters keep the module's order where
    # groups are contiguous (so optimizer states saved before grouping still fit).
    return sorted(((g, idx) for g, idx in order if idx), key=lambda gi: gi[1][0])
