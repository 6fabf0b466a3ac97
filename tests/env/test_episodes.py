"""Episode objects for callbacks (rlmod.env.episodes): RLlib's index semantics (None, an
int from either end, a list, a slice), one more observation and info than actions, the
end flags, returns and step counts, per-agent filters of multi-agent episodes, and
`info_of`'s reading of a vector env's masked infos.

What EnvRunners put into these episodes, through real callbacks, is tested in
tests/test_callbacks.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlmod.env.episodes import MultiAgentEpisode, SingleAgentEpisode, info_of


def _single(steps: int = 3, **end: bool) -> SingleAgentEpisode:
    ep = SingleAgentEpisode(id_=7, observation="o0", info={"i": 0}, env_index=2)
    for t in range(1, steps + 1):
        last = t == steps
        ep.add_env_step(
            f"o{t}",
            action=f"a{t}",
            reward=float(t),
            info={"i": t},
            terminated=last and end.get("terminated", False),
            truncated=last and end.get("truncated", False),
        )
    return ep


def test_single_agent_getters_follow_rllibs_index_semantics():
    ep = _single()
    assert ep.get_observations() == ["o0", "o1", "o2", "o3"]  # one more: the reset one
    assert ep.get_actions() == ["a1", "a2", "a3"]
    assert ep.get_observations(-1) == "o3" and ep.get_observations(0) == "o0"
    assert ep.get_actions(-1) == "a3"
    assert ep.get_rewards([0, 2]) == [1.0, 3.0]
    assert ep.get_infos(slice(-2, None)) == [{"i": 2}, {"i": 3}]
    assert ep.get_rewards(slice(5, 9)) == []
    with pytest.raises(IndexError):
        ep.get_actions(3)
    # None hands out a copy: changing it leaves the episode alone
    ep.get_rewards().append(99.0)
    assert ep.get_return() == 6.0


def test_single_agent_counts_return_and_end_flags():
    ep = _single(terminated=True)
    assert len(ep) == ep.t == ep.env_steps() == ep.agent_steps() == 3
    assert ep.get_return() == 6.0 and isinstance(ep.get_return(), float)
    assert ep.is_terminated and not ep.is_truncated and ep.is_done
    assert ep.id_ == 7 and ep.env_index == 2
    assert repr(ep) == "SingleAgentEpisode(id_=7, len=3, return=6, done=True)"
    truncated = _single(truncated=True)
    assert truncated.is_truncated and not truncated.is_terminated and truncated.is_done
    ongoing = _single()
    assert not ongoing.is_done
    ongoing.custom_data["k"] = 1
    assert ongoing.custom_data == {"k": 1}
    fresh = SingleAgentEpisode(id_=0, observation=0, info={})
    assert len(fresh) == 0 and fresh.get_return() == 0.0 and fresh.get_rewards() == []


def test_single_agent_duration_stops_at_the_last_step():
    ep = _single(terminated=True)
    first = ep.get_duration_s()
    assert first >= 0.0
    assert ep.get_duration_s() == first  # ended: no longer grows
    ongoing = _single()
    assert ongoing.get_duration_s() <= ongoing.get_duration_s()


def test_multi_agent_duration_stops_at_the_step_that_ends_it():
    ep = _multi()  # its second step sets "__all__"
    first = ep.get_duration_s()
    assert first >= 0.0
    assert ep.get_duration_s() == first  # ended: no longer grows


def _multi() -> MultiAgentEpisode:
    ep = MultiAgentEpisode(
        id_=1,
        observations={"x": 0, "y": 0},
        infos={"x": {}, "y": {}},
        agent_to_module={"x": "p0", "y": "p1"},
    )
    ep.add_env_step(
        {"x": 1, "y": 1},
        actions={"x": 10, "y": 20},
        rewards={"x": 1, "y": np.float32(2.0)},
        infos={"x": {"k": 1}},
        terminateds={"x": True, "__all__": False},
        truncateds={"__all__": False},
    )
    ep.add_env_step(
        {"y": 2, "z": 0},
        actions={"y": 21},
        rewards={"y": 0.5},
        infos={},
        terminateds={"y": True, "__all__": True},
        truncateds={"__all__": False},
    )
    return ep


def test_multi_agent_getters_filter_by_index_and_agent():
    ep = _multi()
    assert ep.get_observations(-1) == {"y": 2, "z": 0}
    assert ep.get_observations(0, agent_ids="x") == {"x": 0}
    assert ep.get_actions(agent_ids=["y"]) == [{"y": 20}, {"y": 21}]
    assert ep.get_actions(agent_ids="x") == [{"x": 10}, {}]
    assert ep.get_rewards(slice(0, 1)) == [{"x": 1.0, "y": 2.0}]
    assert ep.get_infos([0, 1], agent_ids={"x"}) == [{"x": {}}, {"x": {"k": 1}}]
    assert type(ep.get_rewards(0)["y"]) is float  # rewards stored as Python floats
    # the returned dicts are copies
    ep.get_actions(0)["x"] = 99
    assert ep.get_actions(0) == {"x": 10, "y": 20}


def test_multi_agent_integer_agent_ids_filter_too():
    ep = MultiAgentEpisode(id_=0, observations={0: "a", 1: "b"}, infos={})
    assert ep.get_observations(0, agent_ids=1) == {1: "b"}
    assert ep.get_observations(0, agent_ids=[0, 1]) == {0: "a", 1: "b"}


def test_multi_agent_counts_return_flags_and_modules():
    ep = _multi()
    assert len(ep) == ep.env_steps() == 2
    assert ep.agent_steps() == 3  # x and y acted, then only y
    assert ep.get_return() == 3.5
    assert ep.agent_ids == {"x", "y", "z"}
    assert ep.terminateds == {"x": True, "y": True, "__all__": True}
    assert ep.is_terminated and not ep.is_truncated and ep.is_done
    assert ep.module_for("y") == "p1" and ep.module_for("z") is None
    assert MultiAgentEpisode(id_=0, observations={}, infos={}).agent_to_module == {}


def test_info_of_reads_one_sub_envs_infos_by_their_masks():
    infos = {
        "score": np.array([1.0, 2.0, 3.0]),
        "_score": np.array([True, False, True]),
        "always": np.array([7, 8, 9]),
        "final": {"len": np.array([5, 6, 7]), "_len": np.array([False, True, False])},
        "_final": np.array([True, True, False]),
    }
    assert info_of(infos, 0) == {"score": 1.0, "always": 7, "final": {}}
    assert info_of(infos, 1) == {"always": 8, "final": {"len": 6}}
    assert info_of(infos, 2) == {"score": 3.0, "always": 9}  # "_final" masks it out
    assert info_of({}, 0) == {}
