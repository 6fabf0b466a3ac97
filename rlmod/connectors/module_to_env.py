"""Module-to-env connectors: turn a module's outputs into actions for the env.

Run by EnvRunners after every forward pass on all sub-envs at once:
`data = pipeline(fwd_out, rl_module=module, explore=True)`; afterwards `data` holds
`actions` (what the batch records) and `env_actions` (what env.step takes). A connector may
also set `action_logp`; where none does, the EnvRunner computes the log-probs of the whole
batch at once when sampling ends (one op for all steps instead of one per step).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlmod.connectors.pipeline import Connector
from rlmod.core.columns import Columns
from rlmod.core.rl_module import RLModule

ENV_ACTIONS = "env_actions"


class ModuleToEnv(Connector):
    """Base: `(data: dict, *, rl_module, explore) -> data`."""

    def __call__(
        self, data: dict[str, Any], *, rl_module: RLModule, explore: bool, **kwargs: Any
    ) -> dict[str, Any]:
        raise NotImplementedError


class GetActions(ModuleToEnv):
    """Samples (explore) or takes the mode of the module's action distribution."""

    def __call__(
        self, data: dict[str, Any], *, rl_module: RLModule, explore: bool, **kwargs: Any
    ) -> dict[str, Any]:
        if Columns.ACTIONS not in data:
            dist = rl_module.action_dist(data[Columns.ACTION_DIST_INPUTS])
            actions = dist.sample() if explore else dist.deterministic_sample()
            data[Columns.ACTIONS] = actions
        data[ENV_ACTIONS] = data[Columns.ACTIONS].numpy()
        return data


class UnsquashAndClipActions(ModuleToEnv):
    """Maps Box actions from the module's [-1, 1] scale to the env's bounds, then clips.

    Gaussian samples are unbounded; the batch keeps the raw sample (its log-prob is what
    the loss needs), the env gets the clipped, rescaled one.
    """

    def __call__(
        self, data: dict[str, Any], *, rl_module: RLModule, explore: bool, **kwargs: Any
    ) -> dict[str, Any]:
        space = self.input_action_space
        assert isinstance(space, gym.spaces.Box)
        actions = np.asarray(data[ENV_ACTIONS], dtype=np.float32)
        low, high = space.low, space.high
        if np.all(np.isfinite(low)) and np.all(np.isfinite(high)):
            actions = low + (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
        data[ENV_ACTIONS] = actions.astype(space.dtype, copy=False)
        return data


def default_module_to_env(action_space: gym.Space) -> list[ModuleToEnv]:
    """The connectors every EnvRunner ends with for `action_space`."""
    pieces: list[ModuleToEnv] = [GetActions()]
    if isinstance(action_space, gym.spaces.Box):
        pieces.append(UnsquashAndClipActions())
    return pieces


def add_action_logp(batch: dict[str, np.ndarray], rl_module: RLModule) -> None:
    """Sets the batch's `action_logp` column from its actions and distribution inputs,
    unless a module-to-env connector already recorded it at each step."""
    if Columns.ACTION_LOGP in batch:
        return
    with torch.inference_mode():
        dist = rl_module.action_dist(torch.from_numpy(batch[Columns.ACTION_DIST_INPUTS]))
        logp = dist.logp(torch.from_numpy(batch[Columns.ACTIONS]))
    batch[Columns.ACTION_LOGP] = logp.numpy()
