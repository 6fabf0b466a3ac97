"""DefaultPPORLModule: PPO's actor-critic (MLP or CNN encoders, rlmod/core/encoders.py),
with no value function when inference-only.

Built from specs by EnvRunners (inference-only: encoder and policy head) and Learners
(plus the value encoder and head).
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from rlmod.core.apis import ValueFunctionAPI
from rlmod.core.columns import Columns
from rlmod.core.distributions import dist_inputs_dim
from rlmod.core.encoders import MLPEncoder, build_encoder
from rlmod.core.models import DefaultModelConfig, mlp
from rlmod.core.rl_module import RLModule, TensorDict


class DefaultPPORLModule(RLModule, ValueFunctionAPI):
    """Policy (`encoder` + `pi`) and, on Learners only, a value function (`vf_encoder` +
    `vf`; one encoder for both with `vf_share_layers`).

    The encoders are an MLP for vector observations, a CNN for images (uint8 images are
    divided by 255 inside the module) and one per part for packed Dict/Tuple observations
    (rlmod/core/encoders.py); the heads are MLPs of `head_fcnet_hiddens`.

    Discrete, MultiDiscrete and Box actions; for Box, a free log-std parameter (or a network
    output with `free_log_std=False`). `compute_values` is the value function GAE and the
    loss use (RLlib's ValueFunctionAPI); `forward_train` returns the value function's input
    as `Columns.EMBEDDINGS`, as RLlib's DefaultPPOTorchRLModule does, so the loss does not
    run the encoder twice.
    """

    training_only_submodules = ("vf_encoder", "vf")
    supports_stacking = True  # modules of one model config run as one (rlmod.core.stacked)
    supports_deferred_init = True  # all its state is in state_dict (rlmod.core.deferred_init)

    def setup(self) -> None:
        cfg = DefaultModelConfig.from_any(self.model_config)
        self.config = cfg
        owner = type(self).__name__
        self.encoder, enc_dim = build_encoder(self.observation_space, cfg, owner=owner)
        out_dim = dist_inputs_dim(self.action_space)
        self._free_log_std = isinstance(self.action_space, gym.spaces.Box) and cfg.free_log_std
        pi_out = out_dim // 2 if self._free_log_std else out_dim
        self.pi = mlp(
            enc_dim,
            cfg.head_fcnet_hiddens,
            activation_name=cfg.head_fcnet_activation,
            out_dim=pi_out,
            out_gain=0.01,
        )
        if self._free_log_std:
            self.log_std = nn.Parameter(torch.full((pi_out,), float(cfg.log_std_init)))
        if self.inference_only:
            return  # EnvRunners: no value function at all
        if not cfg.vf_share_layers:
            self.vf_encoder, _ = build_encoder(self.observation_space, cfg, owner=owner)
        self.vf = mlp(
            enc_dim,
            cfg.head_fcnet_hiddens,
            activation_name=cfg.head_fcnet_activation,
            out_dim=1,
            out_gain=1.0,
        )

    def stacked_acting_layers(self) -> list[nn.Module] | None:
        """The layers whose composition on the flattened observation is all `_forward`
        returns (ACTION_DIST_INPUTS): encoder, then policy head; None with a free log-std
        (its parameter is concatenated). Stacked groups then act through batched matmuls
        instead of vmap (rlmod/core/stacked_acting.py)."""
        if self._free_log_std or not isinstance(self.encoder, MLPEncoder):
            return None
        return [*self.encoder, *self.pi]

    def stacked_train_layers(self) -> dict[str, list[nn.Module]] | None:
        """Per column `_forward_train` returns, the layers whose composition on the
        flattened observation gives it: encoder then policy head (ACTION_DIST_INPUTS), the
        value encoder (EMBEDDINGS); None with a free log-std or a shared encoder. Stacked
        groups then train through batched matmuls with a reused workspace instead of vmap
        (rlmod/core/stacked_train.py)."""
        if (
            self._free_log_std
            or self.config.vf_share_layers
            or self.inference_only
            or not isinstance(self.encoder, MLPEncoder)
            or not isinstance(self.vf_encoder, MLPEncoder)
        ):
            return None
        return {
            Columns.ACTION_DIST_INPUTS: [*self.encoder, *self.pi],
            Columns.EMBEDDINGS: [*self.vf_encoder],
        }

    def _dist_inputs(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self._with_log_std(self.pi(embeddings))

    def _with_log_std(self, out: torch.Tensor) -> torch.Tensor:
        if self._free_log_std:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        return out

    def _forward(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        embeddings = self.encoder(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(embeddings)}

    def _forward_train(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        obs = batch[Columns.OBS]
        embeddings = self.encoder(obs)
        vf_embeddings = embeddings if self.config.vf_share_layers else self.vf_encoder(obs)
        return {
            Columns.ACTION_DIST_INPUTS: self._dist_inputs(embeddings),
            Columns.EMBEDDINGS: vf_embeddings,
        }

    def compute_values(
        self, batch: TensorDict, embeddings: torch.Tensor | None = None
    ) -> torch.Tensor:
        """V(obs), `[B]`; `embeddings` are the value MLP's input (`_forward_train`'s)."""
        if embeddings is None:
            obs = batch[Columns.OBS]
            encoder = self.encoder if self.config.vf_share_layers else self.vf_encoder
            embeddings = encoder(obs)
        return self.vf(embeddings).squeeze(-1)
