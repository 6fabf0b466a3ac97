"""The records MultiAgentEnvRunner passes between the phases of one step.

Used only by rlmod/env/multi_agent_env_runner.py: who acts next (per execution group), the
rows a step completes, the observations queued for the env-to-module pipelines, and what
every env's `step()` returned. Arrays are over agents of all envs at once (`[N]`, `[K]`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from rlmod.core.types import Array, BoolArray, FloatArray, IntArray


class ActingRows(NamedTuple):
    """One execution group's agents that act in the next step, over all envs (N of them),
    module-major in the group (see `ModuleGroups.sort_rank`)."""

    group: int  # index into ModuleGroups.groups
    obs: Array  # [N, ...] what they act on, in their modules' observation space
    obs_idx: IntArray  # [N] where those observations sit in the group's GroupBuffer
    slots: IntArray  # [N] their (env, agent) slots
    modules: IntArray  # [N] their module indices (the runner's module IDs)
    rank: IntArray  # [N] their positions in the step's acting order (the actions' order)


class ClosedRows(NamedTuple):
    """Rows completed in one step: each row's outcome (K rows, of any groups)."""

    group: IntArray  # [K] execution group index
    row: IntArray  # [K] row ID in that group's GroupBuffer
    new_obs: Array  # [K] int: the next observation (index; -1: none, the row's obs stands in)
    reward: FloatArray  # [K] everything the agent received since it acted
    terminated: Array  # [K] bool
    truncated: Array  # [K] bool


@dataclasses.dataclass
class StepObservations:
    """One step's observations of all envs, queued for `GroupedRows.process`: per env
    (and per reset), the agents' slots, their modules (taken before a reset remaps the
    slots), the observations (see `ObservationIntake.chunk`), who acts next, who observes
    first in its episode; and the rows completed (their `new_obs` indexes these
    observations)."""

    slots: list[IntArray] = dataclasses.field(default_factory=list)
    modules: list[IntArray] = dataclasses.field(default_factory=list)
    obs: list = dataclasses.field(default_factory=list)
    acts_next: list[BoolArray] = dataclasses.field(default_factory=list)
    episode_starts: list[BoolArray] = dataclasses.field(default_factory=list)
    closings: list[ClosedRows] = dataclasses.field(default_factory=list)


class FlaggedEnv(NamedTuple):
    """An env where some terminated or truncated flag of this step is True."""

    env: int
    first_obs: int  # position of its first observation among the step's observations
    terminateds: dict
    truncateds: dict


@dataclasses.dataclass
class EnvReturns:
    """What every env's `step()` returned, gathered per env in env order, so that the numpy
    work then runs once for all envs."""

    obs_agents: list[tuple] = dataclasses.field(default_factory=list)  # who observed
    slots: list[IntArray] = dataclasses.field(default_factory=list)  # their slots
    obs_chunks: list = dataclasses.field(default_factory=list)  # see ObservationIntake.chunk
    # Rewards of exactly the agents that observed, in their order, and those agents' slots.
    reward_dicts: list[dict] = dataclasses.field(default_factory=list)
    reward_slots: list[IntArray] = dataclasses.field(default_factory=list)
    flagged: list[FlaggedEnv] = dataclasses.field(default_factory=list)
    failed: list[tuple[int, BaseException]] = dataclasses.field(default_factory=list)
    num_obs: int = 0
    agent_steps: int = 0
