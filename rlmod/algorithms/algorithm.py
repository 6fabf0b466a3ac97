"""Algorithm: wires EnvRunners and Learners from one config and reports each iteration.

Built by `config.build_algo()`; subclasses (PPO, ...) write `training_step`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from rlmod.core.learner_group import LearnerGroup
from rlmod.env.env_runner_group import EnvRunnerGroup
from rlmod.utils.metrics import EpisodeMetrics
from rlmod.utils.seeding import seed_everything

logger = logging.getLogger(__name__)


class Algorithm:
    """The training loop: sample on EnvRunners, update Learners, sync weights, report.

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
        config.validate()
        self.config = config.copy()
        self.config.freeze()
        self.iteration = 0
        self._time_total_s = 0.0
        self.setup()

    def setup(self) -> None:
        """DESIGN.md's flow: EnvRunners first, their spaces define the Learners' modules."""
        config = self.config
        seed_everything(config.seed)
        torch.set_num_threads(config.num_threads_per_learner)
        self.env_runner_group = EnvRunnerGroup(config=config)
        spaces = self.env_runner_group.get_spaces()
        module_spec = config.get_multi_rl_module_spec(spaces=spaces, inference_only=False)
        self.learner_group = LearnerGroup(config=config, module_spec=module_spec)
        self.env_runner_group.sync_weights(from_learner_group=self.learner_group)
        self.metrics = EpisodeMetrics(config.metrics_num_episodes_for_smoothing)
        self.eval_env_runner_group: EnvRunnerGroup | None = None
        self._timers: dict[str, float] = {}

    @property
    def env_runner(self) -> Any:
        """The local EnvRunner (RLlib's name)."""
        return self.env_runner_group.local_env_runner

    # ------------------------------------------------------------------ the loop
    def training_step(self) -> dict[str, Any]:
        """One iteration of the algorithm; returns `result["learners"]`."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step().")

    def train(self) -> dict[str, Any]:
        """Runs one `training_step` (plus evaluation when due); returns the result dict."""
        start = time.perf_counter()
        self._timers = {}
        learner_results = self.training_step()
        self.iteration += 1
        env_runner_results = self.metrics.add(self.env_runner_group.get_metrics())
        result: dict[str, Any] = {
            "training_iteration": self.iteration,
            "env_runners": env_runner_results,
            "learners": learner_results,
            "num_env_steps_sampled_lifetime": self.metrics.num_env_steps_lifetime,
            "num_agent_steps_sampled_lifetime": self.metrics.num_agent_steps_lifetime,
            "num_episodes_lifetime": self.metrics.num_episodes_lifetime,
            "timers": dict(self._timers),
        }
        interval = self.config.evaluation_interval
        if interval and self.iteration % interval == 0:
            result["evaluation"] = self.evaluate()
        elapsed = time.perf_counter() - start
        self._time_total_s += elapsed
        result["time_this_iter_s"] = elapsed
        result["time_total_s"] = self._time_total_s
        return result

    def _timed(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self._timers[name] = self._timers.get(name, 0.0) + time.perf_counter() - start
        return out

    def evaluate(self) -> dict[str, Any]:
        """Runs `evaluation_duration` episodes (or timesteps) on a separate EnvRunner with the
        current weights; returns `{"env_runners": {...}}`."""
        if self.eval_env_runner_group is None:
            eval_config = self.config.copy()
            eval_config.num_env_runners = 0
            eval_config.explore = self.config.evaluation_explore
            if self.config.seed is not None:
                eval_config.seed = self.config.seed + 10_000  # other episodes than training
            self.eval_env_runner_group = EnvRunnerGroup(config=eval_config)
        group = self.eval_env_runner_group
        group.sync_weights(from_learner_group=self.learner_group)
        unit = self.config.evaluation_duration_unit
        key = "num_episodes" if unit == "episodes" else "num_timesteps"
        group.sample(**{key: self.config.evaluation_duration})
        window = EpisodeMetrics(10**9)
        return {"env_runners": window.add(group.get_metrics())}

    def stop(self) -> None:
        """Closes envs and actors."""
        self.env_runner_group.stop()
        if self.eval_env_runner_group is not None:
            self.eval_env_runner_group.stop()
