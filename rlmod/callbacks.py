"""RLlibCallback: user hooks into the Algorithm's loop and the EnvRunners' episodes.

Registered with `config.callbacks(MyCallback)`; built once per Algorithm and per EnvRunner
(as RLlib does), and dispatched by `Callbacks`, which decides per class at build time
which hooks are overridden, so an unused hook costs nothing while sampling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

ALGORITHM_HOOKS = (
    "on_algorithm_init",
    "on_train_result",
    "on_evaluate_start",
    "on_evaluate_end",
    "on_checkpoint_loaded",
)
"""Hooks the Algorithm calls."""

ENV_RUNNER_HOOKS = (
    "on_environment_created",
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_sample_end",
)
"""Hooks EnvRunners call."""

EPISODE_HOOKS = (
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_sample_end",
)
"""Hooks that need episode objects: an EnvRunner builds them only if one is in use."""

HOOKS = ALGORITHM_HOOKS + ENV_RUNNER_HOOKS


class RLlibCallback:
    """Base class of user callbacks; override the hooks you need (all are no-ops).

    The hook names, keyword-only signatures and call points are RLlib's (ray 2.60,
    `ray/rllib/callbacks/callbacks.py`). `metrics_logger` is a
    `rlmod.utils.metrics_logger.MetricsLogger`: what EnvRunner-side hooks log shows under
    `result["env_runners"][key]`, what Algorithm-side hooks log under `result[key]`.
    Episodes are `rlmod.env.episodes.SingleAgentEpisode` / `MultiAgentEpisode`.

    Deliberate differences: `env` is the EnvRunner's vector env (single-agent) or the
    env the episode runs in (multi-agent), not RLlib's `env.unwrapped`; the old-stack
    arguments (`worker`, `base_env`, `policies`) are not passed.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> class EpisodeLength(RLlibCallback):
        ...     def on_episode_end(self, *, episode, metrics_logger, **kwargs):
        ...         metrics_logger.log_value("my_len", len(episode), reduce="mean")
        >>> config = (PPOConfig().environment("CartPole-v1").callbacks(EpisodeLength)
        ...           .training(train_batch_size=500, minibatch_size=100))
        >>> algo = config.build_algo()
        >>> result = algo.train()
        >>> result["env_runners"]["my_len"] > 0
        True
        >>> algo.stop()
    """

    def on_algorithm_init(
        self, *, algorithm: Any, metrics_logger: Any = None, **kwargs: Any
    ) -> None:
        """At the end of the Algorithm's setup."""

    def on_train_result(
        self, *, algorithm: Any, metrics_logger: Any = None, result: dict, **kwargs: Any
    ) -> None:
        """After each `train()` result is complete; may change `result` in place."""

    def on_evaluate_start(
        self, *, algorithm: Any, metrics_logger: Any = None, **kwargs: Any
    ) -> None:
        """Before an evaluation round."""

    def on_evaluate_end(
        self, *, algorithm: Any, metrics_logger: Any = None, evaluation_metrics: dict, **kwargs: Any
    ) -> None:
        """After an evaluation round, with its results (may change them in place)."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """After `restore_from_path` / `from_checkpoint` restored the Algorithm."""

    def on_environment_created(
        self,
        *,
        env_runner: Any,
        metrics_logger: Any = None,
        env: Any,
        env_context: dict,
        **kwargs: Any,
    ) -> None:
        """After an EnvRunner made its (vector) env."""

    def on_episode_created(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        rl_module: Any = None,
        env_index: int,
        **kwargs: Any,
    ) -> None:
        """When an episode object is made. RLlib calls it before the env's reset;
        rlmod right after it, before on_episode_start (a vector env resets all sub-envs
        at once), so the episode already holds its first observation."""

    def on_episode_start(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        env_index: int,
        rl_module: Any = None,
        **kwargs: Any,
    ) -> None:
        """After the reset; `episode` holds the first observation and info."""

    def on_episode_step(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        env_index: int,
        rl_module: Any = None,
        **kwargs: Any,
    ) -> None:
        """After each env step of the episode (the last one included)."""

    def on_episode_end(
        self,
        *,
        episode: Any,
        prev_episode_chunks: list | None = None,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        env_index: int,
        rl_module: Any = None,
        **kwargs: Any,
    ) -> None:
        """After the episode's last step (terminated or truncated), after
        on_episode_step for that step. `prev_episode_chunks` is always [] (rlmod keeps the
        whole episode in one object)."""

    def on_sample_end(
        self, *, env_runner: Any = None, metrics_logger: Any = None, samples: list, **kwargs: Any
    ) -> None:
        """At the end of `EnvRunner.sample()`; `samples` lists the episodes of this call
        (those finished, then those still running), as RLlib's list of episodes."""


def _overrides(obj: Any, hook: str) -> bool:
    """Whether `obj`'s class overrides `hook` (decided once per class, never per step)."""
    base = getattr(RLlibCallback, hook)
    return getattr(type(obj), hook, base) is not base


class Callbacks:
    """The callbacks of one Algorithm or EnvRunner: the user's instances and per-hook
    callables, per hook only those that do something.

    Order per hook as RLlib's `make_callback`: the class instances (in list order), then
    the callables given as `callbacks(on_<hook>=...)`.
    """

    def __init__(
        self, classes: Iterable[type] = (), functions: dict[str, list[Callable]] | None = None
    ) -> None:
        self.instances = [cls() for cls in classes]
        functions = functions or {}
        self._handlers: dict[str, list[Callable]] = {}
        for hook in HOOKS:
            fns = [getattr(inst, hook) for inst in self.instances if _overrides(inst, hook)]
            fns += functions.get(hook, [])
            if fns:
                self._handlers[hook] = fns

    @classmethod
    def from_config(cls, config: Any) -> Callbacks:
        """Instances of `config.callbacks_class` (a class or a list) plus the
        `callbacks_on_<hook>` callables."""
        classes = config.callbacks_class
        classes = (
            []
            if classes is None
            else (list(classes) if isinstance(classes, list | tuple) else [classes])
        )
        functions: dict[str, list[Callable]] = {}
        for hook in HOOKS:
            fns = getattr(config, f"callbacks_{hook}", None)
            if fns is not None:
                functions[hook] = list(fns) if isinstance(fns, list | tuple) else [fns]
        return cls(classes, functions)

    def has(self, hook: str) -> bool:
        """Whether anything handles `hook` (check once, at build time, on hot paths)."""
        return hook in self._handlers

    def any_of(self, hooks: Iterable[str]) -> bool:
        return any(h in self._handlers for h in hooks)

    def call(self, hook: str, **kwargs: Any) -> None:
        """Calls every handler of `hook` with RLlib's keyword arguments."""
        for fn in self._handlers.get(hook, ()):
            fn(**kwargs)

    def __bool__(self) -> bool:
        return bool(self._handlers)
