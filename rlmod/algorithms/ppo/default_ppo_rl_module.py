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
from rlmod.core.recurrent import LSTMCore, has_time_axis, state_of
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

    With `use_lstm` an LSTM follows each encoder (rlmod.core.recurrent): the module is
    stateful, and with a separate value encoder (`vf_share_layers=False`) the value path
    has its own LSTM whose state EnvRunners carry too (its `vf_encoder` and `vf_lstm` are
    then built inference-only as well; only the `vf` head is left out). Such a module is
    not stacked.
    """

    training_only_submodules: tuple[str, ...] = ("vf_encoder", "vf")
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
        self.lstm: LSTMCore | None = None
        self.vf_lstm: LSTMCore | None = None
        if cfg.use_lstm:
            self.lstm = self._lstm_core(enc_dim, cfg, "")
            if not cfg.vf_share_layers:  # the value path's state advances on EnvRunners too
                self.training_only_submodules = ("vf",)
                self.vf_encoder, _ = build_encoder(self.observation_space, cfg, owner=owner)
                self.vf_lstm = self._lstm_core(enc_dim, cfg, "critic_")
            enc_dim = cfg.lstm_cell_size
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
        if not cfg.vf_share_layers and not cfg.use_lstm:
            self.vf_encoder, _ = build_encoder(self.observation_space, cfg, owner=owner)
        self.vf = mlp(
            enc_dim,
            cfg.head_fcnet_hiddens,
            activation_name=cfg.head_fcnet_activation,
            out_dim=1,
            out_gain=1.0,
        )

    def _lstm_core(self, in_dim: int, cfg: DefaultModelConfig, prefix: str) -> LSTMCore:
        return LSTMCore(
            in_dim,
            cfg.lstm_cell_size,
            action_space=self.action_space,
            use_prev_action=cfg.lstm_use_prev_action,
            use_prev_reward=cfg.lstm_use_prev_reward,
            prefix=prefix,
        )

    def get_initial_state(self) -> dict[str, torch.Tensor]:
        """Zero h and c of each LSTM (`h`, `c`; `critic_h`, `critic_c`); `{}` without one."""
        state = {} if self.lstm is None else self.lstm.initial_state()
        if self.vf_lstm is not None:
            state.update(self.vf_lstm.initial_state())
        return state

    def stacked_acting_layers(self) -> list[nn.Module] | None:
        """The layers whose composition on the flattened observation is all `_forward`
        returns (ACTION_DIST_INPUTS): encoder, then policy head; None with a free log-std
        (its parameter is concatenated). Stacked groups then act through batched matmuls
        instead of vmap (rlmod/core/stacked_acting.py)."""
        if self._free_log_std or self.lstm is not None or not isinstance(self.encoder, MLPEncoder):
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
            or self.lstm is not None
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
        if self.lstm is not None:
            return self._forward_recurrent(batch)
        embeddings = self.encoder(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(embeddings)}

    def _forward_train(self, batch: TensorDict, **kwargs: object) -> TensorDict:
        if self.lstm is not None:
            return self._forward_recurrent(batch)
        obs = batch[Columns.OBS]
        embeddings = self.encoder(obs)
        vf_embeddings = embeddings if self.config.vf_share_layers else self.vf_encoder(obs)
        return {
            Columns.ACTION_DIST_INPUTS: self._dist_inputs(embeddings),
            Columns.EMBEDDINGS: vf_embeddings,
        }

    def _forward_recurrent(self, batch: TensorDict) -> TensorDict:
        """Encoder, LSTM and policy head over one step per row (`obs` `[B, ...]`) or
        sequences (`[S, T, ...]`; outputs `[S, T, ...]`); the value path's LSTM output is
        `Columns.EMBEDDINGS`, its state part of `Columns.STATE_OUT`."""
        assert self.lstm is not None
        obs = batch[Columns.OBS]
        seq_len = obs.shape[1] if has_time_axis(obs, self.observation_space) else None
        rows = obs.flatten(0, 1) if seq_len else obs  # the encoders take [B, *obs_shape]
        state = state_of(batch, self.get_initial_state)
        embeddings, state_out = self.lstm(self.encoder(rows), batch, state, seq_len)
        if self.vf_lstm is not None:
            vf_embeddings, vf_state = self.vf_lstm(self.vf_encoder(rows), batch, state, seq_len)
            state_out.update(vf_state)
        else:
            vf_embeddings = embeddings
        lead = obs.shape[:2] if seq_len else obs.shape[:1]
        out = {
            Columns.ACTION_DIST_INPUTS: self._dist_inputs(embeddings).view(*lead, -1),
            Columns.STATE_OUT: state_out,  # type: ignore[dict-item]
        }
        if not self.inference_only:
            out[Columns.EMBEDDINGS] = vf_embeddings.view(*lead, -1)
        return out

    def compute_values(
        self, batch: TensorDict, embeddings: torch.Tensor | None = None
    ) -> torch.Tensor:
        """V(obs), `[B]`; `embeddings` are the value MLP's input (`_forward_train`'s)."""
        if embeddings is None and self.lstm is not None:
            embeddings = self._forward_recurrent(batch)[Columns.EMBEDDINGS]
        if embeddings is None:
            obs = batch[Columns.OBS]
            encoder = self.encoder if self.config.vf_share_layers else self.vf_encoder
            embeddings = encoder(obs)
        return self.vf(embeddings).squeeze(-1)
