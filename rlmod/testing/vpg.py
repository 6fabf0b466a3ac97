"""Small VPG-style RLModules with the names, model-config keys and outputs of RLlib's
example modules (`ray.rllib.examples.rl_modules.classes.vpg_torch_rlm` and
`vpg_using_shared_encoder_rlm`), so RLlib's unit tests and docs that build them run on
rlmod with only their imports changed (tests/rllib_ported).

- `VPGTorchRLModule`: obs -> Linear(hidden_dim) -> ReLU -> Linear(num actions) logits.
- `SharedEncoder`: obs -> Linear(embedding_dim), output under `ENCODER_OUT`.
- `VPGPolicyAfterSharedEncoder`: `batch[ENCODER_OUT]` -> hidden -> logits.
- `VPGMultiRLModuleWithSharedEncoder`: a MultiRLModule that runs the encoder (module ID
  `SHARED_ENCODER_ID`) on each policy's batch before that policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from torch import nn

from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.rl_module import RLModule, TensorDict

ENCODER_OUT = "encoder_out"
"""The key of an encoder's output (RLlib's `ray.rllib.core.models.base.ENCODER_OUT`)."""

SHARED_ENCODER_ID = "shared_encoder"
"""The module ID of the shared encoder in `VPGMultiRLModuleWithSharedEncoder`."""


def _num_outputs(space: Any) -> int:
    """Logits of a Discrete space; mean and log-std of a Box."""
    return int(space.n) if hasattr(space, "n") else gym.spaces.flatdim(space) * 2


class VPGTorchRLModule(RLModule):
    """A one-hidden-layer policy net; `model_config["hidden_dim"]` sets its width.

    Example:
        >>> import gymnasium as gym, torch
        >>> from rlmod.core import RLModuleSpec
        >>> env = gym.make("CartPole-v1")
        >>> module = RLModuleSpec(module_class=VPGTorchRLModule,
        ...     observation_space=env.observation_space, action_space=env.action_space,
        ...     model_config={"hidden_dim": 8}).build()
        >>> out = module.forward_inference({"obs": torch.zeros(3, 4)})
        >>> tuple(out["action_dist_inputs"].shape)
        (3, 2)
    """

    def setup(self) -> None:
        in_dim = gym.spaces.flatdim(self.observation_space)
        hidden = int(self.model_config["hidden_dim"])
        self._policy_net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, _num_outputs(self.action_space))
        )

    def _forward(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        return {Columns.ACTION_DIST_INPUTS: self._policy_net(batch[Columns.OBS])}


class SharedEncoder(RLModule):
    """One linear layer to `model_config["embedding_dim"]`, shared by several policies."""

    def setup(self) -> None:
        in_dim = gym.spaces.flatdim(self.observation_space)
        self._net = nn.Sequential(nn.Linear(in_dim, int(self.model_config["embedding_dim"])))

    def _forward(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        return {ENCODER_OUT: self._net(batch[Columns.OBS])}


class VPGPolicyAfterSharedEncoder(RLModule):
    """A policy head on `batch[ENCODER_OUT]` (`embedding_dim` in, `hidden_dim` wide)."""

    def setup(self) -> None:
        embedding, hidden = (int(self.model_config[k]) for k in ("embedding_dim", "hidden_dim"))
        self._pi_head = nn.Sequential(
            nn.Linear(embedding, hidden),
            nn.ReLU(),
            nn.Linear(hidden, _num_outputs(self.action_space)),
        )

    def _forward(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        return {Columns.ACTION_DIST_INPUTS: self._pi_head(batch[ENCODER_OUT])}


class VPGMultiRLModuleWithSharedEncoder(MultiRLModule):
    """Runs the shared encoder on each policy's batch, then that policy on its output."""

    def setup(self) -> None:
        super().setup()
        if SHARED_ENCODER_ID in self._rl_modules:
            self.encoder: RLModule = self[SHARED_ENCODER_ID]

    def _through_encoder(
        self, batch: Mapping[ModuleID, TensorDict], forward: str, **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        out: dict[ModuleID, TensorDict] = {}
        for mid, policy_batch in batch.items():
            if mid == SHARED_ENCODER_ID or mid not in self:
                continue
            inputs = {**policy_batch, ENCODER_OUT: self.encoder._forward(policy_batch)[ENCODER_OUT]}
            out[mid] = getattr(self[mid], forward)(inputs, **kwargs)
        return out

    def _forward_inference(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return self._through_encoder(batch, "forward_inference", **kwargs)

    def _forward_exploration(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return self._through_encoder(batch, "forward_exploration", **kwargs)

    def _forward_train(
        self, batch: Mapping[ModuleID, TensorDict], **kwargs: object
    ) -> dict[ModuleID, TensorDict]:
        return self._through_encoder(batch, "forward_train", **kwargs)


__all__ = [
    "ENCODER_OUT",
    "SHARED_ENCODER_ID",
    "SharedEncoder",
    "VPGMultiRLModuleWithSharedEncoder",
    "VPGPolicyAfterSharedEncoder",
    "VPGTorchRLModule",
]
