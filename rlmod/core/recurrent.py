"""Recurrent modules: the LSTM that default modules put after their encoder
(`model_config={"use_lstm": True}`), and the state helpers EnvRunners and Learners share.

A stateful module (`RLModule.is_stateful()`) takes `Columns.STATE_IN` and returns
`Columns.STATE_OUT`, dicts of `[B, ...]` tensors shaped as `get_initial_state()` (RLlib's
contract). Its forwards take one step per row (`obs` `[B, ...]`: EnvRunners, inference)
or sequences (`obs` `[S, T, ...]`: Learners, after rlmod.connectors.learner_sequences).
Batches keep a state as one flat `[B, D]` column (`flatten_state`), so that the code that
slices, shuffles and concatenates columns needs no case for nested values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from rlmod.core.columns import Columns
from rlmod.core.types import BoolArray

TensorDict = dict[str, torch.Tensor]

PREV_ACTIONS = Columns.PREV_ACTIONS
"""The action before this step, zeros at an episode's first step; read where
`lstm_use_prev_action` is set."""
PREV_REWARDS = Columns.PREV_REWARDS
"""The reward before this step, 0 at an episode's first step; read where
`lstm_use_prev_reward` is set."""


def flatten_state(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """`{key: [B, ...]}` -> `[B, D]`, the keys in sorted order (the layout
    `unflatten_state` reads)."""
    return torch.cat([state[k].flatten(1) for k in sorted(state)], dim=1)


def unflatten_state(flat: torch.Tensor, template: Mapping[str, torch.Tensor]) -> TensorDict:
    """`[B, D]` -> `{key: [B, *template[key].shape]}`: the inverse of `flatten_state` for a
    module whose `get_initial_state()` is `template`."""
    out: TensorDict = {}
    start = 0
    for key in sorted(template):
        shape = template[key].shape
        size = int(np.prod(shape)) if shape else 1
        out[key] = flat[:, start : start + size].reshape(flat.shape[0], *shape)
        start += size
    if start != flat.shape[-1]:
        raise ValueError(
            f"state_in has {flat.shape[-1]} numbers per row, the module's initial state "
            f"{start}: the state was recorded by a module of another model_config."
        )
    return out


def state_of(
    batch: Mapping[str, object], initial_state: Callable[[], Mapping[str, torch.Tensor]]
) -> TensorDict:
    """The `STATE_IN` of a forward batch as a dict: given as one (RLlib's way), as a flat
    `[B, D]` column (a Learner's batch; `initial_state()` gives its layout), or absent (each
    row starts an episode). `initial_state` is the module's `get_initial_state`, called only
    where needed (not on the EnvRunner's per-step path)."""
    state = batch.get(Columns.STATE_IN)
    if isinstance(state, Mapping):
        return dict(state)
    if isinstance(state, torch.Tensor):
        return unflatten_state(state, initial_state())
    obs = batch[Columns.OBS]
    assert isinstance(obs, torch.Tensor)
    return initial_state_batch(initial_state(), obs.shape[0], obs.device)


def initial_state_batch(
    template: Mapping[str, torch.Tensor], n: int, device: torch.device | None = None
) -> TensorDict:
    """`get_initial_state()` repeated for `n` rows."""
    return {k: v.to(device).expand(n, *v.shape).clone() for k, v in template.items()}


def reset_rows(
    state: Mapping[str, torch.Tensor], rows: BoolArray, template: Mapping[str, torch.Tensor]
) -> TensorDict:
    """`state` with the rows where `rows` (`[B]` bool) is True set to the initial state:
    the sub-envs whose next observation starts an episode."""
    if not rows.any():
        return dict(state)
    mask = torch.from_numpy(rows)
    out: TensorDict = {}
    for key, value in state.items():
        m = mask.to(value.device).view(-1, *([1] * (value.dim() - 1)))
        out[key] = torch.where(m, template[key].to(value.device), value)
    return out


def has_time_axis(obs: torch.Tensor, observation_space: gym.Space) -> bool:
    """Whether `obs` is `[S, T, ...]` sequences rather than `[B, ...]` single steps."""
    return obs.dim() == len(observation_space.shape or ()) + 2


def prev_action_dim(action_space: gym.Space) -> int:
    """Width of the previous-action input: one-hot for Discrete / MultiDiscrete, the
    flattened action for Box."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    if isinstance(action_space, gym.spaces.Box):
        return int(np.prod(action_space.shape))
    raise TypeError(
        f"model_config['lstm_use_prev_action']=True supports Discrete, MultiDiscrete and Box "
        f"actions, not {action_space}; set it to False."
    )


def encode_prev_action(actions: torch.Tensor, action_space: gym.Space) -> torch.Tensor:
    """`[N]` / `[N, k]` actions -> `[N, prev_action_dim]` float inputs."""
    if isinstance(action_space, gym.spaces.Discrete):
        return F.one_hot((actions.long() - int(action_space.start)), int(action_space.n)).float()
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        parts = [
            F.one_hot(actions[:, i].long(), int(n)).float()
            for i, n in enumerate(np.asarray(action_space.nvec).reshape(-1))
        ]
        return torch.cat(parts, dim=-1)
    return actions.float().reshape(actions.shape[0], -1)


class LSTMCore(nn.Module):
    """One LSTM layer after an encoder, with the state keys `{prefix}h` and `{prefix}c`.

    `forward(features, batch, state)` takes the encoder's output for one step per row
    (`[B, E]`) or for sequences (`[S * T, E]`, `seq_len=T`), adds the previous action and
    reward where asked, and returns the LSTM's output in the same row layout and the
    state after the last step. Padding steps come after a sequence's real ones, so they
    never change a real step's output (the LSTM runs forward in time).
    """

    def __init__(
        self,
        in_dim: int,
        cell_size: int,
        *,
        action_space: gym.Space,
        use_prev_action: bool = False,
        use_prev_reward: bool = False,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.action_space = action_space
        self.use_prev_action = use_prev_action
        self.use_prev_reward = use_prev_reward
        extra = (prev_action_dim(action_space) if use_prev_action else 0) + int(use_prev_reward)
        self.lstm = nn.LSTM(in_dim + extra, cell_size, batch_first=True)
        self.cell_size = cell_size
        self.keys = (f"{prefix}h", f"{prefix}c")

    def initial_state(self) -> TensorDict:
        """Zeros for h and c, `[cell_size]` each."""
        return {k: torch.zeros(self.cell_size) for k in self.keys}

    def forward(
        self,
        features: torch.Tensor,
        batch: Mapping[str, torch.Tensor],
        state: Mapping[str, torch.Tensor],
        seq_len: int | None = None,
    ) -> tuple[torch.Tensor, TensorDict]:
        inputs = [features]
        if self.use_prev_action:
            prev = batch[PREV_ACTIONS]
            inputs.append(
                encode_prev_action(prev.flatten(0, 1) if seq_len else prev, self.action_space)
            )
        if self.use_prev_reward:
            prev_r = batch[PREV_REWARDS]
            inputs.append((prev_r.flatten(0, 1) if seq_len else prev_r).float().reshape(-1, 1))
        x = torch.cat(inputs, dim=-1) if len(inputs) > 1 else features
        x = x.view(-1, seq_len or 1, x.shape[-1])  # [S, T, E]
        h, c = (state[k].unsqueeze(0).contiguous() for k in self.keys)  # [1, S, H]
        out, (h_n, c_n) = self.lstm(x, (h, c))
        out = out.reshape(-1, self.cell_size)  # back to the rows' layout
        return out, {self.keys[0]: h_n.squeeze(0), self.keys[1]: c_n.squeeze(0)}


def refuse_use_lstm(use_lstm: bool, algorithm: str) -> None:
    """Raises a ValueError naming `model_config["use_lstm"]` for an algorithm whose
    modules or Learner do not carry recurrent states (yet)."""
    if use_lstm:
        raise ValueError(
            f"model_config['use_lstm']=True is not supported by {algorithm}: its modules "
            "have no recurrent state. Use PPO, BC or MARWIL for recurrent policies, or set "
            "use_lstm=False (e.g. stack recent observations with a frame-stacking "
            "env-to-module connector)."
        )
