"""LearnerGroup: the Learner(s) an Algorithm trains with, local or (same class) remote.

Built by Algorithm with the learner module spec; EnvRunnerGroup pulls weights from it.
With `num_learners > 0` the Learners are Ray actors of the same class, training
data-parallel (torch.distributed: gloo on CPUs, NCCL on GPUs): each gets a share of the
batch and all hold the same weights after every step. A Learner that dies or raises ends
the group with a LearnerError (RLlib does not restart Learners either).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import torch

from rlmod.core.columns import Columns
from rlmod.core.devices import cpu_tensors
from rlmod.core.learner import Learner, NumpyBatch
from rlmod.core.multi_rl_module import ModuleID, MultiRLModuleSpec
from rlmod.core.types import Array, Components, StateDict
from rlmod.errors import LearnerError
from rlmod.utils.checkpoints import Checkpointable, select_components

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

_R = TypeVar("_R")
LearnerResults = dict[str, dict[str, float]]
"""`Learner.update`'s results: by module ID, then metric name."""


class LearnerGroup(Checkpointable):
    """One local Learner (`num_learners=0`), or `num_learners` data-parallel Learner actors.

    With remote Learners a local Learner is still built, but never trained: it gives
    checkpoints their layout and `learner` its module, with the first remote Learner's
    weights copied in when read. It stays on the CPU (`num_gpus_per_learner` places the
    remote ones), so the driver needs no GPU.

    Failures (RLlib's behaviour, checked against its 2.60 `LearnerGroup._get_results`):
    a remote Learner that dies or raises is not restarted. The others may be blocked in
    an all-reduce with it, so all are ended, and this and every later call raises a
    LearnerError naming the Learner and the cause; resume from a checkpoint.
    """

    def __init__(self, *, config: AlgorithmConfig, module_spec: MultiRLModuleSpec) -> None:
        self.config = config
        learner_cls: type[Learner] = config.learner_class  # the algorithm's default if unset
        self._actors: list[object] = []  # Ray actor handles
        self._failure: str | None = None  # why the remote Learners were ended
        if config.num_learners > 0:
            from rlmod.utils import ray_utils

            self._actors = ray_utils.make_data_parallel_learners(learner_cls, config, module_spec)
        self._learner = learner_cls(config=config, module_spec=module_spec)
        self._learner.build()

    @property
    def learner(self) -> Learner:
        """The local Learner (with remote Learners: a copy holding the first one's weights)."""
        if self.is_remote:
            self._learner.set_weights(self.get_weights())
        return self._learner

    @property
    def is_remote(self) -> bool:
        return bool(self._actors) or self._failure is not None

    def _call(
        self,
        method: str,
        per_actor_args: Sequence[tuple[object, ...]] | None = None,
        *,
        first_only: bool = False,
        **kwargs: object,
    ) -> list[object]:
        """`method(*args, **kwargs)` on every remote Learner at once (`per_actor_args[i]`
        for Learner i, else no positional ones), or on the first only (reads: all hold the
        same weights); the results in rank order. A Learner that dies or raises ends them
        all (see the class doc) with a LearnerError."""
        from rlmod.utils import ray_utils

        if self._failure is not None:
            raise LearnerError(self._failure)
        actors = self._actors[:1] if first_only else self._actors
        args = per_actor_args or [()] * len(actors)
        refs = [
            getattr(a, method).remote(*arg, **kwargs) for a, arg in zip(actors, args, strict=True)
        ]
        results, index, error = ray_utils.get_all(refs)
        if results is not None:
            return results
        n = len(self._actors)
        self.stop()
        self._failure = (
            f"Remote Learner {index} (rank {index} of {n}) failed in {method}(): {error!r}. "
            "Failed Learners are not restarted (as in RLlib): the data-parallel group "
            "cannot go on without one of its members, so all were ended. Resume from the "
            "last checkpoint (Algorithm.from_checkpoint(path) or algo.restore_from_path), "
            "or let Ray Tune do it: tune.RunConfig(failure_config=tune.FailureConfig("
            "max_failures=...)) with checkpoints."
        )
        raise LearnerError(self._failure) from error

    def update(
        self,
        batches: Sequence[NumpyBatch] | NumpyBatch,
        *,
        timesteps: Mapping[str, int] | None = None,
    ) -> LearnerResults:
        """Trains on `batches` (EnvRunners' sample results); returns the Learner results
        (with remote Learners: their means, counters summed)."""
        if not self.is_remote:
            return self._learner.update(batches, timesteps=timesteps)
        seq = [batches] if isinstance(batches, Mapping) else list(batches)
        shards = split_batches(seq, len(self._actors))
        results = self._call("update", [(shard,) for shard in shards], timesteps=timesteps)
        return _reduce_results(cast("list[LearnerResults]", results))

    # Any: `kwargs` go to `func` (RLlib's signature has no *args for a ParamSpec to bind).
    def foreach_learner(  # type: ignore[explicit-any]
        self,
        func: Callable[..., _R],
        **kwargs: Any,
    ) -> list[_R]:
        """`func(learner, **kwargs)` on every Learner (RLlib's name): the remote ones if
        any, else the local one."""
        if not self.is_remote:
            return [self._learner.apply(func, **kwargs)]
        return cast("list[_R]", self._call("apply", [(func,)] * len(self._actors), **kwargs))

    def get_weights(
        self,
        module_ids: Sequence[ModuleID] | None = None,
        *,
        inference_only: bool = False,
        copy: bool = True,
    ) -> dict[ModuleID, dict[str, Array]]:
        """Numpy copies (not views) of the weights of all modules, learner-only ones
        included, or of those in `module_ids` (RLlib's `LearnerGroup.get_weights`).

        `inference_only=True` (rlmod's addition) keeps only what EnvRunners' inference-only
        modules hold. `copy=False` (rlmod's addition) lets a local Learner hand out views
        of its live weights, for a caller that copies them at once itself (the weight
        sync's `ray.put`); remote Learners' weights arrive as copies anyway.
        """
        if self.is_remote:  # all hold the same weights: the first one's, numpy already
            return cast(
                "dict[ModuleID, dict[str, Array]]",
                self._call(
                    "get_weights", [(module_ids,)], first_only=True, inference_only=inference_only
                )[0],
            )
        return self._learner.get_weights(module_ids, inference_only=inference_only, copy=copy)

    def set_weights(self, weights: Mapping[ModuleID, Mapping[str, Array | torch.Tensor]]) -> None:
        """Loads weights by module ID into the Learner(s) (RLlib's name)."""
        self._learner.set_weights(weights)
        if self.is_remote:
            from rlmod.utils import ray_utils

            self._call("set_weights", [(ray_utils.put(dict(weights)),)] * len(self._actors))

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        return [("learner", self._learner)]

    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        """`{"learner": ...}`: the (first) Learner's state, as RLlib nests it."""
        wanted, inc, exc = select_components(components, not_components, "learner")
        if not wanted:
            return {}
        if self.is_remote:  # CPU tensors: a GPU Learner's would not unpickle without one
            return {
                "learner": cast(
                    StateDict,
                    self._call("apply", [(_cpu_state, inc)], first_only=True, not_components=exc)[
                        0
                    ],
                )
            }
        return {"learner": self._learner.get_state(inc, not_components=exc)}

    def set_state(self, state: StateDict) -> None:
        if "learner" in state:
            self._learner.set_state(cast(StateDict, state["learner"]))
            if self.is_remote:
                from rlmod.utils import ray_utils

                ref = ray_utils.put(state["learner"])
                self._call("set_state", [(ref,)] * len(self._actors))

    def stop(self) -> None:
        """Ends the remote Learners' actors (nothing to do for the local Learner)."""
        if self._actors:
            from rlmod.utils import ray_utils

            for actor in self._actors:
                ray_utils.kill(actor)
            self._actors = []


