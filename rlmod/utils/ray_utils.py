"""The one place that imports Ray: the same EnvRunner / Learner classes as Ray actors.

Used by EnvRunnerGroup and LearnerGroup when `num_env_runners` / `num_learners` > 0.
"""

from __future__ import annotations

from typing import Any


def require_ray(setting: str = "num_env_runners > 0 or num_learners > 0") -> Any:
    """Imports ray, or explains how to install it; `setting` names what asked for Ray."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            f"{setting} runs components as Ray actors, but ray is not installed. Install it "
            "with `pip install 'rlmod[ray]'`, or set num_env_runners=0 and num_learners=0 to "
            "run in-process (fastest on one machine)."
        ) from e
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    return ray


def make_remote_env_runners(runner_cls: type, config: Any) -> list[Any]:
    """`config.num_env_runners` actors of `runner_cls`, worker indices 1..N."""
    ray = require_ray(f"num_env_runners={config.num_env_runners}")
    actor_cls = ray.remote(num_cpus=1)(runner_cls)
    return [actor_cls.remote(config=config, worker_index=i + 1)
            for i in range(config.num_env_runners)]


def call_all(actors: list[Any], method: str, *args: Any, **kwargs: Any) -> list[Any]:
    """Calls `method` on all actors in parallel and waits for all results."""
    ray = require_ray()
    return ray.get([getattr(a, method).remote(*args, **kwargs) for a in actors])


def first_healthy(actors: list[Any], method: str, *args: Any, **kwargs: Any) -> Any:
    """The result of `method` on the first actor that answers."""
    ray = require_ray()
    errors = []
    for actor in actors:
        try:
            return ray.get(getattr(actor, method).remote(*args, **kwargs))
        except ray.exceptions.RayError as e:  # a dead actor: try the next one
            errors.append(e)
    raise RuntimeError(f"No healthy remote EnvRunner answered {method}(): {errors}")


def kill_all(actors: list[Any]) -> None:
    ray = require_ray()
    for actor in actors:
        ray.kill(actor)
