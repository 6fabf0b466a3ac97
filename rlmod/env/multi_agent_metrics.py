"""EpisodeStats: what MultiAgentEnvRunner reports of the episodes finished since its last
`get_metrics()`: returns and lengths, overall, per module and per agent.

Recorded once per finished env episode with array operations over its agents, grouped by
agent once per `get_metrics()` (not a dict append per agent per episode).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmod.core.multi_rl_module import ModuleID
from rlmod.env.multi_agent_rows import returns_by_agent


class EpisodeStats:
    """Returns and lengths of finished episodes, overall, per module and per agent.

    Args:
        module_ids: The runner's module IDs (module index -> ID).
        agents: The env's possible agents (agent index -> ID).
    """

    def __init__(self, module_ids: list[ModuleID], agents: list[Any]) -> None:
        self.module_ids = module_ids
        self.agents = agents
        self.clear()

    def clear(self) -> None:
        self.returns: list[float] = []
        self.lens: list[int] = []
        self.module_returns: dict[ModuleID, list[float]] = {}
        self.agent_returns: list[tuple[np.ndarray, np.ndarray]] = []  # (agents, returns)

    def __len__(self) -> int:
        """Episodes finished since the last `export()`."""
        return len(self.returns)

    def add(self, length: int, agents: np.ndarray, returns: np.ndarray,
            modules: np.ndarray) -> None:
        """One finished env episode of `length` steps: its agents (indices), their
        returns and their modules (indices)."""
        self.returns.append(float(returns.sum()))
        self.lens.append(length)
        sums = np.bincount(modules, weights=returns, minlength=len(self.module_ids))
        for m in np.unique(modules).tolist():
            self.module_returns.setdefault(self.module_ids[m], []).append(float(sums[m]))
        self.agent_returns.append((agents, returns))

    def mark(self) -> tuple[int, int, int, dict[ModuleID, int]]:
        """Where the record stands now, for `rollback()`."""
        return (len(self.returns), len(self.lens), len(self.agent_returns),
                {mid: len(v) for mid, v in self.module_returns.items()})

    def rollback(self, mark: tuple[int, int, int, dict[ModuleID, int]]) -> None:
        """Forgets the episodes recorded since `mark` (a failed `sample()` call's)."""
        del self.returns[mark[0]:], self.lens[mark[1]:], self.agent_returns[mark[2]:]
        for mid in list(self.module_returns):
            del self.module_returns[mid][mark[3].get(mid, 0):]

    def export(self) -> dict[str, Any]:
        """The metrics of `get_metrics()`, then a fresh record."""
        out = {"episode_returns": self.returns, "episode_lens": self.lens,
               "module_episode_returns": self.module_returns,
               "agent_episode_returns": returns_by_agent(self.agent_returns, self.agents)}
        self.clear()
        return out