def _cpu_state(
    learner: Learner, components: Components, *, not_components: Components
) -> StateDict:
    return cast(
        StateDict, cpu_tensors(learner.get_state(components, not_components=not_components))
    )


def split_batches(batches: list[NumpyBatch], n: int) -> list[list[NumpyBatch]]:
    """`n` shares of EnvRunners' sample results, one per data-parallel Learner.

    With a multiple of `n` results, Learner i gets results i, i+n, ... whole (every
    sequence stays in one piece). Otherwise each module's rows are concatenated and cut
    into `n` contiguous, nearly equal parts; a cut ends its sequence there (`seq_ends`),
    as a rollout fragment's end does, so advantages bootstrap from the value of the next
    observation at the cut.
    """
    if len(batches) % n == 0:
        return [batches[i::n] for i in range(n)]
    shares: list[dict[ModuleID, dict[str, Array]]] = [{} for _ in range(n)]
    for mid in dict.fromkeys(m for b in batches for m in b):
        parts = [b[mid] for b in batches if mid in b]
        cols = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
        rows = len(next(iter(cols.values())))
        bounds = np.linspace(0, rows, n + 1).astype(int)
        for i in range(n):
            piece = {c: v[bounds[i] : bounds[i + 1]] for c, v in cols.items()}
            if Columns.SEQ_ENDS in piece and len(piece[Columns.SEQ_ENDS]):
                piece[Columns.SEQ_ENDS] = piece[Columns.SEQ_ENDS].copy()
                piece[Columns.SEQ_ENDS][-1] = True
            shares[i][mid] = piece
    return [[s] for s in shares]


def _reduce_results(results: list[LearnerResults]) -> LearnerResults:
    """Per-module means over Learners; counts (`num_*`) summed, except the parameter count;
    per-row arrays (DQN's and SAC's TD errors) concatenated in Learner order, which is the
    order of the rows of one batch (what replay sends) that `split_batches` cut."""
    out: LearnerResults = {}
    for mid in results[0]:
        out[mid] = {}
        for k in results[0][mid]:
            values = [r[mid][k] for r in results if mid in r and k in r[mid]]
            if isinstance(values[0], np.ndarray):
                out[mid][k] = np.concatenate(values)
                continue
            summed = k.startswith("num_") and k != "num_trainable_parameters"
            out[mid][k] = float(np.sum(values) if summed else np.mean(values))
    return out
