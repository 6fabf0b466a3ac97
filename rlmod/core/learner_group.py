"""LearnerGroup: the Learner(s) an Algorithm trains with, local or (same class) remote.

Built by Algorithm with the learner module spec; EnvRunnerGroup pulls weights from it.
With `num_learners > 0` the Learners are Ray actors of the same class, training
data-parallel (torch.distributed, gloo): each gets a share of the batch and all hold the
same weights after every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlmod.core.columns import Columns
from rlmod.core.learner import Learner, NumpyBatch
from rlmod.core.multi_rl_module import ModuleID, MultiRLModuleSpec
from rlmod.utils.checkpoints import Checkpointable, select_components

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig


class LearnerGroup(Checkpointable):
    """One local Learner (`num_learners=0`), or `num_learners` data-parallel Learner actors.

    With remote Learners a local Learner is still built, but never trained: it gives
    checkpoints their layout and `learner` its module, with the first remote Learner's
    weights copied in when read.
    """

    def __init__(self, *, config: AlgorithmConfig, module_spec: MultiRLModuleSpec) -> None:
        self.config = config
        learner_cls: type[Learner] = config.learner_class  # the algorithm's default if unset
        self._actors: list[Any] = []
        if config.num_learners > 0:
            from rlmod.utils import ray_utils

            self._actors = ray_utils.make_data_parallel_learners(learner_cls, config,
                                                                 module_spec)
        self._learner = learner_cls(config=config, module_spec=module_spec)
        self._learner.build()

    @property
    def learner(self) -> Learner:
        """The local Learner (with remote Learners: a copy holding the first one's weights)."""
        if self._actors:
            self._learner.set_weights(self.get_weights())
        return self._learner

    @property
    def is_remote(self) -> bool:
        return bool(self._actors)

    def update(self, batches: Sequence[NumpyBatch] | NumpyBatch, *,
               timesteps: Mapping[str, int] | None = None) -> dict[str, dict[str, float]]:
        """Trains on `batches` (EnvRunners' sample results); returns the Learner results
        (with remote Learners: their means, counters summed)."""
        if not self._actors:
            return self._learner.update(batches, timesteps=timesteps)
        from rlmod.utils import ray_utils

        seq = [batches] if isinstance(batches, Mapping) else list(batches)
        shards = split_batches(seq, len(self._actors))
        results = ray_utils.get([a.update.remote(shard, timesteps=timesteps)
                                 for a, shard in zip(self._actors, shards, strict=True)])
        return _reduce_results(results)

    def foreach_learner(self, func: Any, **kwargs: Any) -> list[Any]:
        """`func(learner, **kwargs)` on every Learner (RLlib's name): the remote ones if
        any, else the local one."""
        if not self._actors:
            return [self._learner.apply(func, **kwargs)]
        from rlmod.utils import ray_utils

        return ray_utils.get([a.apply.remote(func, **kwargs) for a in self._actors])

    def get_weights(self, module_ids: Sequence[ModuleID] | None = None, *,
                    inference_only: bool = False) -> dict[ModuleID, dict[str, np.ndarray]]:
        """Numpy copies (not views) of the weights of all modules, learner-only ones
        included, or of those in `module_ids` (RLlib's `LearnerGroup.get_weights`).

        `inference_only=True` (rlmod's addition) keeps only what EnvRunners' inference-only
        modules hold.
        """
        if self._actors:
            from rlmod.utils import ray_utils

            return ray_utils.get(self._actors[0].get_weights.remote(
                module_ids, inference_only=inference_only))
        return self._learner.get_weights(module_ids, inference_only=inference_only)

    def set_weights(self, weights: Mapping[ModuleID, Mapping[str, Any]]) -> None:
        """Loads weights by module ID into the Learner(s) (RLlib's name)."""
        self._learner.set_weights(weights)
        if self._actors:
            from rlmod.utils import ray_utils

            ref = ray_utils.put(dict(weights))
            ray_utils.get([a.set_weights.remote(ref) for a in self._actors])

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        return [("learner", self._learner)]

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        """`{"learner": ...}`: the (first) Learner's state, as RLlib nests it."""
        wanted, inc, exc = select_components(components, not_components, "learner")
        if not wanted:
            return {}
        if self._actors:
            from rlmod.utils import ray_utils

            return {"learner": ray_utils.get(
                self._actors[0].get_state.remote(inc, not_components=exc))}
        return {"learner": self._learner.get_state(inc, not_components=exc)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if "learner" in state:
            self._learner.set_state(state["learner"])
            if self._actors:
                from rlmod.utils import ray_utils

                ref = ray_utils.put(state["learner"])
                ray_utils.get([a.set_state.remote(ref) for a in self._actors])


    def stop(self) -> None:
        """Ends the remote Learners' actors (nothing to do for the local Learner)."""
        if self._actors:
            from rlmod.utils import ray_utils

            for actor in self._actors:
                ray_utils.kill(actor)
            self._actors = []


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
    shares: list[dict[ModuleID, dict[str, np.ndarray]]] = [{} for _ in range(n)]
    for mid in dict.fromkeys(m for b in batches for m in b):
        parts = [b[mid] for b in batches if mid in b]
        cols = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
        rows = len(next(iter(cols.values())))
        bounds = np.linspace(0, rows, n + 1).astype(int)
        for i in range(n):
            piece = {c: v[bounds[i]:bounds[i + 1]] for c, v in cols.items()}
            if Columns.SEQ_ENDS in piece and len(piece[Columns.SEQ_ENDS]):
                piece[Columns.SEQ_ENDS] = piece[Columns.SEQ_ENDS].copy()
                piece[Columns.SEQ_ENDS][-1] = True
            shares[i][mid] = piece
    return [[s] for s in shares]


def _reduce_results(results: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per-module means over Learners; counts (`num_*`) summed, except the parameter count."""
    out: dict[str, dict[str, float]] = {}
    for mid in results[0]:
        out[mid] = {}
        for k in results[0][mid]:
            values = [r[mid][k] for r in results if mid in r and k in r[mid]]
            summed = k.startswith("num_") and k != "num_trainable_parameters"
            out[mid][k] = float(np.sum(values) if summed else np.mean(values))
    return out
