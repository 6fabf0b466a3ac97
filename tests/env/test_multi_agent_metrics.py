"""Tests of EpisodeStats (rlmod/env/multi_agent_metrics.py): per-module and per-agent
returns of finished episodes, and the rollback of a failed sample() call."""

from __future__ import annotations

import numpy as np

from rlmod.env.multi_agent_metrics import EpisodeStats


def test_returns_are_summed_per_module_and_kept_per_agent_in_episode_order() -> None:
    stats = EpisodeStats(["p0", "p1", "p2"], ["a", "b", "c"])
    # Episode 1: agents a, b on p0, c on p2. Episode 2: a on p1, b on p0.
    stats.add(10, np.array([0, 1, 2]), np.array([1.0, 2.0, 4.0]), np.array([0, 0, 2]))
    stats.add(7, np.array([0, 1]), np.array([0.5, 3.0]), np.array([1, 0]))
    out = stats.export()
    assert out["episode_returns"] == [7.0, 3.5] and out["episode_lens"] == [10, 7]
    assert out["module_episode_returns"] == {"p0": [3.0, 3.0], "p2": [4.0], "p1": [0.5]}
    assert out["agent_episode_returns"] == {"a": [1.0, 0.5], "b": [2.0, 3.0], "c": [4.0]}
    assert len(stats) == 0 and stats.export()["episode_returns"] == []


def test_rollback_forgets_the_episodes_since_the_mark() -> None:
    stats = EpisodeStats(["p0", "p1"], ["a", "b"])
    stats.add(3, np.array([0]), np.array([1.0]), np.array([0]))
    mark = stats.mark()
    stats.add(4, np.array([0, 1]), np.array([2.0, 5.0]), np.array([0, 1]))
    stats.rollback(mark)
    out = stats.export()
    assert out["episode_returns"] == [1.0]
    assert {k: v for k, v in out["module_episode_returns"].items() if v} == {"p0": [1.0]}
    assert out["agent_episode_returns"] == {"a": [1.0]}
