"""DefaultDQNRLModule: the (dueling) Q-network, epsilon-greedy exploration, and on Learners
the target network.

Built from specs by EnvRunners (inference-only: the online Q-network and epsilon) and
Learners (plus `target_q`); DQNLearner computes the loss and moves epsilon and the target.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlmod.core.columns import Columns
from rlmod.core.encoders import build_encoder
from rlmod.core.models import DefaultModelConfig, mlp
from rlmod.core.recurrent import refuse_use_lstm
from rlmod.core.rl_module import RLModule, TensorDict

QF_PREDS = "qf_preds"
"""forward_train output: Q(obs, .), `[B, num_actions]`."""
QF_NEXT_PREDS = "qf_next_preds"
"""forward_train output: the online network's Q(new_obs, .) (double Q's argmax; only with
`double_q`, a model_config key DQNConfig sets from its setting)."""
QF_TARGET_NEXT_PREDS = "qf_target_next_preds"
"""forward_train output: the target network's Q(new_obs, .)."""


class QNetwork(nn.Module):
    """Q(s, .) from an encoder (an MLP, or a CNN for images: rlmod/core/encoders.py) and
    either one head or the dueling pair of heads (Wang et al. 2016, eq. 9:
    Q = V + A - mean_a A)."""

    def __init__(
        self, obs_space: gym.Space, num_actions: int, cfg: DefaultModelConfig, *, dueling: bool
    ) -> None:
        super().__init__()
        self.encoder, enc_dim = build_encoder(obs_space, cfg, owner="DefaultDQNRLModule")
        self.af = mlp(
            enc_dim,
            cfg.head_fcnet_hiddens,
            activation_name=cfg.head_fcnet_activation,
            out_dim=num_actions,
            out_gain=0.01,
        )
        self.vf = (
            mlp(
                enc_dim,
                cfg.head_fcnet_hiddens,
                activation_name=cfg.head_fcnet_activation,
                out_dim=1,
                out_gain=1.0,
            )
            if dueling
            else None
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.encoder(obs)
        advantages = self.af(features)  # [B, A]
        if self.vf is None:
            return advantages
        return self.vf(features) + advantages - advantages.mean(-1, keepdim=True)


class DefaultDQNRLModule(RLModule):
    """Q-network `q`, an `epsilon` buffer (synced to EnvRunners with the weights) and, on
    Learners only, the target network `target_q`.

    `model_config` takes the default MLP keys plus `dueling` (default True), `double_q`
    (default True: `forward_train` also returns the online network's Q(new_obs, .)) and the
    initial `epsilon` (default 1.0), which DQNConfig fills in from its settings. Acting:
    `forward_inference` is greedy (the Q-values are the action-distribution inputs, whose
    mode is the argmax); `forward_exploration` is epsilon-greedy.
    """

    training_only_submodules = ("target_q",)

    def setup(self) -> None:
        model_config = dict(self.model_config)
        dueling = bool(model_config.pop("dueling", True))
        self.double_q = bool(model_config.pop("double_q", True))
        epsilon = float(model_config.pop("epsilon", 1.0))
        cfg = DefaultModelConfig.from_any(model_config)
        refuse_use_lstm(cfg.use_lstm, "DQN")
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise TypeError(
                f"DQN needs a Discrete action space, got {self.action_space}; use SAC "
                "(rlmod.algorithms.sac) for Box actions."
            )
        self.num_actions = int(self.action_space.n)
        self.q = QNetwork(self.observation_space, self.num_actions, cfg, dueling=dueling)
        self.register_buffer("epsilon", torch.tensor(epsilon))  # set by DQNLearner, synced
        if self.inference_only:
            return  # EnvRunners: no target network
        self.target_q = copy.deepcopy(self.q).requires_grad_(False)

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """(target, online) pairs that OffPolicyLearner moves by tau."""
        return [(self.target_q, self.q)]

    def _forward(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        return {Columns.ACTION_DIST_INPUTS: self.q(batch[Columns.OBS])}

    def _forward_inference(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        """The greedy actions under `actions`, as RLlib's DefaultDQNTorchRLModule, and the
        Q-values under `action_dist_inputs` (rlmod also keeps them, e.g. for inspection)."""
        q = self.q(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: q, Columns.ACTIONS: q.argmax(-1)}

    def _forward_exploration(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        """Epsilon-greedy: a uniformly random action with probability `epsilon`."""
        q = self.q(batch[Columns.OBS])
        greedy = q.argmax(-1)
        random = torch.randint(0, self.num_actions, greedy.shape, device=greedy.device)
        explore = torch.rand(greedy.shape, device=greedy.device) < self.get_buffer("epsilon")
        return {
            Columns.ACTION_DIST_INPUTS: q,
            Columns.ACTIONS: torch.where(explore, random, greedy),
        }

    def _forward_train(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        # Q(new_obs, .) of both networks without a graph: the backward pass then covers
        # the B rows of obs only (one pass over obs and new_obs together ran it over 2B
        # rows, half of them with zero gradient). DQNLearner may have computed the target
        # network's values for several gradient steps at once: then the batch has them.
        out: TensorDict = {}
        with torch.no_grad():
            if self.double_q:  # (its argmax picks the next action; without, the target's)
                out[QF_NEXT_PREDS] = self.q(next_obs)
            q_target_next = batch.get(QF_TARGET_NEXT_PREDS)
            out[QF_TARGET_NEXT_PREDS] = (
                self.target_q(next_obs) if q_target_next is None else q_target_next
            )
        out[QF_PREDS] = self.q(obs)
        return out
