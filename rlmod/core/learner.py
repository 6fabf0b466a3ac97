"""Learner: owns the full (training) modules and their optimizers, and updates them.

Built by LearnerGroup from `config.get_multi_rl_module_spec(spaces=...)`; a Learner never
makes an env. Algorithms subclass it and write their math once, in `compute_losses` over
`[M, B, ...]` tensors (one module alone is M = 1; a stacked group is M modules), or, as
in RLlib, in `compute_loss_for_module` (then modules train one by one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

import numpy as np
import torch

from rlmod.core import data_parallel
from rlmod.core.apis import find_self_supervised_loss
from rlmod.core.columns import Columns
from rlmod.core.devices import learner_device
from rlmod.core.learner_batches import (
    NumpyBatch,
    TensorBatch,
    epoch_minibatches,
    minibatch_plan,
    num_rows,
    to_tensor_batch,
)
from rlmod.core.learner_stacks import StackMinibatch, TrainStack
from rlmod.core.learner_state import LearnerState
from rlmod.core.loss_group import ColumnMap, LossGroup, OneModule
from rlmod.core.loss_reports import LossReports
from rlmod.core.mixed_precision import MixedPrecision
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule, MultiRLModuleSpec
from rlmod.core.optim import Adam, AdamSlot, GroupLayout, OptimizerStates
from rlmod.core.optimizer_groups import LearningRate, OptimizerGroups, by_group
from rlmod.core.sequence_batches import real_steps, sequence_minibatch_size, unpad
from rlmod.core.stacked_trainer import StackedTrainer
from rlmod.core.train_alone import TrainAlone
from rlmod.core.update_guard import NonFiniteGuard
from rlmod.fast_paths import plain_paths, use_plain_paths
from rlmod.utils.gc_pause import gc_paused
from rlmod.utils.schedules import scheduled_value

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

_P = ParamSpec("_P")
_R = TypeVar("_R")


class Learner(LossReports, LearnerState):
    """Turns episodes into train batches (learner connector) and runs SGD on them.

    One Adam optimizer per trainable module, with that module's config
    (`config.get_config_for_module`) for its learning rate, schedule and gradient clip.
    Modules not in `policies_to_train` are never stepped. A module that brings its own
    loss (`compute_self_supervised_loss`, e.g. a curiosity model) is trained with it.

    Modules train in step units, each readied by `NonFiniteGuard.check` (early stop,
    clipping, the NaN/inf guard; rlmod.core.update_guard) and stepped: a module alone
    (TrainAlone), or with `stack_modules` a group of one architecture (StackedTrainer: one
    `compute_losses` call and one GroupAdam step per group and minibatch, each module with
    its own lr, clip, guard and logs), with the results of training each alone. Learners
    that train data-parallel, or override RLlib's `compute_loss_for_module`, train module
    by module. Logs and early stops: LossReports; weights and state: LearnerState.
    """

    def __init__(self, *, config: AlgorithmConfig, module_spec: MultiRLModuleSpec) -> None:
        use_plain_paths(config)
        self.config = config
        self.module_spec = module_spec
        self.module: MultiRLModule | None = None
        self._optimizers: dict[ModuleID, Adam | AdamSlot] = {}
        self._optimizer_states = OptimizerStates(self._optimizers)
        # modules with several optimizer groups (`optimizer_groups`): (name, lr, size)
        self._lr_schedules: dict[ModuleID, list[tuple[str, LearningRate, int]]] = {}
        self._alone: dict[ModuleID, TrainAlone] = {}  # the modules not stacked
        self._group_means: dict[ModuleID, dict[str, float]] = {}  # stacked, last update
        self.trained_module_ids: list[ModuleID] = []
        """The modules the last (or current) update trained."""
        self.guard = NonFiniteGuard(config.max_consecutive_non_finite_updates)
        # RLlib's per-module hook overridden: the loss is that, modules train one by one
        self._loss_per_module = (
            type(self).compute_loss_for_module is not Learner.compute_loss_for_module
        )
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
        self.precision = MixedPrecision(self.config.mixed_precision, self.device)
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
            if groups := self.optimizer_groups(mid, self.config.get_config_for_module(mid)):
                trainable[mid], names[mid], self._lr_schedules[mid] = by_group(
                    mid, trainable[mid], names[mid], groups
                )
        slots = self._build_stacks(trainable, names)
        self._alone = {}
        for mid, params in trainable.items():  # module order, stacked or not
            cfg = self.config.get_config_for_module(mid)
            if mid in slots:
                self._optimizers[mid] = slots[mid]
                continue
            layout = [
                GroupLayout(g, n, scheduled_value(lr, 0))
                for g, lr, n in self._lr_schedules.get(mid, [])
            ]
            lr = layout[0].lr if layout else scheduled_value(cfg.lr, 0)
            adam = Adam(params, lr=lr, names=names[mid], groups=layout or None)
            self._optimizers[mid] = adam
            self._alone[mid] = TrainAlone(mid, adam, cfg)
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
    ) -> OptimizerGroups | None:
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
        cfg = {m: self.config.get_config_for_module(m) for m in trainable}
        eligible = [  # a stacked group's step clips by the global norm, with one lr
            m
            for m in trainable
            if find_self_supervised_loss(self.module[m]) is None
            and cfg[m].grad_clip_by == "global_norm"
            and m not in self._lr_schedules
        ]
        lrs = {m: scheduled_value(cfg[m].lr, 0) for m in eligible}
        self.stacked, slots = StackedTrainer.build(
            self.module, eligible, lrs, trainable, names, self.device
        )
        return slots

    def _can_stack(self) -> bool:
        """Whether this Learner trains stacked groups: `stack_modules` is on, it trains on
        one process, its MultiRLModule is the plain one (a subclass may route batches
        through shared parts), and its loss is `compute_losses` alone (a class that
        overrides `compute_loss_for_module` may compute something else per module)."""
        return (
            bool(getattr(self.config, "stack_modules", False))
            and not plain_paths()
            and self._world_size == 1
            and type(self.module) is MultiRLModule
            and type(self).compute_losses is not Learner.compute_losses
            and not self._loss_per_module
        )

    def setup_data_parallel(self, *, rank: int, world_size: int, init_method: str) -> None:
        """Joins a torch.distributed group (gloo) of `world_size` Learners before `build()`,
        in every Learner at once (LearnerGroup does, in each Learner actor); see
        rlmod.core.data_parallel for what each step then averages."""
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
        that overrides this method trains its modules one by one, through it."""
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
            for group, (_, lr) in zip(
                self._optimizers[mid].param_groups, self._lrs(mid, configs[mid]), strict=True
            ):
                group["lr"] = scheduled_value(lr, now)
            if mid in self._alone:
                self._alone[mid].start_update(configs[mid])
        self.trained_module_ids = trainable
        self._group_means = {}
        self.guard.start_update(trainable)
        rows = num_rows({m: batch[m] for m in trainable})  # chunks for stateful modules
        num_steps, size = self._minibatch_plan(rows, batch)
        steps = {m: real_steps(batch[m]) or rows[m] for m in trainable}
        try:
            self.stacked.start_update(self.module, batch, configs, size if num_steps > 1 else None)
            for _ in range(self.config.num_epochs):
                for mb, stack_mbs in self._minibatches(
                    {m: batch[m] for m in trainable}, rows, num_steps, size
                ):
                    self._sgd_step(mb, stack_mbs, configs)
            self._group_means, stops = self.stacked.results()
        finally:  # the working rows go back into the modules, also when a guard raised
            self.stacked.finish_update()
        self.after_gradient_based_update(timesteps=timesteps)
        names = {m: [name for name, _ in self._lrs(m, configs[m])] for m in trainable}
        return self.update_results(names, steps, stops)

    def _lrs(self, mid: ModuleID, config: AlgorithmConfig) -> list[tuple[str, LearningRate]]:
        """Per optimizer group of module `mid`, its name and lr or schedule."""
        groups = self._lr_schedules.get(mid)
        return [(g, lr) for g, lr, _ in groups] if groups else [("default_optimizer", config.lr)]

    def _sgd_step(
        self,
        mb: TensorBatch,
        stack_mbs: Sequence[tuple[TrainStack, StackMinibatch]],
        configs: Mapping[ModuleID, AlgorithmConfig],
    ) -> None:
        """One minibatch: every module's loss (stacked groups' as one `[M]` vector per row
        bucket), one backward pass for all, then one guarded step per step unit."""
        assert self.module is not None
        # One forward_train for all modules: a subclass may share parts between them (as RLlib)
        with self.precision.autocast():  # forward passes and losses
            fwd_outs = self.module.forward_train(mb) if mb else {}
            total: torch.Tensor | float = 0.0
            units: list[tuple[TrainAlone | TrainStack, torch.Tensor]] = []
            for mid, cols in mb.items():
                self._alone[mid].optimizer.zero_grad(set_to_none=True)
                if Columns.LOSS_MASK in cols:  # chunks of a stateful module: real steps only
                    cols, fwd_outs[mid] = unpad(cols, fwd_outs[mid])
                kwargs = {"module_id": mid, "config": configs[mid], "batch": cols}
                if own_loss := find_self_supervised_loss(self.module[mid]):
                    loss = own_loss(learner=self, fwd_out=fwd_outs[mid], **kwargs)  # type: ignore[arg-type]
                elif self._loss_per_module:  # RLlib's hook, overridden
                    loss = self.compute_loss_for_module(fwd_out=fwd_outs[mid], **kwargs)  # type: ignore[arg-type]
                else:
                    one = OneModule(mid, self.module[mid], cols, fwd_outs[mid])
                    loss = self.compute_losses(
                        group=one, configs=[configs[mid]], batch=one.batch, fwd_out=one.fwd_out
                    )[0]
                total = total + loss
                units.append((self._alone[mid], loss.detach().reshape(1)))
            for stack, buckets in stack_mbs:
                stack.zero_grad()
                losses = torch.zeros(len(stack), device=self.device)
                for bucket, cols in buckets:
                    fwd = bucket.call_padded("forward_train", cols)
                    vec = self.compute_losses(
                        group=bucket, configs=bucket.configs, batch=cols, fwd_out=fwd
                    )
                    losses[bucket.start : bucket.stop] = vec.detach()
                    total = total + vec.sum()
                units.append((stack, losses))
        assert isinstance(total, torch.Tensor)
        self.precision.backward(total)
        if self._world_size > 1:
            data_parallel.all_reduce_gradients(self._optimizers, num_rows(mb), self.device)
        for unit, unit_losses in units:
            unit.stepper.step(self.precision.check(self.guard, unit, unit_losses))

    def _minibatch_plan(
        self, rows: Mapping[ModuleID, int], batch: TensorBatch | None = None
    ) -> tuple[int, int | None]:
        """`minibatch_plan` (rlmod.core.learner_batches), the same on every Learner of a
        data-parallel group (the most minibatches any of them has). Where `batch` holds
        chunks of a stateful module, rows are chunks and `minibatch_size` (env steps)
        becomes a number of chunks (rlmod.core.sequence_batches)."""
        minibatch_size = self.config.minibatch_size
        if batch is not None:
            minibatch_size = sequence_minibatch_size(batch, minibatch_size)
        num_steps, size = minibatch_plan(rows, minibatch_size)
        if self._world_size > 1:
            num_steps = data_parallel.agree_max(num_steps, self.device)
            size = None if num_steps <= 1 else minibatch_size
        return num_steps, size

    def _minibatches(
        self, batch: TensorBatch, rows: Mapping[ModuleID, int], num_steps: int, size: int | None
    ) -> Iterator[tuple[TensorBatch, list[tuple[TrainStack, StackMinibatch]]]]:
        """One epoch's minibatches (`epoch_minibatches`), shuffled by this Learner's RNG."""
        return epoch_minibatches(batch, rows, num_steps, size, self._rng, self.stacked)

    def _to_tensors(self, batches: NumpyBatch | Sequence[NumpyBatch]) -> TensorBatch:
        """This Learner's modules' rows as tensors on its device (`to_tensor_batch`)."""
        assert self.module is not None
        return to_tensor_batch(batches, self.module, self.device)
