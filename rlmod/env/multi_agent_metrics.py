"""EpisodeStats: what the multi-agent EnvRunners report of the episodes finished since its last
`get_metrics()`: returns and lengths, overall, per module and per agent.

Recorded once per finished env episode with array operations over its agents, grouped by
module and by agent once per `get_metrics()` (not a dict append per module or agent per
episode: 1,000 appends per episode end at 1,000 modules).
"""

from __future__ import annotations

import numpy as np

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array, MetricsDict
from rlmod.env.multi_agent_env import AgentID


class EpisodeStats:
    """Returns and lengths of finished episodes, overall, per module and per agent.

    Args:
        module_ids: The runner's module IDs (module index -> ID).
        agents: The env's possible agents (agent index -> ID).
    """

    def __init__(self, module_ids: list[ModuleID], agents: list[AgentID]) -> None:
        self.module_ids = module_ids
        self.agents = agents
        self.clear()

    def clear(self) -> None:
        self.returns: list[float] = []
        self.lens: list[int] = []
        # Per finished episode: (agents, their returns), and their modules.
        self.agent_returns: list[tuple[Array, Array]] = []
        self.modules: list[Array] = []

    def __len__(self) -> int:
        """Episodes finished since the last `export()`."""
        return len(self.returns)

    def add(self, length: int, agents: Array, returns: Array, modules: Array) -> None:
        """One finished env episode of `length` steps: its agents (indices), their
        returns and their modules (indices)."""
        self.returns.append(float(returns.sum()))
        self.lens.append(length)
        self.agent_returns.append((agents, returns))
        self.modules.append(modules)

    def mark(self) -> int:
        """Where the record stands now, for `rollback()`."""
        return len(self.returns)

    def rollback(self, mark: int) -> None:
        """Forgets the episodes recorded since `mark` (a failed `sample()` call's)."""
        del self.returns[mark:], self.lens[mark:], self.agent_returns[mark:]
        del self.modules[mark:]

    def export(self) -> MetricsDict:
        """The metrics of `get_metrics()`, then a fresh record."""
        out = {
            "episode_returns": self.returns,
            "episode_lens": self.lens,
            "module_episode_returns": self._returns_by_module(),
            "agent_episode_returns": returns_by_agent(self.agent_returns, self.agents),
        }
        self.clear()
        return out

    def _returns_by_module(self) -> dict[ModuleID, list[float]]:
        """Each module's return per episode it took part in (the sum over its agents),
        in episode order."""
        if not self.modules:
            return {}
        num_modules = len(self.module_ids)
        episode = np.repeat(np.arange(len(self.modules)), [len(m) for m in self.modules])
        keys, inverse = np.unique(
            episode * num_modules + np.concatenate(self.modules), return_inverse=True
        )  # sorted: episode-major
        sums = np.bincount(inverse, weights=np.concatenate([r for _, r in self.agent_returns]))
        module = keys % num_modules
        order = np.argsort(module, kind="stable")  # stable: episode order per module
        module, sums = module[order], sums[order]
        cuts = np.flatnonzero(module[1:] != module[:-1]) + 1
        firsts = np.concatenate([[0], cuts]).tolist()
        return {
            self.module_ids[module[i]]: part.tolist()
            for i, part in zip(firsts, np.split(sums, cuts), strict=True)
        }


def returns_by_agent(
    agent_returns: list[tuple[Array, Array]], agents: list[AgentID]
) -> dict[AgentID, list[float]]:
    """Each agent's episode returns, in episode order, from (agent indices, returns) per
    finished episode; grouped once per get_metrics() rather than per agent and episode."""
    if not agent_returns:
        return {}
    idx = np.concatenate([a for a, _ in agent_returns])
    rets = np.concatenate([r for _, r in agent_returns])
    order = np.argsort(idx, kind="stable")  # stable: keeps episode order per agent
    idx, rets = idx[order], rets[order]
    cuts = np.flatnonzero(idx[1:] != idx[:-1]) + 1
    firsts = np.concatenate([[0], cuts]).tolist()
    return {agents[idx[i]]: r.tolist() for i, r in zip(firsts, np.split(rets, cuts), strict=True)}
