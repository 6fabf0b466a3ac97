"""Reward clipping (`config.environment(clip_rewards=...)`): the rewards Learners train on.

Used by EnvRunnerGroup.sample(), once per module batch of a sample() call (no per-step
work), after the EnvRunners recorded episode returns and offline data from the env's own
rewards, as RLlib's old stack clipped in its sample collector before postprocessing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array
from rlmod.env.env_runner import SampleResult

RewardClip = bool | float | tuple[float, float] | None
"""None or False: off; True: each reward's sign; c: [-c, c]; (low, high): [low, high]."""


def clip_rewards(rewards: Array, clip: RewardClip) -> Array:
    """`rewards` clipped as `clip` says (a new array in the same dtype; `rewards` itself
    when clipping is off)."""
    if clip is None or clip is False:
        return rewards
    if clip is True:
        out = np.sign(rewards)
    elif isinstance(clip, tuple):
        out = np.clip(rewards, clip[0], clip[1])
    else:
        out = np.clip(rewards, -clip, clip)
    return out.astype(rewards.dtype, copy=False)


def clip_sample_rewards(
    results: Sequence[SampleResult], clip_of: Callable[[ModuleID], RewardClip]
) -> None:
    """Replaces the rewards column of every module batch in `results` by its clipped copy
    (a new array: a remote EnvRunner's arrays arrive read-only); `clip_of(module_id)`: that
    module's `clip_rewards` (per-module config overrides may set their own)."""
    for result in results:
        for module_id, batch in result.items():
            clip = clip_of(module_id)
            if clip is not None and clip is not False and Columns.REWARDS in batch:
                batch[Columns.REWARDS] = clip_rewards(batch[Columns.REWARDS], clip)
