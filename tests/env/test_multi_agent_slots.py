"""Tests of ActingAgents (rlmod/env/multi_agent_slots.py) and the `seq_ends` helper both
multi-agent runners build their batches with (rlmod/env/env_runner.py)."""

from __future__ import annotations

import numpy as np

from rlmod.env.env_runner import sequence_ends
from rlmod.env.multi_agent_rows import EnvReturns, FlaggedEnv
from rlmod.env.multi_agent_slots import ActingAgents


def test_acting_order_runs_env_after_env_in_the_order_agents_were_added():
    acting = ActingAgents(num_envs=3)
    assert acting.num == 0 and acting.agents == [(), (), ()]  # nobody acts until added
    acting.add(2, ("a", "b"), np.array([4, 5]))
    acting.add(0, ("b",), np.array([1]))
    assert acting.num == 3
    assert acting.offset[2] == 0 and acting.offset[0] == 2
    assert acting.agents[1] == () and len(acting.slots[1]) == 0


def test_observers_act_next_unless_flagged_done_or_their_env_ended():
    returns = EnvReturns(
        obs_agents=[("a", "b"), ("a", "b"), ("a",)],
        slots=[np.array([0, 1]), np.array([2, 3]), np.array([4])],
        flagged=[FlaggedEnv(1, 2, {"a": True}, {})],
        num_obs=5,
    )
    acts_next = np.array([True, True, False, True, True])  # env 1's "a" is done
    acting = ActingAgents(num_envs=3)
    acting.add_observers(returns, acts_next, ended={2})
    assert acting.agents == [("a", "b"), ("b",), ()]
    np.testing.assert_array_equal(acting.slots[1], [3])
    assert acting.offset[:2] == [0, 2] and acting.num == 3


def test_sequences_end_with_their_episode_at_a_key_change_and_at_the_last_row():
    term = np.array([False, True, False, False, False])
    trunc = np.array([False, False, False, False, False])
    eps = np.array([0, 0, 1, 1, 2])
    slots = np.array([0, 0, 0, 3, 3])
    ends = sequence_ends(term, trunc, eps)
    np.testing.assert_array_equal(ends, [False, True, False, True, True])
    ends = sequence_ends(term, trunc, slots)
    np.testing.assert_array_equal(ends, [False, True, True, False, True])
