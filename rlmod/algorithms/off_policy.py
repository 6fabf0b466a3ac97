"""OffPolicyConfig and OffPolicyAlgorithm: the replay loop DQN and SAC share.

DQNConfig/SACConfig extend the config with their own settings; DQN and SAC inherit
`training_step`: sample, store n-step transitions, replay and update, sync weights.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from rlmod.algorithms import settings as s
from rlmod.algorithms.algorithm import Algorithm
from rlmod.algorithms.algorithm_config import AlgorithmConfig
from rlmod.algorithms.module_specs import plain_model_config
from rlmod.algorithms.settings import Invalid, Setting
from rlmod.core.columns import ALL_MODULES
from rlmod.core.learner import Learner, NumpyBatch, TensorBatch
from rlmod.core.multi_rl_module import MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.errors import CheckpointError
from rlmod.replay import MultiAgentReplayBuffer, check_replay_buffer_config
from rlmod.utils.checkpoints import METADATA_FILE, Checkpointable

logger = logging.getLogger(__name__)

REPLAY_BUFFER = "replay_buffer"
"""Name of the replay buffer's checkpoint component (a sub-directory of the checkpoint)."""

TD_ERROR = "td_error"
"""Key of the per-row TD errors a Learner returns per module (for prioritized replay)."""


def _replay_buffer_config(v: Any) -> dict[str, Any]:
    try:
        return check_replay_buffer_config(v)
    except ValueError as e:
        raise Invalid(str(e)) from None


class OffPolicyConfig(AlgorithmConfig):
    """Settings of replay-based algorithms (RLlib's names and meanings).

    `train_batch_size` is the number of transitions replayed per gradient step (per module).
    """

    replay_buffer_config = Setting(
        {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50_000, "alpha": 0.6, "beta": 0.4},
        section="training",
        check=_replay_buffer_config,
        doc=(
            "type ('EpisodeReplayBuffer': uniform, 'PrioritizedEpisodeReplayBuffer'), capacity "
            "(transitions per module), alpha and beta of prioritized replay; beta may be a "
            "schedule [[env_step, beta], ...] to anneal it towards 1."
        ),
    )
    n_step = Setting(
        1,
        section="training",
        check=s.integer(min=1),
        doc=(
            "Rewards summed per transition before bootstrapping (n-step Q-learning); computed "
            "once when transitions enter the buffer."
        ),
    )
    tau = Setting(
        1.0,
        section="training",
        check=s.number(low=0.0, high=1.0, low_open=True),
        doc="Target update: target <- tau * online + (1 - tau) * target; 1.0 copies.",
    )
    target_network_update_freq = Setting(
        500,
        section="training",
        check=s.integer(min=0),
        doc=(
            "Update the target networks when this many env steps were sampled since the last "
            "update (0: after every gradient step)."
        ),
    )
    num_steps_sampled_before_learning_starts = Setting(
        1000,
        section="training",
        check=s.integer(min=0),
        doc=("Env steps to sample (and store) before the first gradient step."),
    )
    store_buffer_in_checkpoints = Setting(
        False,
        section="training",
        check=s.boolean,
        doc=(
            "Save the replay buffer (contents, priorities, insertion pointer, RNG) as the "
            "`replay_buffer/` component of checkpoints, and restore it from them (RLlib's name "
            "and default: off, since buffers are large). Off: a checkpoint loads with an empty "
            "buffer, and learning resumes on transitions sampled after the restore."
        ),
    )
    training_intensity = Setting(
        None,
        section="training",
        check=s.optional(s.number(low=0.0, low_open=True)),
        doc=(
            "Replay ratio: transitions trained on per transition sampled (per module). None: "
            "one gradient step per iteration, RLlib's 'natural' ratio."
        ),
    )

    # minibatch_size None: one gradient step on each replayed batch
    setting_defaults: ClassVar[dict[str, Any]] = {
        "train_batch_size": 32,
        "minibatch_size": None,
        "num_epochs": 1,
    }

    # ------------------------------------------------------------------ module flags
    def module_flags(self) -> dict[str, Any]:
        """Settings the algorithm's default module reads from its model_config (DQN's
        `dueling`, SAC's `twin_q`); subclasses override."""
        return {}

    def _with_module_flags(self, spec: RLModuleSpec, config: OffPolicyConfig) -> RLModuleSpec:
        """`spec` with `config.module_flags()` in its model_config if it builds the default
        module (a user's model_config keys win); other modules, e.g. a learner-only
        curiosity model beside it, do not get keys they do not know."""
        default_class = self.get_default_rl_module_spec().module_class
        if spec.module_class is not default_class:
            return spec
        model_config = {**config.module_flags(), **plain_model_config(spec.model_config)}
        return dataclasses.replace(spec, model_config=model_config)

    def get_rl_module_spec(
        self,
        env: Any = None,
        spaces: Mapping[str, tuple] | None = None,
        inference_only: bool | None = None,
    ) -> RLModuleSpec:
        spec = super().get_rl_module_spec(env, spaces, inference_only)
        return self._with_module_flags(spec, self)

    def get_multi_rl_module_spec(
        self,
        *,
        env: Any = None,
        spaces: Mapping[str, tuple] | None = None,
        inference_only: bool = False,
        policy_dict: Mapping[str, Any] | None = None,
        single_agent_rl_module_spec: RLModuleSpec | None = None,
    ) -> MultiRLModuleSpec:
        multi = super().get_multi_rl_module_spec(
            env=env,
            spaces=spaces,
            inference_only=inference_only,
            policy_dict=policy_dict,
            single_agent_rl_module_spec=single_agent_rl_module_spec,
        )
        return dataclasses.replace(
            multi,
            rl_module_specs={
                mid: self._with_module_flags(spec, self.get_config_for_module(mid))  # type: ignore[arg-type]
                for mid, spec in multi.rl_module_specs.items()
            },
        )

    def get_rollout_fragment_length(self, worker_index: int = 0) -> int:
        """'auto' is `n_step` steps per sub-env per iteration (RLlib's DQN and SAC)."""
        if self.rollout_fragment_length == "auto":
            return self.n_step
        return int(self.rollout_fragment_length)

    def validate(self) -> None:
        super().validate()
        if self.num_epochs != 1 or self.minibatch_size is not None:
            raise ValueError(
                f"num_epochs={self.num_epochs}, minibatch_size={self.minibatch_size}: "
                f"{type(self).__name__} takes one gradient step per replayed batch of "
                "train_batch_size transitions; set num_epochs=1, minibatch_size=None, and use "
                "training_intensity for more gradient steps per sampled step."
            )


