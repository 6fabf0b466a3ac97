"""The one place that imports Ray: the same EnvRunner / Learner classes as Ray actors.

Used by EnvRunnerGroup when `num_env_runners > 0` and LearnerGroup when `num_learners > 0`.
Ray is imported lazily, so rlmod works without it; asking for remote components without
it raises an ImportError that says how to install it. Everything here is transport: what
runs inside an actor is the in-process class's own method.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Call = tuple[str | Callable[..., Any], tuple[Any, ...], dict[str, Any]]
"""One call on an actor: a method name or a function `f(env_runner, *args, **kwargs)`
(run through `EnvRunner.apply`), with its positional and keyword arguments."""


def require_ray(setting: str = "num_env_runners > 0 or num_learners > 0") -> Any:
    """Imports ray and starts or joins a cluster, or explains how to install it.

    `ray.init()` joins the cluster named by `RAY_ADDRESS` or one started on this machine
    with `ray start --head`, else starts a local one; a session started earlier (a test's
    `ray.init(num_cpus=2)`) is reused as it is. `setting` names what asked for Ray.
    """
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


def make_actor(runner_cls: type, config: Any, worker_index: int) -> Any:
    """A Ray actor of `runner_cls(config=config, worker_index=worker_index)`, reserving
    `config.num_cpus_per_env_runner` CPUs. Ray does not restart it itself: EnvRunnerGroup
    decides (and counts) restarts, so that a restarted runner gets the current state.
    Returns at once; the actor builds in its own process, in parallel with the others."""
    require_ray(f"num_env_runners={config.num_env_runners}")
    actor_cls = _actor_class(runner_cls).options(
        num_cpus=config.num_cpus_per_env_runner, max_restarts=0, max_task_retries=0
    )
    return actor_cls.remote(config=config, worker_index=worker_index)


_ACTOR_CLASSES: dict[tuple[type, str], Any] = {}


def _actor_class(cls: type) -> Any:
    """`ray.remote(cls)`, once per class and Ray session: each new one pickles and
    exports the class again (0.1-0.2 s per actor on a 2-core host)."""
    ray = require_ray()
    key = (cls, ray.get_runtime_context().get_job_id())
    if key not in _ACTOR_CLASSES:
        _ACTOR_CLASSES[key] = ray.remote(cls)
    return _ACTOR_CLASSES[key]


def make_data_parallel_learners(learner_cls: type, config: Any, module_spec: Any) -> list[Any]:
    """`config.num_learners` actors of `learner_cls`, joined into one torch.distributed
    group (gloo on CPUs, NCCL on GPUs) whose rendezvous is a free port on rank 0's node,
    then built (rank 0's initial weights broadcast to all). Each reserves
    `config.num_cpus_per_learner` CPUs and `config.num_gpus_per_learner` GPUs."""
    ray = require_ray(f"num_learners={config.num_learners}")
    n = config.num_learners
    gpus = float(config.num_gpus_per_learner)
    have = float(ray.cluster_resources().get("GPU", 0.0))
    if gpus > 0 and have < n * gpus:
        # Ray would keep such actors pending forever (RLlib's Learners hang there).
        raise ValueError(
            f"num_learners={n} x num_gpus_per_learner={config.num_gpus_per_learner} needs "
            f"{n * gpus:g} GPUs, but the Ray cluster has {have:g}. Lower num_learners or "
            "num_gpus_per_learner (0 trains on CPUs), or add GPU nodes (`ray start "
            "--address=... --num-gpus=...`)."
        )
    actor_cls = _actor_class(learner_cls).options(
        num_cpus=config.num_cpus_per_learner, num_gpus=gpus, max_restarts=0
    )
    actors = [actor_cls.remote(config=config, module_spec=module_spec) for _ in range(n)]
    host, port = ray.get(actors[0].apply.remote(_free_address))
    init_method = f"tcp://{host}:{port}"
    ray.get(
        [
            a.setup_data_parallel.remote(rank=i, world_size=n, init_method=init_method)
            for i, a in enumerate(actors)
        ]
    )
    ray.get([a.build.remote() for a in actors])
    return actors


def _free_address(_learner: Any) -> tuple[str, int]:
    import socket

    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = int(s.getsockname()[1])
    return str(ray.util.get_node_ip_address()), port


def get_all(refs: Sequence[Any]) -> tuple[list[Any] | None, int | None, BaseException | None]:
    """Waits for `refs` (one per actor) as they finish; returns `(results, None, None)`,
    or `(None, index, error)` at the first one that fails (the exception its method raised,
    unwrapped, or a RayActorError for a dead actor), without waiting for the others:
    data-parallel Learners blocked in a collective with a dead one would never return."""
    ray = require_ray()
    pending = {ref: i for i, ref in enumerate(refs)}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            index = pending.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
                return None, index, cause
            except ray.exceptions.RayError as e:  # the actor died (killed, crashed, OOM)
                return None, index, e
    return ray.get(list(refs)), None, None


def get(refs: Any) -> Any:
    """`ray.get(refs)`: waits for remote results (a Learner's error is raised here)."""
    return require_ray().get(refs)


def put(value: Any) -> Any:
    """Puts `value` into the object store once; the returned reference is what goes to
    each actor (Ray resolves a reference passed as a top-level argument)."""
    return require_ray().put(value)


def call(
    actors: Mapping[int, Any], calls: Sequence[Call], *, timeout_s: float | None = None
) -> tuple[dict[int, list[Any]], dict[int, BaseException]]:
    """Submits `calls`, in order, to every actor at once and waits up to `timeout_s`
    seconds (None: forever) for all of them.

    Returns each actor's results (one per call) and, separately, the error of each actor
    that failed: the exception its method raised (unwrapped from Ray's RayTaskError), a
    RayActorError for a dead actor, or a TimeoutError. An actor's calls run one after the
    other in submission order, so a failed call's later results are dropped as well.
    """
    if not actors:
        return {}, {}
    ray = require_ray()
    refs = {i: [_submit(actor, c) for c in calls] for i, actor in actors.items()}
    flat = [r for rs in refs.values() for r in rs]
    ready, _ = ray.wait(flat, num_returns=len(flat), timeout=timeout_s)
    done = set(ready)
    results: dict[int, list[Any]] = {}
    errors: dict[int, BaseException] = {}
    for i, rs in refs.items():
        if not all(r in done for r in rs):
            errors[i] = TimeoutError(f"no answer within sample_timeout_s={timeout_s} s")
            continue
        try:
            results[i] = ray.get(rs)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
            errors[i] = cause
        except ray.exceptions.RayError as e:  # the actor died (killed, crashed, OOM)
            errors[i] = e
    return results, errors


def submit(actor: Any, c: Call) -> Any:
    """Submits one call to an actor without waiting; returns its result's reference."""
    return _submit(actor, c)


def _submit(actor: Any, c: Call) -> Any:
    func, args, kwargs = c
    if isinstance(func, str):
        return getattr(actor, func).remote(*args, **kwargs)
    return actor.apply.remote(func, *args, **kwargs)


def kill(actor: Any) -> None:
    """Ends an actor's process now (no error if it is already dead)."""
    ray = require_ray()
    with contextlib.suppress(Exception):  # already gone is what we want
        ray.kill(actor, no_restart=True)


def node_id_of(actor: Any) -> str:
    """The ID of the Ray node an actor runs on (for placement checks)."""
    ray = require_ray()
    return str(ray.get(actor.apply.remote(_current_node_id)))


def _current_node_id(_runner: Any) -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


_TRAINABLES: dict[type, type] = {}


def tune_trainable(algo_cls: type) -> type:
    """A `ray.tune.Trainable` that trains `algo_cls` (an Algorithm subclass), made once
    per class: its `config` is a config's `to_dict()` (Tune's search spaces resolved, each
    trial's values checked when its config is built), each step one `train()`, checkpoints
    rlmod's own (`save_to_path` / `restore_from_path`). It reserves what the config's
    remote EnvRunners and Learners need (one placement group per trial, as RLlib's
    Algorithm does), so they start inside the trial's share of the cluster. Importing Tune
    does not start Ray: Tune does that when it runs."""
    if algo_cls in _TRAINABLES:
        return _TRAINABLES[algo_cls]
    try:
        from ray import tune
    except ImportError as e:
        raise ImportError(f"{e}. Ray Tune is needed: `pip install 'rlmod[tune]'`.") from e

    from rlmod.algorithms.algorithm_config import _register_with_tune

    _register_with_tune()  # tune.Tuner(..., param_space=config) takes rlmod's configs

    class AlgorithmTrainable(tune.Trainable):  # type: ignore[misc]
        @classmethod
        def default_resource_request(cls, config: dict[str, Any]) -> Any:
            return tune.PlacementGroupFactory(_bundles(algo_cls, config), strategy="PACK")

        def setup(self, config: dict[str, Any]) -> None:
            settings = algo_cls.get_default_config().update_from_dict(  # type: ignore[attr-defined]
                config
            )
            self.algo = settings.build_algo()

        def step(self) -> dict[str, Any]:
            return dict(self.algo.train())

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            self.algo.save_to_path(checkpoint_dir)

        def load_checkpoint(self, checkpoint: Any) -> None:
            self.algo.restore_from_path(checkpoint)

        def cleanup(self) -> None:
            self.algo.stop()

    AlgorithmTrainable.__name__ = AlgorithmTrainable.__qualname__ = algo_cls.__name__
    _TRAINABLES[algo_cls] = AlgorithmTrainable
    return AlgorithmTrainable


def _bundles(algo_cls: type, config: dict[str, Any]) -> list[dict[str, float]]:
    """One trial's resource bundles: the driver (with the GPU of a local Learner), then
    each remote EnvRunner (training and evaluation) and each remote Learner."""
    settings = {**algo_cls.get_default_config().to_dict(), **config}  # type: ignore[attr-defined]
    learners = int(settings["num_learners"])
    runner = {"CPU": float(settings["num_cpus_per_env_runner"])}
    learner = {"CPU": float(settings["num_cpus_per_learner"])}
    gpus = float(settings["num_gpus_per_learner"])
    if gpus:
        learner["GPU"] = gpus
    driver = {"CPU": 1.0, **({"GPU": gpus} if gpus and not learners else {})}
    runners = int(settings["num_env_runners"]) + int(settings["evaluation_num_env_runners"])
    return [driver] + [runner] * runners + [learner] * learners


def register_tune_name(algo_cls: type) -> None:
    """Registers `algo_cls`'s trainable with Ray Tune under the class's name, so that
    `tune.Tuner("PPO", ...)` finds it, as it finds RLlib's algorithms. A name already in
    Tune's registry (the user's own, or an earlier call's) is left as it is. Needs Ray
    Tune imported; does not start Ray."""
    from ray.tune.registry import TRAINABLE_CLASS, _global_registry, register_trainable

    name = algo_cls.__name__
    if not _global_registry.contains(TRAINABLE_CLASS, name):
        register_trainable(name, tune_trainable(algo_cls))


def data_shards(
    paths: Sequence[str],
    read: Callable[[dict[str, Any]], Any],
    *,
    num_shards: int,
    map_batches_kwargs: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Ray Data reading `paths`, one file per task with `read` (a map_batches function
    of `{"path": [one path]}` yielding column batches), split into `num_shards` equal
    streaming shards (`Dataset.streaming_split(equal=True)`), one per Learner.

    Reading tasks reserve no CPU unless `map_batches_kwargs` says otherwise: on a small
    cluster the Learners may hold every CPU, and a reading task waiting for one would
    stall them forever.
    """
    require_ray("offline_data(input_read_method='read_parquet')")
    import ray.data

    kwargs = {"num_cpus": 0, **(map_batches_kwargs or {})}
    files = ray.data.from_items([{"path": p} for p in paths], override_num_blocks=len(paths))
    rows = files.map_batches(read, batch_size=1, batch_format="numpy", **kwargs)
    return list(rows.streaming_split(num_shards, equal=True))
