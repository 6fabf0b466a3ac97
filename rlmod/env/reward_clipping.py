"""Reward clipping (`config.environment(clip_rewards=...)`): the rewards Learners train on.

Used by EnvRunnerGroup.sample(), once per module batch of a sample() call (no per-step
work), after the EnvRunners recorded episode returns and offline data from the env's own
rewards, as RLlib's old stack clipped in its sample collector before postprocessing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlmod.core.columns import Columns
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


def clip_sample_rewards(results: Sequence[SampleResult], clip: RewardClip) -> None:
    """Replaces the rewards column of every module batch in `results` by its clipped copy
    (a new array: a remote EnvRunner's arrays arrive read-only)."""
    if clip is None or clip is False:
        return
    for result in results:
        for batch in result.values():
            if Columns.REWARDS in batch:
                batch[Columns.REWARDS] = clip_rewards(batch[Columns.REWARDS], clip)
