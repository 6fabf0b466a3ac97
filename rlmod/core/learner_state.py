"""LearnerState: a Learner's weights and checkpoint state, apart from how it trains.

The base of Learner (rlmod.core.learner): weights by module ID (RLlib's `get_weights` /
`set_weights`) and the Checkpointable parts (`rl_module`, `optimizer`, and the
minibatch-shuffling RNG, and the state of stateful learner connectors), so a restored
Learner makes the same update as the uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from rlmod.core.module_weights import numpy_weights
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.optim import OptimizerStates
from rlmod.core.types import Array, Components, StateDict, StateValue
from rlmod.utils.checkpoints import Checkpointable, select_components

if TYPE_CHECKING:
    from rlmod.connectors.pipeline import ConnectorPipeline


class LearnerState(Checkpointable):
    """Weights and state of a Learner's `module`, `_optimizer_states` and `_rng`."""

    module: MultiRLModule | None
    _optimizer_states: OptimizerStates
    _rng: np.random.Generator
    _learner_connector: ConnectorPipeline

    def get_weights(
        self,
        module_ids: Sequence[ModuleID] | None = None,
        *,
        inference_only: bool = False,
        copy: bool = True,
    ) -> dict[ModuleID, dict[str, Array]]:
        """Numpy copies of the weights by module ID: all modules (learner-only ones
        included) unless `module_ids` names some, as RLlib's `get_weights`.

        `inference_only` (rlmod's addition) keeps only what inference-only twins hold;
        weight sync to EnvRunners uses it with the IDs of the modules they have.
        `copy=False` (rlmod's addition) gives views of the live weights instead, for a
        caller that copies them at once (a weight sync's `ray.put`).
        """
        assert self.module is not None
        ids = list(self.module.keys() if module_ids is None else module_ids)
        # Copies (a CPU tensor's .numpy() shares its memory), stacked groups in one each.
        return numpy_weights(self.module, ids, inference_only=inference_only, copy=copy)

    def set_weights(self, weights: Mapping[ModuleID, Mapping[str, Array | torch.Tensor]]) -> None:
        """Loads weights by module ID (RLlib's name for `set_state({"rl_module": ...})`)."""
        assert self.module is not None
        self.module.set_state(weights)

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        assert self.module is not None
        return [("rl_module", self.module), ("optimizer", self._optimizer_states)]

    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        """Module weights, optimizer states, the minibatch-shuffling RNG and the learner
        connectors' state (where one has any): everything a
        restored Learner needs to make the same update as the uninterrupted one."""
        assert self.module is not None
        state: StateDict = {}
        for name, part in self.get_checkpointable_components():
            wanted, inc, exc = select_components(components, not_components, name)
            if wanted:
                state[name] = part.get_state(inc, not_components=exc)
        if components is None:
            state["rng"] = self._rng.bit_generator.state
            if connector_state := self._learner_connector.get_state():  # e.g. NormalizeRewards
                state["learner_connector"] = connector_state
        return state

    def set_state(self, state: Mapping[str, StateValue]) -> None:
        assert self.module is not None
        if "rl_module" in state:
            self.module.set_state(
                cast("Mapping[ModuleID, Mapping[str, Array | torch.Tensor]]", state["rl_module"])
            )
        if "optimizer" in state:
            self._optimizer_states.set_state(cast(StateDict, state["optimizer"]))
        if "rng" in state:
            self._rng.bit_generator.state = cast("dict[str, object]", state["rng"])
        if "learner_connector" in state:
            self._learner_connector.set_state(cast("dict[str, object]", state["learner_connector"]))
