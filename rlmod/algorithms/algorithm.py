"""Algorithm: wires EnvRunners and Learners from one config and reports each iteration.

Built by `config.build_algo()`; subclasses (PPO, ...) write `training_step`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlmod.algorithms.config_json import MUST_PASS
from rlmod.algorithms.iteration import IterationBudget, merge_learner_results, rows_trained
from rlmod.callbacks import Callbacks
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.learner_group import LearnerGroup
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.rl_module import RLModule
from rlmod.env.env_runner_group import EnvRunnerGroup
from rlmod.errors import CheckpointError, UnknownModuleIDError
from rlmod.utils import checkpoints
from rlmod.utils.checkpoints import Checkpointable, read_metadata, select_components
from rlmod.utils.metrics import EpisodeMetrics
from rlmod.utils.metrics_logger import MetricsLogger
from rlmod.utils.naming import did_you_mean
from rlmod.utils.seeding import seed_everything
from rlmod.utils.state_files import read_json, write_json
from rlmod.utils.trust import resolve_import_path

if TYPE_CHECKING:
    from typing import Self

CONFIG_FILE = "algorithm_config.json"

logger = logging.getLogger(__name__)


class Algorithm(Checkpointable):
    """The training loop: sample on EnvRunners, update Learners, sync weights, report.

    Checkpoints (RLlib's names): `save_to_path()`, `restore_from_path(path, component=...)`,
    `Algorithm.from_checkpoint(path)`, `get_state()` / `set_state()`; see
    `rlmod.utils.checkpoints` for the directory layout.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> algo = PPOConfig().environment("CartPole-v1").training(
        ...     train_batch_size=256, minibatch_size=64).build_algo()
        >>> result = algo.train()
        >>> result["num_env_steps_sampled_lifetime"] >= 256
        True
        >>> algo.stop()
    """

    def __init__(self, *, config: Any) -> None:
        config = self._as_own_config(config)
        config.validate()
        self.config = config.copy()
        self.config.freeze()
        self.iteration = 0
        self._time_total_s = 0.0
        self._saved: list[Path] = []  # this run's checkpoints, in save order (keep_last_n)
        self.setup()
        # After the whole setup, subclasses' included (DQN's replay buffers, ...).
        self.callbacks.call("on_algorithm_init", algorithm=self, metrics_logger=self.metrics_logger)

    def setup(self) -> None:
        """DESIGN.md's flow: EnvRunners first, their spaces define the Learners' modules."""
        config = self.config
        self._setup_bookkeeping()
        self.env_runner_group: EnvRunnerGroup | None = EnvRunnerGroup(config=config)
        spaces = self.env_runner_group.get_spaces()
        module_spec = config.get_multi_rl_module_spec(spaces=spaces, inference_only=False)
        self.learner_group = LearnerGroup(config=config, module_spec=module_spec)
        self.env_runner_group.sync_weights(from_learner_group=self.learner_group)

    def _setup_bookkeeping(self) -> None:
        """What every algorithm's setup() starts with, with or without EnvRunners: seeds,
        threads, callbacks, metric windows and loggers, no evaluation group yet."""
        config = self.config
        seed_everything(config.seed)
        torch.set_num_threads(config.num_threads_per_learner or 1)  # None: auto (1 here)
        self.callbacks = Callbacks.from_config(config)
        self.metrics_logger = MetricsLogger()  # Algorithm-side hooks log here: result[key]
        self._env_runner_logger = MetricsLogger()  # EnvRunners' logs, merged: env_runners/
        self.metrics = EpisodeMetrics(config.metrics_num_episodes_for_smoothing)
        self.eval_env_runner_group: EnvRunnerGroup | None = None
        self._last_evaluation: dict[str, Any] | None = None
        self._eval_thread: ThreadPoolExecutor | None = None
        self._timers: dict[str, float] = {}

    @classmethod
    def _as_own_config(cls, config: Any) -> Any:
        """A config of another class (a plain `AlgorithmConfig(algo_class=PPO)`) becomes
        one of this algorithm's config class holding its settings, as RLlib's Algorithm
        does (`default_config.update_from_dict(config.to_dict())`)."""
        try:
            default = cls.get_default_config()
        except TypeError:  # an Algorithm with no config class of its own
            return config
        if isinstance(config, type(default)) or not isinstance(default, type(config)):
            return config
        for name in config.settings():
            if name in default.settings():
                setattr(default, name, config.__dict__[name])
        return default

    @classmethod
    def get_default_config(cls) -> Any:
        """A fresh config of this algorithm's config class (RLlib's classmethod)."""
        from rlmod.algorithms.algorithm_config import AlgorithmConfig

        todo: list[type] = [AlgorithmConfig]
        while todo:
            config_cls = todo.pop()
            if getattr(config_cls, "algo_class", None) is cls:
                return config_cls()
            todo += config_cls.__subclasses__()
        raise TypeError(f"No AlgorithmConfig subclass has algo_class={cls.__name__}.")

    @classmethod
    def as_trainable(cls) -> type:
        """This algorithm as a Ray Tune trainable (needs `pip install 'rlmod[tune]'`):
        `tune.Tuner(PPO.as_trainable(), param_space=config)`, the config holding search
        spaces such as `training(lr=tune.grid_search([1e-3, 3e-4]))`; each step is one
        `train()`, checkpoints are rlmod's (JSON + safetensors). Once Tune is imported,
        making a config also registers this trainable under the algorithm's name, so
        `tune.Tuner("PPO", ...)` works too. The class itself is not a Tune `Trainable`
        (RLlib's is): that would make importing rlmod import Ray, an optional extra."""
        from rlmod.utils.ray_utils import tune_trainable

        return tune_trainable(cls)

    @property
    def env_runner(self) -> Any:
        """The local EnvRunner (RLlib's name); None for offline algorithms."""
        group = self.env_runner_group
        return None if group is None else group.local_env_runner

    def get_module(self, module_id: ModuleID = DEFAULT_MODULE_ID) -> RLModule:
        """The module `module_id` as the local EnvRunner holds it (RLlib's `get_module`):
        inference-only, with the Learner's latest weights. A module the EnvRunner does not
        hold (learner-only, or no local EnvRunner) comes from the Learner.

        Deliberate difference: RLlib returns None for an unknown ID; rlmod raises
        UnknownModuleIDError naming the known ones, instead of an AttributeError on None
        further down.
        """
        runner_module = getattr(self.env_runner, "module", None)
        if isinstance(runner_module, MultiRLModule):
            if module_id in runner_module:
                return runner_module[module_id]
        elif runner_module is not None and module_id == DEFAULT_MODULE_ID:
            return runner_module
        learner_module = self.learner_group.learner.module
        if learner_module is not None and module_id in learner_module:
            return learner_module[module_id]
        known = self.config.module_ids
        raise UnknownModuleIDError(
            f"get_module({module_id!r}): no such module; modules are {known[:10]}."
            f"{did_you_mean(str(module_id), known)}"
        )

    # ------------------------------------------------------------------ the loop
    def training_step(self) -> dict[str, Any]:
        """One iteration of the algorithm; returns `result["learners"]`."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step().")

    def train(self) -> dict[str, Any]:
        """Runs one `training_step` (plus evaluation when due); returns the result dict.

        As RLlib's: once an evaluation ran, every later result carries the last
        evaluation's numbers under `result["evaluation"]` until the next one replaces
        them. With `evaluation_parallel_to_training` the evaluation runs in a thread
        during the training step, on the weights from before it.
        """
        start = time.perf_counter()
        self._timers = {}
        interval = self.config.evaluation_interval
        evaluate_now = bool(interval) and (self.iteration + 1) % interval == 0
        parallel = None
        if evaluate_now and self.config.evaluation_parallel_to_training:
            # Built and given the weights here: the training step changes them meanwhile.
            self._eval_group().sync_weights(from_learner_group=self.learner_group)
            if self._eval_thread is None:
                self._eval_thread = ThreadPoolExecutor(max_workers=1)
            parallel = self._eval_thread.submit(self._evaluate, sync_weights=False)
        try:  # training_step() until the iteration's minimums are met (as RLlib's)
            budget, steps = IterationBudget(self.config), []
            while not budget.met():
                steps.append(self.training_step())
                budget.add(sampled=self._after_training_step(), trained=rows_trained(steps[-1]))
            learner_results, num_training_steps = merge_learner_results(steps), len(steps)
        finally:
            if parallel is not None:
                self._last_evaluation = parallel.result()
        self.iteration += 1
        group = self.env_runner_group
        env_runner_results = self.metrics.reduce()
        if group is not None:
            if self._env_runner_logger:
                env_runner_results.update(self._env_runner_logger.reduce())
            env_runner_results["num_healthy_env_runners"] = group.num_healthy_env_runners()
            env_runner_results["num_env_runner_restarts"] = group.num_remote_env_runner_restarts()
        result: dict[str, Any] = {
            "training_iteration": self.iteration,
            "num_training_step_calls_per_iteration": num_training_steps,
            "env_runners": env_runner_results,
            "learners": learner_results,
            "num_env_steps_sampled_lifetime": self.metrics.num_env_steps_lifetime,
            "num_agent_steps_sampled_lifetime": self.metrics.num_agent_steps_lifetime,
            "num_episodes_lifetime": self.metrics.num_episodes_lifetime,
            "timers": dict(self._timers),
        }
        if evaluate_now and parallel is None:
            self._last_evaluation = self.evaluate()
        if self._last_evaluation is not None:
            result["evaluation"] = self._last_evaluation
        if self.metrics_logger:
            result.update(self.metrics_logger.reduce())
        elapsed = time.perf_counter() - start
        self._time_total_s += elapsed
        result["time_this_iter_s"] = elapsed
        result["time_total_s"] = self._time_total_s
        frequency = self.config.checkpoint_frequency
        if frequency and self.iteration % frequency == 0:
            result["checkpoint_path"] = self.save_checkpoint_to_dir()
        self.callbacks.call(
            "on_train_result", algorithm=self, metrics_logger=self.metrics_logger, result=result
        )
        return result

    def _after_training_step(self) -> int:
        """Syncs the EnvRunners' connector states and counts their metrics after a
        `training_step()`; returns the env steps it sampled (for the iteration's
        minimums: `min_time_s_per_iteration`, `min_sample_timesteps_per_iteration`,
        `min_train_timesteps_per_iteration`)."""
        group = self.env_runner_group
        if group is None:
            return 0
        with self._timer("sync_env_runner_states_time_s"):
            group.sync_env_runner_states()
        runner_metrics: list[dict[str, Any]] = group.get_metrics()
        self.metrics.ingest(runner_metrics)
        sampled = 0
        for m in runner_metrics:
            sampled += m["num_env_steps"]
            if "metrics_logger" in m:
                self._env_runner_logger.merge_period(m["metrics_logger"])
        return sampled

    def save_checkpoint_to_dir(
        self, directory: str | os.PathLike | None = None, *, keep_last_n: int | None = None
    ) -> str:
        """Saves `checkpoint_<iteration>` into `directory` (default:
        `config.checkpoint_dir`) and returns its path.

        Only this Algorithm's own checkpoints are ever replaced or deleted: if another
        run's checkpoint of the same iteration is there, this one is saved beside it as
        `checkpoint_<iteration>_2` (`_3`, ...); `keep_last_n` (default:
        `config.keep_last_n`) deletes all but the newest n that this Algorithm saved.
        """
        directory = Path(directory if directory is not None else self.config.checkpoint_dir)
        if directory.exists() and not directory.is_dir():
            raise CheckpointError(
                f"checkpoint_dir {str(directory)!r} is a file; set checkpoint_dir (or "
                "--run-dir) to a directory."
            )
        keep = keep_last_n if keep_last_n is not None else self.config.keep_last_n
        path = checkpoints.free_checkpoint_path(directory, self.iteration, self._saved)
        self.save_to_path(path)
        if path in self._saved:
            self._saved.remove(path)
        self._saved.append(path)
        if keep is not None:
            checkpoints.prune_checkpoints(self._saved, keep)
        return str(path)

    @contextmanager
    def _timer(self, name: str) -> Iterator[None]:
        """Adds the block's wall time to `result["timers"][name]` of this iteration."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._timers[name] = self._timers.get(name, 0.0) + time.perf_counter() - start

    def _eval_group(self) -> EnvRunnerGroup:
        """The evaluation EnvRunners, built on first use from
        `config.get_evaluation_config_object()`."""
        if self.eval_env_runner_group is None:
            eval_config = self.config.get_evaluation_config_object()
            eval_config.num_env_runners = 0
            eval_config.output = None  # offline_data(output=...) records training only
            if eval_config.seed is not None:
                eval_config.seed = eval_config.seed + 10_000  # other episodes than training
            eval_config.freeze()
            self.eval_env_runner_group = EnvRunnerGroup(config=eval_config)
        return self.eval_env_runner_group

    def evaluate(self) -> dict[str, Any]:
        """Runs `evaluation_duration` episodes (or timesteps, split over the evaluation
        EnvRunners) with the current weights and `evaluation_config`; returns
        `{"env_runners": {...}}` (RLlib's `Algorithm.evaluate()`), custom metrics of
        EnvRunner-side callbacks included. Calls on_evaluate_start / on_evaluate_end."""
        return self._evaluate(sync_weights=True)

    def _evaluate(self, *, sync_weights: bool) -> dict[str, Any]:
        self.callbacks.call("on_evaluate_start", algorithm=self, metrics_logger=self.metrics_logger)
        group = self._eval_group()
        if sync_weights:
            group.sync_weights(from_learner_group=self.learner_group)
        unit = self.config.evaluation_duration_unit
        key = "num_episodes" if unit == "episodes" else "num_timesteps"
        per_runner = -(-self.config.evaluation_duration // max(1, group.num_remote_env_runners()))
        group.sample(**{key: per_runner})
        runner_metrics = group.get_metrics()
        env_runners = EpisodeMetrics(10**9).add(runner_metrics)
        env_runners.update(_merge_custom(MetricsLogger(), runner_metrics))
        results = {"env_runners": env_runners}
        self.callbacks.call(
            "on_evaluate_end",
            algorithm=self,
            metrics_logger=self.metrics_logger,
            evaluation_metrics=results,
        )
        return results

    # ------------------------------------------------------------------ checkpoints
    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        parts: list[tuple[str, Checkpointable]] = [("learner_group", self.learner_group)]
        group = self.env_runner_group  # None for offline algorithms
        runner = group.checkpointable_env_runner() if group is not None else None  # remote too
        if runner is not None:
            parts.append(("env_runner", runner))
        return parts

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Learner state (weights, optimizers, RNG), the local EnvRunner's connector states
        (not its weights: they are the Learner's), counters and metric windows."""
        state: dict[str, Any] = {}
        for name, part in self.get_checkpointable_components():
            wanted, inc, exc = select_components(components, not_components, name)
            if name == "env_runner":  # its module duplicates the Learner's
                exc = [*(exc or []), "rl_module"]
            if wanted:
                state[name] = part.get_state(inc, not_components=exc)
        if components is None:
            state.update(
                iteration=self.iteration,
                time_total_s=self._time_total_s,
                metrics=self.metrics.get_state(),
                torch_rng=torch.get_rng_state(),
            )
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores any subset of `get_state()` and sends the restored weights to the
        EnvRunners.

        All or nothing: if any part does not load (a corrupt checkpoint, a state from
        another config), every part already set is put back as it was and a
        CheckpointError names the failing part; Learners, EnvRunners and counters then
        hold what they held before the call.
        """
        _check_counters(state)
        parts = sorted(self._state_setters())
        unknown = sorted(set(state) - set(parts))
        if unknown:
            raise CheckpointError(
                f"The state holds parts this {type(self).__name__} does not have: "
                f"{unknown}.{did_you_mean(unknown[0], parts)} Its parts are {parts}; nothing "
                "was changed."
            )
        with self._all_or_nothing(self._state_backup(state)):
            self._apply_state(state)
        self._sync_env_runner_weights()

    def _apply_state(self, state: dict[str, Any]) -> None:
        for part, apply in self._state_setters().items():
            if part in state:
                try:
                    apply(state[part])
                except _NAMED_ERRORS:
                    raise
                except Exception as e:
                    raise CheckpointError(
                        f"Restoring part {part!r} failed ({type(e).__name__}: {e})"
                    ) from e

    @contextmanager
    def _all_or_nothing(self, backup: dict[str, Any]) -> Iterator[None]:
        """Runs the block; if it raises, applies (a copy of) `backup`, taken before, and
        raises a CheckpointError that says nothing was changed."""
        backup = checkpoints.clone_state(backup)
        try:
            yield
        except Exception as e:
            try:
                self._apply_state(backup)
            except Exception as again:
                raise CheckpointError(
                    f"{e}; putting the previous state back failed too ({again}): this "
                    "Algorithm is inconsistent, build a new one."
                ) from e
            if isinstance(e, UnknownModuleIDError):  # keep its type: callers catch it
                e.add_note("Nothing was changed (every part is back as it was before).")
                raise
            raise CheckpointError(
                f"{str(e).rstrip('.')}; nothing was changed (every part is back as it was before)."
            ) from e

    def _state_setters(self) -> dict[str, Any]:
        """How each top-level key of `get_state()` is restored, in order."""

        def set_iteration(value: int) -> None:
            self.iteration = value

        def set_time(value: float) -> None:
            self._time_total_s = float(value)

        def set_metrics(value: dict[str, Any]) -> None:
            metrics = EpisodeMetrics(self.config.metrics_num_episodes_for_smoothing)
            metrics.set_state(value)
            self.metrics = metrics

        def set_env_runner(value: dict[str, Any]) -> None:
            if self.env_runner_group is not None:
                self.env_runner_group.set_env_runner_state(value)

        return {
            "learner_group": self.learner_group.set_state,
            "env_runner": set_env_runner,
            "iteration": set_iteration,
            "time_total_s": set_time,
            "metrics": set_metrics,
            "torch_rng": torch.set_rng_state,
        }

    def _state_backup(self, state: dict[str, Any]) -> dict[str, Any]:
        """What `set_state(state)` puts back if it fails (before cloning)."""
        return self.get_state()

    def restore_from_path(
        self, path: str | os.PathLike, *, component: str | None = None, **kwargs: Any
    ) -> None:
        """As `Checkpointable.restore_from_path`, then sends the weights to EnvRunners. All
        or nothing, as `set_state`: a component that fails to load leaves every part as
        it was."""
        try:
            backup = self.get_state(components=component) if component is not None else None
        except UnknownModuleIDError:
            backup = None  # the restore names the unknown module before it changes anything
        if backup is None:
            super().restore_from_path(path, component=component, **kwargs)  # full: set_state
            return
        with self._all_or_nothing(backup):
            super().restore_from_path(path, component=component, **kwargs)
        self._sync_env_runner_weights()

    def _sync_env_runner_weights(self) -> None:
        if self.env_runner_group is not None:
            self.env_runner_group.sync_weights(from_learner_group=self.learner_group)
        self.callbacks.call("on_checkpoint_loaded", algorithm=self)

    def get_metadata(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "num_env_steps_sampled_lifetime": self.metrics.num_env_steps_lifetime,
        }

    def _write_own_state(self, directory: Path, state: dict[str, Any]) -> None:
        super()._write_own_state(directory, state)
        write_json(
            directory / CONFIG_FILE,
            {
                "class": checkpoints._class_path(type(self.config)),
                "settings": self.config.to_dict(allow_unnamed=True),
            },
            indent=1,
        )

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike,
        *,
        config: Any = None,
        trusted_modules: Iterable[str] = (),
        **overrides: Any,
    ) -> Self:
        """Builds the Algorithm a checkpoint was saved from and restores its state.

        Args:
            path: The checkpoint directory (`save_to_path`'s return value), or a run dir
                of `rlmod train` (its newest complete checkpoint is loaded, as
                `rlmod evaluate RUN_DIR` and `--resume RUN_DIR` do).
            config: Use this config instead of the stored one.
            trusted_modules: Packages besides rlmod whose classes and functions the stored
                config may name (e.g. your env's package); anything else is refused before
                it is imported (rlmod.utils.trust).
            **overrides: Settings to use instead of the stored ones, e.g. the
                `policy_mapping_fn=` that was a lambda when saved (lambdas have no import
                path and are not stored), or `env=MyEnv` instead of trusting its package.
        """
        path = checkpoints.resolve_checkpoint(path)
        meta = read_metadata(path)
        trusted = tuple(trusted_modules)
        stored = meta["class"]
        algo_cls: Any = cls
        if stored != checkpoints._class_path(cls):
            try:
                algo_cls = resolve_import_path(
                    stored,
                    setting=f"{path / 'metadata.json'}: class",
                    kind="algorithm",
                    trusted_modules=trusted,
                )
            except ValueError as e:
                raise CheckpointError(str(e)) from e
            if not issubclass(algo_cls, cls):
                raise CheckpointError(
                    f"{path} holds a {algo_cls.__name__} checkpoint, not a {cls.__name__}; "
                    f"load it with {algo_cls.__name__}.from_checkpoint or "
                    "Algorithm.from_checkpoint."
                )
        if config is None:
            config = _config_from_file(path / CONFIG_FILE, trusted, overrides)
        algo = algo_cls(config=config)
        algo.restore_from_path(path)
        return algo

    def stop(self) -> None:
        """Closes envs and actors."""
        if self.env_runner_group is not None:
            self.env_runner_group.stop()
        self.learner_group.stop()
        if self.eval_env_runner_group is not None:
            self.eval_env_runner_group.stop()
        if self._eval_thread is not None:
            self._eval_thread.shutdown()


_NAMED_ERRORS = (CheckpointError, UnknownModuleIDError)
"""rlmod's errors a restore raises as they are: their messages name the part already."""


def _check_counters(state: dict[str, Any]) -> None:
    """CheckpointError unless the state's counters are what `get_state` writes: an
    `iteration` int >= 0 and a finite `time_total_s` >= 0."""
    iteration = state.get("iteration", 0)
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise CheckpointError(
            f"State field 'iteration' must be an int >= 0, got {iteration!r}; the checkpoint "
            "is corrupt or was edited."
        )
    seconds = state.get("time_total_s", 0.0)
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise CheckpointError(
            f"State field 'time_total_s' must be a finite number >= 0, got {seconds!r}; the "
            "checkpoint is corrupt or was edited."
        )


def _merge_custom(logger: MetricsLogger, runner_metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """What EnvRunner-side callbacks logged, over all EnvRunners, reduced (`{}` if none)."""
    for m in runner_metrics:
        if "metrics_logger" in m:
            logger.merge_period(m["metrics_logger"])
    return logger.reduce() if logger else {}


NOT_NEEDED_TO_ACT = (
    "env",
    "policy_mapping_fn",
    "policies_to_train",
    "learner_connector",
    "env_runner_cls",
)
"""Settings an InferencePolicy never calls: left at their defaults when they were lambdas."""


def _config_from_file(
    file: Path,
    trusted: tuple[str, ...],
    overrides: dict[str, Any],
    *,
    skip_unstored: Iterable[str] = (),
) -> Any:
    """The config stored in `file`; errors name the file and the setting.

    Settings named in `skip_unstored` that were lambdas when saved stay at their defaults
    instead of being asked for (e.g. the mapping function, which acting never calls).
    """
    data = read_json(file)
    settings = data.get("settings")
    if not isinstance(data.get("class"), str) or not isinstance(settings, dict):
        raise CheckpointError(
            f"{file} must hold {{'class': 'module:ConfigClass', 'settings': {{...}}}}."
        )
    skip = set(skip_unstored)
    settings = {
        k: v
        for k, v in settings.items()
        if not (k in skip and isinstance(v, dict) and MUST_PASS in v)
    }
    try:
        config_cls = resolve_import_path(
            data["class"], setting=f"{file}: class", kind="config", trusted_modules=trusted
        )
        config = config_cls.from_dict(
            {k: v for k, v in settings.items() if k not in overrides}, trusted_modules=trusted
        )
        for name, value in overrides.items():
            setattr(config, name, value)
    except (ValueError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{file}: {e}") from e
    except RecursionError:
        raise CheckpointError(
            f"{file}: a setting nests deeper than Python can read; the file is corrupt or crafted."
        ) from None
    return config
