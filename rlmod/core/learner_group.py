"""LearnerGroup: the Learner(s) an Algorithm trains with, local or (same class) remote.

Built by Algorithm with the learner module spec; EnvRunnerGroup pulls weights from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlmod.core.learner import Learner, NumpyBatch
from rlmod.core.multi_rl_module import ModuleID, MultiRLModuleSpec
from rlmod.utils.checkpoints import Checkpointable, select_components


class LearnerGroup(Checkpointable):
    """One local Learner (`num_learners=0`); remote data-parallel Learners come with Ray."""

    def __init__(self, *, config: Any, module_spec: MultiRLModuleSpec) -> None:
        self.config = config
        learner_cls: type[Learner] = config.learner_class  # the algorithm's default if unset
        if config.num_learners > 0:
            from rlmod.utils.ray_utils import require_ray

            require_ray(f"num_learners={config.num_learners}")
            raise NotImplementedError(
                "num_learners > 0 (remote data-parallel Learners) is not built yet; use "
                "num_learners=0, which trains in-process."
            )
        self._learner = learner_cls(config=config, module_spec=module_spec)
        self._learner.build()

    @property
    def learner(self) -> Learner:
        """The local Learner."""
        return self._learner

    def update(self, batches: Sequence[NumpyBatch], *,
               timesteps: Mapping[str, int] | None = None) -> dict[str, dict[str, float]]:
        return self._learner.update(batches, timesteps=timesteps)

    def get_weights(self, module_ids: Sequence[ModuleID] | None = None, *,
                    inference_only: bool = False) -> dict[ModuleID, dict[str, np.ndarray]]:
        """Numpy copies (not views) of the weights of all modules, learner-only ones
        included, or of those in `module_ids` (RLlib's `LearnerGroup.get_weights`).

        `inference_only=True` (rlmod's addition) keeps only what EnvRunners' inference-only
        modules hold.
        """
        return self._learner.get_weights(module_ids, inference_only=inference_only)

    def set_weights(self, weights: Mapping[ModuleID, Mapping[str, Any]]) -> None:
        """Loads weights by module ID into the Learner(s) (RLlib's name)."""
        self._learner.set_weights(weights)

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        return [("learner", self._learner)]

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        """`{"learner": ...}`: the (first) Learner's state, as RLlib nests it."""
        wanted, inc, exc = select_components(components, not_components, "learner")
        return {"learner": self._learner.get_state(inc, not_components=exc)} if wanted else {}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if "learner" in state:
            self._learner.set_state(state["learner"])
