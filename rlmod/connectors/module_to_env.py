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
from rlmod.core.distributions import action_dim
from rlmod.core.rl_module import RLModule
from rlmod.errors import NonFiniteActionError

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
        inputs = data.get(Columns.ACTION_DIST_INPUTS)
        if inputs is not None and not np.isfinite(inputs.numpy()).all():  # numpy's: 1/3 the time
            raise NonFiniteActionError(_non_finite(rl_module, "action distribution inputs"))
        if Columns.ACTIONS not in data:
            dist = rl_module.action_dist(data[Columns.ACTION_DIST_INPUTS])
            actions = dist.sample() if explore else dist.deterministic_sample()
            data[Columns.ACTIONS] = actions
        data[ENV_ACTIONS] = data[Columns.ACTIONS].numpy()
        return data


class ActionsToEnvSpace(ModuleToEnv):
    """Turns the module's flat actions `[N, action_dim]` into actions inside the env's
    declared space, for all sub-envs at once:

    - Discrete / MultiDiscrete: shifted by the space's `start`, shaped like `nvec`.
    - Box: per dimension, mapped from the module's [-1, 1] scale to the bounds where both
      are finite (unsquash), then clipped to every finite bound (an infinite one is left
      alone), shaped like the space, in its dtype.
    - MultiBinary: shaped like the space (int8).
    - Tuple / Dict: split into the parts, each as above (a tuple/dict of batched arrays,
      what a gymnasium vector env takes).

    Gaussian samples are unbounded; the batch keeps the raw sample (its log-prob is what
    the loss needs), the env gets the mapped, clipped one.
    """

    _plan: Any = None

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        self._plan = _plan(input_action_space)
        return input_observation_space

    def __call__(
        self, data: dict[str, Any], *, rl_module: RLModule, explore: bool, **kwargs: Any
    ) -> dict[str, Any]:
        actions = np.asarray(data[ENV_ACTIONS])
        data[ENV_ACTIONS] = _to_env(self._plan, actions.reshape(actions.shape[0], -1))
        return data


def _plan(space: gym.Space) -> Any:
    """What `_to_env` does for `space`, with the bounds math precomputed once."""
    if isinstance(space, gym.spaces.Discrete):
        return ("discrete", int(space.start), space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return ("multi_discrete", space.start.reshape(-1), space.nvec.shape, space.dtype)
    if isinstance(space, gym.spaces.MultiBinary):
        return ("multi_binary", space.shape, space.dtype)
    if isinstance(space, gym.spaces.Box):
        ftype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.float64
        low = space.low.reshape(-1).astype(ftype)
        high = space.high.reshape(-1).astype(ftype)
        both = np.isfinite(low) & np.isfinite(high)  # unsquash these dimensions
        scale = np.where(both, 0.5 * (high - low), 1.0)
        offset = np.where(both, low + scale, 0.0)  # low + (a + 1) * scale
        return (
            "box",
            both if both.any() else None,
            scale.astype(ftype),
            offset.astype(ftype),
            low,
            high,
            ftype,
            space.shape,
            space.dtype,
        )
    if isinstance(space, gym.spaces.Tuple | gym.spaces.Dict):
        parts = (
            list(space.spaces.items())
            if isinstance(space, gym.spaces.Dict)
            else list(enumerate(space.spaces))
        )
        widths = np.cumsum([0, *(action_dim(p) for _, p in parts)])
        return (
            "dict" if isinstance(space, gym.spaces.Dict) else "tuple",
            [(k, int(widths[i]), int(widths[i + 1]), _plan(p)) for i, (k, p) in enumerate(parts)],
        )
    raise TypeError(f"Action space {space} is not supported by ActionsToEnvSpace.")


def _to_env(plan: Any, flat: np.ndarray) -> Any:
    """Flat module actions `[N, width]` to the env's actions per `_plan`."""
    kind, n = plan[0], flat.shape[0]
    if kind == "discrete":
        return flat.reshape(n).astype(plan[2], copy=False) + plan[1]
    if kind == "multi_discrete":
        return (flat.astype(plan[3], copy=False) + plan[1]).reshape(n, *plan[2])
    if kind == "multi_binary":
        return flat.astype(plan[2], copy=False).reshape(n, *plan[1])
    if kind == "box":
        _, both, scale, offset, low, high, ftype, shape, dtype = plan
        a = flat.astype(ftype, copy=False)
        if not np.isfinite(a).all():  # np.clip would pass a NaN on to the env
            raise NonFiniteActionError(_non_finite(None, "Box actions"))
        if both is not None:
            a = np.where(both, np.clip(a, -1.0, 1.0) * scale + offset, a)
        # Clip to every finite bound; an infinite bound clips nothing. An integer Box gets
        # the nearest integer (a cast alone would truncate 2.9 to 2).
        a = np.clip(a, low, high)
        if not np.issubdtype(dtype, np.floating):
            a = np.rint(a)
        return a.astype(dtype, copy=False).reshape(n, *shape)
    parts = plan[1]
    values = [(k, _to_env(p, flat[:, lo:hi])) for k, lo, hi, p in parts]
    return dict(values) if kind == "dict" else tuple(v for _, v in values)


def _non_finite(rl_module: RLModule | None, what: str) -> str:
    module = f"{type(rl_module).__name__}'s " if rl_module is not None else "The module's "
    return (
        f"{module}{what} hold NaN or inf; no action was sent to the env. The weights "
        "diverged or were corrupted (restore a good checkpoint; lower lr or set "
        "grad_clip), or an observation is extreme (normalize it)."
    )


def default_module_to_env(action_space: gym.Space) -> list[ModuleToEnv]:
    """The connectors every EnvRunner ends with for `action_space`: sampling, then (but
    for a Discrete space starting at 0, whose samples already are env actions) the map
    into the env's space."""
    pieces: list[ModuleToEnv] = [GetActions()]
    if not (isinstance(action_space, gym.spaces.Discrete) and int(action_space.start) == 0):
        pieces.append(ActionsToEnvSpace())
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


def actions_from_env(
    action_space: gym.Space, env_actions: np.ndarray, *, plan: Any = None
) -> np.ndarray:
    """The inverse of `ActionsToEnvSpace` for recorded env actions `[N, ...]`: what the
    module's action distribution takes (Discrete shifted to 0, Box bounds mapped back to
    [-1, 1] where both are finite, flat rows). Offline data stores env actions; BC and
    MARWIL need the module's, to score them with `logp`. `plan`: `_plan(action_space)`,
    precomputed by callers that map many batches."""
    plan = _plan(action_space) if plan is None else plan
    kind, n = plan[0], len(env_actions)
    if kind == "discrete":
        return np.asarray(env_actions).reshape(n).astype(np.int64) - plan[1]
    if kind == "multi_discrete":
        return np.asarray(env_actions).reshape(n, -1).astype(np.int64) - plan[1]
    if kind == "multi_binary":
        return np.asarray(env_actions).reshape(n, -1)
    if kind == "box":
        _, both, scale, offset, *_ = plan
        a = np.asarray(env_actions, dtype=np.float32).reshape(n, -1)
        if both is not None:
            a = np.where(both, (a - offset) / scale, a).astype(np.float32)
        return a
    raise TypeError(
        f"Recorded actions of space {action_space} cannot be mapped back; "
        "offline data supports Box, Discrete, MultiDiscrete and MultiBinary."
    )
