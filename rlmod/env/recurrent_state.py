"""RecurrentState: what a SingleAgentEnvRunner carries per sub-env for a stateful module.

Used by SingleAgentEnvRunner when its module `is_stateful()` (e.g. `use_lstm`): each
sub-env's recurrent state, previous action and previous reward, reset where a sub-env's
next observation starts an episode (NEXT_STEP autoreset: the step after a done one), and
recorded per step so that Learners replay the sequences from the state each step began
with (`Columns.STATE_IN`, flattened).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from rlmod.core.columns import Columns
from rlmod.core.multi_rl_module import MultiRLModule
from rlmod.core.recurrent import (
    PREV_ACTIONS,
    PREV_REWARDS,
    flatten_state,
    initial_state_batch,
    reset_rows,
)
from rlmod.core.rl_module import RLModule
from rlmod.core.types import Array, BoolArray

TensorDict = dict[str, torch.Tensor]


class RecurrentState:
    """Per sub-env state of a stateful module across `step()` calls of a vector env."""

    columns = (Columns.STATE_IN, PREV_ACTIONS, PREV_REWARDS)
    """The step columns `record()` writes, which the batch keeps."""

    def __init__(self, module: RLModule, num_envs: int) -> None:
        self.module = module
        self.num_envs = num_envs
        self.template = module.get_initial_state()
        self.state: TensorDict = initial_state_batch(self.template, num_envs)
        self.prev_actions: Array | None = None  # shaped at the first step
        self.prev_rewards = np.zeros(num_envs, np.float32)

    def reset_all(self) -> None:
        """Every sub-env starts an episode (EnvRunner reset)."""
        self.state = initial_state_batch(self.template, self.num_envs)
        if self.prev_actions is not None:
            self.prev_actions[:] = 0
        self.prev_rewards[:] = 0.0

    def inputs(self, batch: TensorDict) -> TensorDict:
        """`batch` (the forward batch of this step) with the state and previous
        action and reward added."""
        batch[Columns.STATE_IN] = self.state  # type: ignore[assignment]
        if self.prev_actions is not None:
            batch[PREV_ACTIONS] = torch.from_numpy(self.prev_actions)
        else:  # before the first action: zeros shaped as one
            shape = self.module.action_space.shape or ()
            batch[PREV_ACTIONS] = torch.zeros((self.num_envs, *shape))
        batch[PREV_REWARDS] = torch.from_numpy(self.prev_rewards)
        return batch

    def record(self, batch: Mapping[str, torch.Tensor]) -> dict[str, Array]:
        """The step columns: the state, previous action and reward this step began with."""
        return {
            Columns.STATE_IN: flatten_state(self.state).numpy(),
            PREV_ACTIONS: batch[PREV_ACTIONS].numpy(),
            PREV_REWARDS: self.prev_rewards.copy(),
        }

    def advance(
        self,
        state_out: Mapping[str, torch.Tensor],
        actions: Array,
        rewards: Array,
        starts_episode: BoolArray,
    ) -> None:
        """After a step: the module's new state, and this step's action and reward, except
        for the sub-envs whose next observation starts an episode (`starts_episode`,
        `[N]` bool), which go back to the initial state and zeros."""
        self.state = reset_rows(state_out, starts_episode, self.template)
        acts = np.array(actions, copy=True)
        acts[starts_episode] = 0
        self.prev_actions = acts
        self.prev_rewards = np.where(starts_episode, 0.0, rewards).astype(np.float32)


def refuse_stateful(modules: MultiRLModule, runner: str) -> None:
    """Raises a ValueError naming the modules that carry a state: multi-agent EnvRunners
    do not carry recurrent states yet."""
    stateful = [mid for mid, m in modules.items() if m.is_stateful()]
    if stateful:
        raise ValueError(
            f"{runner} does not carry recurrent states: module(s) {stateful} are stateful "
            "(model_config use_lstm=True). Set use_lstm=False for multi-agent configs, or "
            "train the recurrent policy in a single-agent env."
        )