def update_target_network(target: nn.Module, online: nn.Module, *, tau: float) -> None:
    """Polyak averaging `target <- tau * online + (1 - tau) * target` (Lillicrap et al. 2016,
    Algorithm 1); tau = 1 is DQN's periodic copy (Mnih et al. 2015)."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            if tau == 1.0:
                t.copy_(o)
            else:
                t.lerp_(o, tau)


class OffPolicyLearner(Learner):
    """A Learner with target networks and per-row TD errors (DQN's and SAC's base).

    Modules name their (target, online) network pairs in `target_network_pairs()`; the
    algorithm's loss records each module's TD errors with `record_td_errors`, and
    `update()` returns them as numpy arrays under `td_error` for the replay priorities.

    `update(..., num_gradient_steps=K)` takes K gradient steps in one call, on K
    consecutive equal blocks of each module's rows (uniform replay samples them at once),
    with the target networks' check after every step: the same weights, targets and TD
    errors as K `update()` calls on the blocks, with one batch conversion and one result
    dict (whose counters are the K steps' sums, diagnostics their means). Within one
    update the env-step counter does not move, so a target network moves at most once
    (after the first step, if due) unless `target_network_update_freq=0`; subclasses use
    `target_fixed_for_rest_of_update` to compute target values for the remaining steps in
    one pass.
    """

    def build(self) -> None:
        super().build()
        self._last_target_update: dict[str, int] = dict.fromkeys(self._optimizers, 0)
        self._target_version: dict[str, int] = dict.fromkeys(self._optimizers, 0)
        self._td_errors: dict[str, list[torch.Tensor]] = {}
        self._num_steps_this_update = 1
        self._update_timesteps: dict[str, int] = {}

    def record_td_errors(self, module_id: str, td_errors: torch.Tensor) -> None:
        """Stores one gradient step's per-row TD errors of `module_id` (`[B]`, detached)."""
        self._td_errors.setdefault(module_id, []).append(td_errors.detach())

    def update(
        self,
        batches: NumpyBatch | Sequence[NumpyBatch],
        *,
        timesteps: Mapping[str, int] | None = None,
        num_gradient_steps: int = 1,
    ) -> dict[str, dict[str, Any]]:
        """`Learner.update` (one gradient step per replayed batch), or with
        `num_gradient_steps=K` K steps on K consecutive blocks of each module's rows (see
        the class docstring). Per-row TD errors are returned under `td_error`, in row order."""
        if isinstance(num_gradient_steps, bool) or num_gradient_steps < 1:
            raise ValueError(f"num_gradient_steps={num_gradient_steps!r} must be an int >= 1.")
        self._td_errors = {}
        self._num_steps_this_update = num_gradient_steps
        self._update_timesteps = dict(timesteps or {})
        try:
            results: dict[str, dict[str, Any]] = super().update(batches, timesteps=timesteps)
        finally:
            self._num_steps_this_update = 1
        for mid, tds in self._td_errors.items():
            results[mid][TD_ERROR] = (tds[0] if len(tds) == 1 else torch.cat(tds)).cpu().numpy()
        return results

    def _minibatches(
        self, batch: TensorBatch, num_rows: Mapping[str, int], num_steps: int, size: int | None
    ) -> Iterator[tuple[TensorBatch, list[tuple[Any, list[Any]]]]]:
        """One minibatch per gradient step: all rows, or with `num_gradient_steps=K` the K
        row blocks in order, the target networks' check run between them (the Learner
        runs it after the last, as after any update)."""
        steps = self._num_steps_this_update
        if steps == 1:
            yield from super()._minibatches(batch, num_rows, num_steps, size)
            return
        for mid, n in num_rows.items():
            if n % steps:
                raise ValueError(
                    f"Module {mid!r} has {n} rows, not a multiple of num_gradient_steps="
                    f"{steps}: each gradient step trains on an equal block of rows."
                )
        for i in range(steps):
            if i:
                self.after_gradient_based_update(timesteps=self._update_timesteps)
            yield (
                {
                    mid: self.step_minibatch(mid, cols, i, steps)
                    for mid, cols in batch.items()
                    if num_rows[mid]
                },
                [],
            )

    def step_minibatch(
        self, module_id: str, cols: Mapping[str, torch.Tensor], step: int, num_steps: int
    ) -> dict[str, torch.Tensor]:
        """The rows of gradient step `step` of `num_steps` (block `step` of each column);
        subclasses add values precomputed for all steps (DQN: target Q-values)."""
        size = next(iter(cols.values())).shape[0] // num_steps
        return {c: v[step * size : (step + 1) * size] for c, v in cols.items()}

    def target_fixed_for_rest_of_update(self, module_id: str) -> bool:
        """Whether `module_id`'s target networks keep their weights until this update's
        last gradient step: `target_network_update_freq > 0` and the update's env-step
        count is not due for a target update (within one update it is due at most once)."""
        config: Any = self.config.get_config_for_module(module_id)
        now = int(self._update_timesteps.get("num_env_steps_sampled_lifetime", 0))
        freq = config.target_network_update_freq
        return freq > 0 and now - self._last_target_update[module_id] < freq

    def target_version(self, module_id: str) -> int:
        """How often `module_id`'s target networks moved (changes when their weights do)."""
        return self._target_version[module_id]

    def after_gradient_based_update(self, *, timesteps: Mapping[str, int]) -> None:
        """Target networks: `target <- tau * online + (1 - tau) * target` once
        `target_network_update_freq` env steps were sampled since the last update."""
        assert self.module is not None
        now = int(timesteps.get("num_env_steps_sampled_lifetime", 0))
        for mid in self._optimizers:
            config: Any = self.config.get_config_for_module(mid)
            if now - self._last_target_update[mid] >= config.target_network_update_freq:
                pairs = getattr(self.module[mid], "target_network_pairs", list)  # none: ICM
                for target, online in pairs():
                    update_target_network(target, online, tau=config.tau)
                self._last_target_update[mid] = now
                self._target_version[mid] += 1

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """The Learner's state plus when each module's target network last moved."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        if components is None:
            state["last_target_update"] = dict(self._last_target_update)
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._last_target_update.update(
            {m: int(t) for m, t in state.get("last_target_update", {}).items()}
        )


class OffPolicyAlgorithm(Algorithm):
    """Sample, store n-step transitions per module, replay them to the Learners, sync.

    Checkpoints hold the replay buffer as the `replay_buffer/` component only with
    `store_buffer_in_checkpoints=True` (RLlib's setting; off by default, as buffers are
    large). Without it, a restored algorithm starts with an empty buffer: its counters say
    learning has started, so it trains at once on the few transitions sampled since the
    restore (raise `num_steps_sampled_before_learning_starts` by the steps already sampled
    to refill it first).
    """

    config: OffPolicyConfig

    def setup(self) -> None:
        super().setup()
        config = self.config

        def n_step(module_id: str) -> tuple[int, float]:
            module_config: Any = config.get_config_for_module(module_id)
            return module_config.n_step, module_config.gamma

        self.replay_buffer = MultiAgentReplayBuffer(
            replay_buffer_config=config.replay_buffer_config, n_step=n_step, seed=config.seed
        )
        self._train_credit = 0.0  # gradient steps owed by training_intensity

    # ------------------------------------------------------------------ checkpoints
    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """The Algorithm's components, plus `replay_buffer` when
        `store_buffer_in_checkpoints` is on."""
        parts = super().get_checkpointable_components()
        if self.config.store_buffer_in_checkpoints:
            parts.append((REPLAY_BUFFER, self.replay_buffer))
        return parts

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """`Algorithm.get_state`, the replay buffer's state (if stored in checkpoints) and
        the fraction of a gradient step `training_intensity` still owes."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        if components is None:
            state["train_credit"] = self._train_credit
        return state

    def _state_setters(self) -> dict[str, Any]:
        """`Algorithm`'s, plus the replay buffer and the owed gradient steps."""

        def set_credit(value: float) -> None:
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value < math.inf
            ):
                raise CheckpointError(
                    f"State field 'train_credit' must be a finite number >= 0, got {value!r}."
                )
            self._train_credit = float(value)

        return {
            REPLAY_BUFFER: self.replay_buffer.set_state,
            "train_credit": set_credit,
            **super()._state_setters(),
        }

    def _state_backup(self, state: dict[str, Any]) -> dict[str, Any]:
        """`Algorithm`'s, plus the replay buffer when `state` restores one that
        checkpoints do not store (`store_buffer_in_checkpoints=False`)."""
        backup = super()._state_backup(state)
        if REPLAY_BUFFER in state and REPLAY_BUFFER not in backup:
            backup[REPLAY_BUFFER] = self.replay_buffer.get_state()
        return backup

    def _read_state(self, path: Path) -> dict[str, Any]:
        """Reads the checkpoint; says so when its buffer and `store_buffer_in_checkpoints`
        disagree, since training then resumes on an empty buffer."""
        state = super()._read_state(path)
        has_buffer = (path / REPLAY_BUFFER / METADATA_FILE).is_file()
        if self.config.store_buffer_in_checkpoints and not has_buffer:
            logger.warning(
                "%s holds no replay buffer (it was saved with store_buffer_in_checkpoints="
                "False): training resumes with an empty buffer.",
                path,
            )
        elif has_buffer and not self.config.store_buffer_in_checkpoints:
            logger.warning(
                "%s holds a replay buffer, but store_buffer_in_checkpoints=False: it is not "
                "loaded and training resumes with an empty buffer; set "
                "store_buffer_in_checkpoints=True to restore it.",
                path,
            )
        return state

    def _restore_part(self, path: Path, name: str, rest: str) -> None:
        """`restore_from_path(path, component="replay_buffer")` restores the buffer even
        with `store_buffer_in_checkpoints=False`: it was asked for by name."""
        if name != REPLAY_BUFFER or rest:
            super()._restore_part(path, name, rest)
            return
        self.replay_buffer.restore_from_path(
            path / REPLAY_BUFFER if (path / REPLAY_BUFFER).is_dir() else path
        )

    def _num_gradient_steps(self, rows_per_module: float) -> int:
        intensity = self.config.training_intensity
        if intensity is None:
            return 1
        self._train_credit += intensity * rows_per_module / self.config.train_batch_size
        steps = int(self._train_credit)
        self._train_credit -= steps
        return steps

    def _num_env_steps_sampled(self) -> int:
        """Env steps sampled so far, this iteration's included (with remote EnvRunners: as
        of the previous iteration, which the result dict reported)."""
        group = self.env_runner_group
        assert group is not None  # an online algorithm: setup() built it
        count = getattr(group.local_env_runner, "num_env_steps_sampled_lifetime", None)
        if count is not None and group.num_remote_env_runners() == 0:
            return int(count)
        return self.metrics.num_env_steps_lifetime

    def training_step(self) -> dict[str, Any]:
        group = self.env_runner_group
        assert group is not None  # an online algorithm: setup() built it
        with self._timer("sample_time_s"):
            samples = group.sample()
        rows = [len(b[next(iter(b))]) for sample in samples for b in sample.values() if b]
        # One n-step window per EnvRunner: by worker index (a failed runner's batch is
        # missing from `samples`, so list positions would pair windows wrongly).
        sources = group.last_sampled_worker_indices
        with self._timer("replay_add_time_s"):
            for source, sample in zip(sources, samples, strict=True):
                self.replay_buffer.add(sample, source=source)
        now = self._num_env_steps_sampled()
        if now < self.config.num_steps_sampled_before_learning_starts:
            return {}
        num_modules = max(1, len(rows))
        num_steps = self._num_gradient_steps(sum(rows) / num_modules)
        if num_steps > 1 and self._replays_at_once():
            return self._train_at_once(num_steps, now)
        results: list[dict[str, dict[str, Any]]] = []
        for _ in range(num_steps):
            with self._timer("replay_sample_time_s"):
                batch, indices = self.replay_buffer.sample(
                    self.config.train_batch_size, num_env_steps_sampled_lifetime=now
                )
            with self._timer("learn_time_s"):
                out: dict[str, dict[str, Any]] = self.learner_group.update(
                    batch, timesteps={"num_env_steps_sampled_lifetime": now}
                )
            td = {mid: r.pop(TD_ERROR) for mid, r in out.items() if TD_ERROR in r}
            self.replay_buffer.update_priorities(indices, td)
            results.append(out)
        if results:
            with self._timer("sync_weights_time_s"):
                group.sync_weights(from_learner_group=self.learner_group)
        return _mean_results(results)

    def _replays_at_once(self) -> bool:
        """Whether an iteration's gradient steps can draw their batches in one sample: with
        uniform replay (priorities do not change what is drawn; the buffer does not change
        during the steps, so one draw of K x B rows is K draws of B) and a local Learner."""
        return not self.replay_buffer.prioritized and not self.learner_group.is_remote

    def _train_at_once(self, num_steps: int, now: int) -> dict[str, Any]:
        """`num_steps` gradient steps from one replay sample of `num_steps` x
        `train_batch_size` rows per module and one Learner call (OffPolicyLearner's
        `num_gradient_steps`): what the step-by-step loop does, with one sample, one
        batch conversion and one result dict instead of `num_steps`."""
        timesteps = {"num_env_steps_sampled_lifetime": now}
        with self._timer("replay_sample_time_s"):
            batch, _ = self.replay_buffer.sample(
                self.config.train_batch_size * num_steps, num_env_steps_sampled_lifetime=now
            )
        with self._timer("learn_time_s"):
            out: dict[str, dict[str, Any]] = self.learner_group.foreach_learner(
                lambda learner: learner.update(
                    batch, timesteps=timesteps, num_gradient_steps=num_steps
                )
            )[0]
        for r in out.values():
            r.pop(TD_ERROR, None)  # uniform replay: no priorities to update
        assert self.env_runner_group is not None
        with self._timer("sync_weights_time_s"):
            self.env_runner_group.sync_weights(from_learner_group=self.learner_group)
        results = _mean_results([out])
        results[ALL_MODULES]["num_gradient_steps"] = num_steps
        return results


def _mean_results(results: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per-module means over the gradient steps of one iteration; counters are summed."""
    if not results:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for mid in results[-1]:
        keys = results[-1][mid].keys()
        out[mid] = {}
        for k in keys:
            values = [r[mid][k] for r in results if mid in r and k in r[mid]]
            summed = k.startswith("num_") and k != "num_trainable_parameters"
            out[mid][k] = float(np.sum(values) if summed else np.mean(values))
    out.setdefault(ALL_MODULES, {})["num_gradient_steps"] = len(results)
    return out
