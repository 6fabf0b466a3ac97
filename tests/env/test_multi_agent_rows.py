"""Tests of the dict readers MultiAgentEnvRunner builds on (rlmod/env/multi_agent_rows.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rlmod.env.multi_agent_env import ALL_AGENTS
from rlmod.env.multi_agent_observations import join_box_values, stack_observations
from rlmod.env.multi_agent_rows import read_flags

BOX = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)


def test_join_box_values_stacks_dict_values_in_order():
    rows = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    obs = {f"a{i}": rows[i] for i in range(4)}
    stacked = join_box_values(BOX, obs.values())
    assert stacked is not None and stacked.shape == (4, 2, 3) and stacked.dtype == np.float32
    np.testing.assert_array_equal(stacked, rows)


def test_join_box_values_declines_what_it_cannot_join_by_bytes():
    good = np.zeros((2, 3), np.float32)
    assert join_box_values(BOX, []) is None
    assert join_box_values(BOX, [good.astype(np.float64)]) is None  # other dtype
    assert join_box_values(BOX, [np.zeros((3, 2), np.float32)]) is None  # other shape
    assert join_box_values(BOX, [np.zeros((3, 2), np.float32).T]) is None  # not contiguous
    assert join_box_values(BOX, [good, np.zeros(3, np.float32)]) is None  # later one short
    assert join_box_values(BOX, [[0.0] * 3] * 2) is None  # not arrays
    # What it declines, stack_observations still stacks (the general path).
    mixed = [good, good.astype(np.float64)]
    assert stack_observations(BOX, mixed).shape == (2, 2, 3)


def test_read_flags_fast_path_order_mismatch_and_agents_without_obs():
    keys = ("a", "b")
    flags, flag_all, extra = read_flags({"a": False, "b": False, ALL_AGENTS: False}, keys)
    assert flags.tolist() == [False, False] and not flag_all and extra == ()
    flags, flag_all, extra = read_flags({"a": False, "b": True, ALL_AGENTS: False}, keys)
    assert flags.tolist() == [False, True] and extra == ()
    # Another order, and a done agent that got no observation this step.
    flags, flag_all, extra = read_flags({"c": True, "b": True, "a": False, ALL_AGENTS: True}, keys)
    assert flags.tolist() == [False, True] and flag_all and extra == ("c",)
