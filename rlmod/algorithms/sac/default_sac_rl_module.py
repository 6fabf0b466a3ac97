"""DefaultSACRLModule: SAC's actor and, on Learners only, twin critics, their targets and
the entropy temperature.

Built from specs by EnvRunners (inference-only: the actor alone) and Learners (everything);
SACLearner computes the losses, OffPolicyLearner moves the targets.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmod.core.columns import Columns
from rlmod.core.distributions import Categorical, Distribution, TanhGaussian
from rlmod.core.encoders import build_encoder, is_image_space
from rlmod.core.models import DefaultModelConfig, mlp
from rlmod.core.recurrent import refuse_use_lstm
from rlmod.core.rl_module import RLModule, TensorDict
from rlmod.utils.packed_obs import PackedObservationBox


class Temperature(nn.Module):
    """The entropy temperature `alpha = exp(log_alpha)`, learned (Haarnoja et al. 2018b)."""

    def __init__(self, initial_alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha)))


class EncodedCritic(nn.Module):
    """A critic with its own encoder (images, packed Dict/Tuple observations): Q from the
    MLP `head` over the encoder's features, with the action appended for Box actions."""

    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None) -> torch.Tensor:
        features = self.encoder(obs)
        if actions is None:  # Discrete: Q(obs, .) `[B, num_actions]`
            return self.head(features)
        return self.head(torch.cat([features, actions], dim=-1)).squeeze(-1)


class DefaultSACRLModule(RLModule):
    """Actor `pi_encoder` + `pi`; on Learners, critics `qf` (+ `qf_twin`), their targets and
    `alpha`.

    Encoders come from rlmod/core/encoders.py (an MLP, a CNN for images, one per part
    for packed Dict/Tuple observations); with images each critic has its own CNN.
    Box actions: the actor outputs a TanhGaussian over [-1, 1] (the module-to-env
    connector rescales to the env's bounds) and critics take (obs, action). Discrete
    actions (Christodoulou 2019): the actor outputs logits and critics output Q(obs, .)
    for all actions. `model_config` takes the default MLP keys plus `twin_q` and
    `initial_alpha`, which SACConfig fills in from its settings.
    """

    training_only_submodules = ("qf", "qf_twin", "qf_target", "qf_twin_target", "alpha")

    def setup(self) -> None:
        model_config = dict(self.model_config)
        self.twin_q = bool(model_config.pop("twin_q", True))
        initial_alpha = float(model_config.pop("initial_alpha", 1.0))
        cfg = DefaultModelConfig.from_any(model_config)
        refuse_use_lstm(cfg.use_lstm, "SAC")
        space = self.action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        if not (self.discrete or (isinstance(space, gym.spaces.Box) and len(space.shape) == 1)):
            raise TypeError(f"SAC needs a Discrete or a 1-D Box action space, got {space}.")
        self.action_dim = gym.spaces.flatdim(space)  # n, or the Box's number of entries
        owner = type(self).__name__
        self.pi_encoder, enc_dim = build_encoder(self.observation_space, cfg, owner=owner)
        pi_out = self.action_dim if self.discrete else 2 * self.action_dim
        self.pi = mlp(
            enc_dim,
            cfg.head_fcnet_hiddens,
            activation_name=cfg.head_fcnet_activation,
            out_dim=pi_out,
            out_gain=0.01,
        )
        if self.inference_only:
            return  # EnvRunners: the actor alone
        self.qf = self._critic(cfg)
        self.qf_target = copy.deepcopy(self.qf).requires_grad_(False)
        if self.twin_q:
            self.qf_twin = self._critic(cfg)
            self.qf_twin_target = copy.deepcopy(self.qf_twin).requires_grad_(False)
        self.alpha = Temperature(initial_alpha)

    def action_dist(self, dist_inputs: torch.Tensor) -> Distribution:
        return Categorical(dist_inputs) if self.discrete else TanhGaussian(dist_inputs)

    def _critic(self, cfg: DefaultModelConfig) -> nn.Module:
        """A critic: for vector observations an MLP over [obs, action] (Box actions) or obs
        (Discrete); for images and packed Dict/Tuple observations its own encoder, then
        that MLP over the encoder's features instead of obs."""
        q_out = self.action_dim if self.discrete else 1
        hiddens = (*cfg.fcnet_hiddens, *cfg.head_fcnet_hiddens)
        act = cfg.fcnet_activation
        space = self.observation_space
        if isinstance(space, gym.spaces.Box) and not (
            isinstance(space, PackedObservationBox) or is_image_space(space)
        ):
            obs_dim = int(np.prod(space.shape))
            q_in = obs_dim if self.discrete else obs_dim + self.action_dim
            return mlp(q_in, hiddens, activation_name=act, out_dim=q_out)
        encoder, enc_dim = build_encoder(space, cfg, owner=type(self).__name__)
        q_in = enc_dim if self.discrete else enc_dim + self.action_dim
        return EncodedCritic(encoder, mlp(q_in, hiddens, activation_name=act, out_dim=q_out))

    @staticmethod
    def _flat(obs: torch.Tensor) -> torch.Tensor:
        return obs if obs.dim() == 2 else obs.flatten(1)

    def _forward(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        features = self.pi_encoder(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self.pi(features)}

    def _forward_train(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        """The actor's distribution inputs for `obs`, and for `new_obs` without a graph
        (they only enter the critics' targets): the backward pass covers B rows, not 2B."""
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        with torch.no_grad():
            next_out = self.pi(self.pi_encoder(next_obs))
        return {
            Columns.ACTION_DIST_INPUTS: self.pi(self.pi_encoder(obs)),
            "next_action_dist_inputs": next_out,
        }

    def critics(self, *, target: bool = False) -> list[nn.Module]:
        """The online critics, or their targets."""
        if target:
            return [self.qf_target, self.qf_twin_target] if self.twin_q else [self.qf_target]
        return [self.qf, self.qf_twin] if self.twin_q else [self.qf]

    def q_values(
        self, critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Box: Q(obs, actions) `[B]`; Discrete: Q(obs, .) `[B, num_actions]`."""
        if isinstance(critic, EncodedCritic):
            return critic(obs, None if self.discrete else actions)
        obs = self._flat(obs).float()
        if self.discrete:
            return critic(obs)
        assert actions is not None
        return critic(torch.cat([obs, actions], dim=-1)).squeeze(-1)

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """(target, online) pairs that OffPolicyLearner moves by tau."""
        return list(zip(self.critics(target=True), self.critics(), strict=True))
