"""Tests of rlmod/utils/gc_pause.py."""

from __future__ import annotations

import gc

import pytest

from rlmod.utils.gc_pause import gc_paused

pytestmark = pytest.mark.fast_path  # rlmod/fast_paths.py


def test_paused_inside_and_back_on_after_a_raise():
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        assert not gc.isenabled()
        _ = 1 / 0
    assert gc.isenabled()


def test_nested_and_as_a_decorator_leave_an_off_collector_off():
    @gc_paused()
    def inner() -> bool:
        return gc.isenabled()

    with gc_paused():
        assert inner() is False
        assert not gc.isenabled()  # the inner block did not turn it on early
    assert gc.isenabled()
    gc.disable()
    try:
        inner()
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_building_an_algorithm_leaves_the_collector_on():
    from rlmod.algorithms.ppo import PPOConfig
    from rlmod.testing import MultiAgentCartPole

    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 3})
        .multi_agent(policies={"a0", "a1", "a2"}, policy_mapping_fn=lambda aid, episode: f"a{aid}")
    )
    algo = config.build_algo()
    assert gc.isenabled()
    algo.stop()
