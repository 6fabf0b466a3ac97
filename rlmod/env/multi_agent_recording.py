"""RowRecorder: writes a MultiAgentEnvRunner's per-module batches to Parquet
(`config.offline_data(output=DIR)`), each row with its agent ID.

Multi-agent rows are recorded as the modules see them, so recording needs modules whose
env-to-module connectors leave observations raw and whose actions reach the env unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from rlmod.core.multi_rl_module import ModuleID
from rlmod.core.types import Array
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import AgentID
from rlmod.env.multi_agent_rows import SLOT
from rlmod.errors import OfflineDataError
from rlmod.offline.writer import AGENT_ID, EpisodeWriter

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig
    from rlmod.connectors.pipeline import ConnectorPipeline


class RowRecorder:
    """An EpisodeWriter fed with per-module batches whose `SLOT` column names the agent."""

    def __init__(self, writer: EpisodeWriter, agents: list[AgentID]) -> None:
        self.writer = writer
        self.agents = agents
        self._names = np.array([str(a) for a in agents], dtype=object)

    @classmethod
    def create(
        cls,
        config: AlgorithmConfig,
        *,
        module_ids: list[ModuleID],
        spaces: ModuleSpaces,
        module_to_env: dict[ModuleID, ConnectorPipeline],
        env_spaces: dict[str, tuple[gym.Space, gym.Space]],
        agents: list[AgentID],
        worker_index: int,
    ) -> RowRecorder | None:
        """A recorder when `config.output` is set (else None); an OfflineDataError where a
        module's connectors would make the recorded rows differ from the env's (the
        single-agent EnvRunner records raw data in every case)."""
        if config.output is None:
            return None
        for mid in module_ids:
            pipeline = spaces.env_to_module.get(mid)
            if (pipeline is not None and len(pipeline)) or len(module_to_env[mid]) > 1:
                raise OfflineDataError(
                    f"offline_data(output=...) with a MultiAgentEnvRunner records what the "
                    f"modules see; module {mid!r} sees transformed observations ({pipeline}) "
                    "or maps its actions into the env's space, which would make the "
                    "recorded rows differ from the env's. Record envs with flat float32 Box "
                    "observations and Discrete actions starting at 0, or leave output unset."
                )
        writer = EpisodeWriter(
            config.output,
            spaces=env_spaces,
            max_rows_per_file=config.output_max_rows_per_file,
            file_prefix=f"env_runner_{worker_index}",
        )
        return cls(writer, agents)

    def write(self, module_id: ModuleID, batch: dict[str, Array]) -> None:
        """Hands a module's rows to the writer with each row's agent ID (the slot column
        is popped off the batch)."""
        slots = batch.pop(SLOT)
        self.writer.add_batch(
            {module_id: {**batch, AGENT_ID: self._names[slots % len(self.agents)]}}
        )
