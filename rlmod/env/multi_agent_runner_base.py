"""MultiAgentRunnerBase: what both multi-agent EnvRunners share around their sampling loop.

Used by ReferenceMultiAgentEnvRunner (plain Python, dicts per agent) and MultiAgentEnvRunner
(vectorized): they differ in how they step envs and keep rows, and in nothing here. Here:
making the envs, the module spaces and the inference-only module spec, taking the built
modules, counting steps, and the EnvRunner API around them (`get_spaces`, `get_metrics`,
`get_state` / `set_state`, `stop`).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, cast

import gymnasium as gym

from rlmod.callbacks import EPISODE_HOOKS, Callbacks
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.types import Array, Components, MetricsDict, StateDict
from rlmod.env.env_runner import EnvRunner
from rlmod.env.module_spaces import ModuleSpaces
from rlmod.env.multi_agent_env import (
    AgentID,
    MultiAgentDict,
    MultiAgentEnv,
    multi_agent_env_from,
)
from rlmod.env.multi_agent_metrics import EpisodeStats
from rlmod.env.multi_agent_observations import AgentPlace, ObservationIntake
from rlmod.env.recurrent_state import refuse_stateful
from rlmod.errors import EnvError
from rlmod.utils.checkpoints import select_components
from rlmod.utils.seeding import derive_seed

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

_LIFETIME_KEYS = ("num_env_steps_sampled_lifetime", "num_agent_steps_sampled_lifetime")


class MultiAgentRunnerBase(EnvRunner):
    """Envs, spaces, module spec, step counts, metrics and state of a multi-agent EnvRunner.

    A subclass builds its MultiRLModule from `self._spec` (inside `own_torch_rng()`) and
    hands it to `_use_module`; it implements `sample()` and `_locate` (for errors).
    """

    def __init__(self, *, config: AlgorithmConfig, worker_index: int = 0) -> None:
        super().__init__(config=config, worker_index=worker_index)
        self.num_envs = config.num_envs_per_env_runner
        self.envs: list[MultiAgentEnv] = [self._make_env() for _ in range(self.num_envs)]
        for env in self.envs:
            self.callbacks.call(
                "on_environment_created",
                env_runner=self,
                metrics_logger=self.metrics,
                env=env,
                env_context=dict(config.env_config),
            )
        self._agents: list[AgentID] = list(self.envs[0].possible_agents)
        # Raw spaces per module, from the env's agents (SETUP_EPISODE); checks the mapping.
        self._spaces = ModuleSpaces(config, self.envs, self._agents)
        self._spec = config.get_multi_rl_module_spec(
            env=self.envs[0], spaces=self._spaces.runner_spaces(), inference_only=True
        )
        self._module: MultiRLModule | None = None  # see _use_module
        self._intake = ObservationIntake(
            env_name=config.env,
            spaces=self._spaces,
            check_obs=config.check_agent_observations,
            locate=self._locate,
        )
        self._seeds = [derive_seed(config.seed, self.seed_index, e) for e in range(self.num_envs)]
        self._num_env_steps = self._num_agent_steps = 0  # since the last get_metrics()
        self._num_restarts = 0  # likewise: envs recreated after raising
        self.num_env_steps_sampled_lifetime = self.num_agent_steps_sampled_lifetime = 0

    def _make_env(self) -> MultiAgentEnv:
        return multi_agent_env_from(self.config.env, self.config.env_config)

    def _reset_env_once(self, e: int) -> tuple[MultiAgentDict, MultiAgentDict]:
        """Env `e`'s `reset()`: (observations, infos) by agent."""
        seed, self._seeds[e] = self._seeds[e], None  # seed once; later resets continue its RNG
        try:
            return self.envs[e].reset(seed=seed)
        except Exception as err:
            raise EnvError(f"env={self.config.env!r} raised in reset(): {err!r}") from err

    def _use_module(self, module: MultiRLModule) -> None:
        """Takes the built modules: their IDs and indices (module index = position in
        `module_ids`), module-to-env pipelines and episode statistics."""
        refuse_stateful(module, type(self).__name__)  # no per-agent recurrent states yet
        self._module = module.eval()
        self._spaces.attach(module)
        self._module_ids: list[ModuleID] = list(module.keys())
        self._module_index = {mid: i for i, mid in enumerate(self._module_ids)}
        self._module_to_env = self._spaces.module_to_env(module)
        self._stats = EpisodeStats(self._module_ids, self._agents)

    @abc.abstractmethod
    def _locate(self, key: int) -> AgentPlace:
        """Where the observation or reward `key` (the subclass's index) came from."""

    @contextlib.contextmanager
    def _sampling_call(self) -> Iterator[None]:
        """Runs a `sample()` call's steps on this EnvRunner's torch RNG. Where they raise,
        none of the call's rows reach a batch: its episodes leave the metrics, the counters
        count none of its steps (`_count_steps` comes after), and `_forget_call()` makes
        the next call start every env afresh."""
        mark = self._stats.mark()
        try:
            with self.own_torch_rng():
                yield
        except BaseException:
            self._stats.rollback(mark)
            self._forget_call()
            raise

    @abc.abstractmethod
    def _forget_call(self) -> None:
        """Drops what a failed `sample()` call left (see `_sampling_call`)."""

    def _count_steps(self, env_steps: int, agent_steps: int) -> None:
        """Counts the steps of a `sample()` call whose rows reach a batch."""
        self._num_env_steps += env_steps
        self._num_agent_steps += agent_steps
        self.num_env_steps_sampled_lifetime += env_steps
        self.num_agent_steps_sampled_lifetime += agent_steps

    # ------------------------------------------------------------------ the EnvRunner API
    @property
    def module(self) -> MultiRLModule:
        """The inference-only MultiRLModule."""
        self.make_module()
        assert self._module is not None
        return self._module

    @property
    def module_ids(self) -> list[ModuleID]:
        self.make_module()
        return list(self._module_ids)

    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        """See ModuleSpaces.runner_spaces; modules no agent maps to: from the spec until
        the modules are built."""
        return self._spaces.runner_spaces(
            (self._spec.rl_module_specs if self._module is None else self._module).items()
        )

    def get_metrics(self) -> MetricsDict:
        self.make_module()
        metrics = {
            **self._stats.export(),
            "num_env_steps": self._num_env_steps,
            "num_agent_steps": self._num_agent_steps,
            "num_sub_env_restarts": self._num_restarts,
        }
        if self.metrics:
            metrics["metrics_logger"] = self.metrics.export_period()
        self._num_restarts = 0
        self._num_env_steps = self._num_agent_steps = 0
        return metrics

    def get_state(
        self, components: Components = None, *, not_components: Components = None, **kwargs: object
    ) -> StateDict:
        self.make_module()
        state: StateDict = {
            "env_to_module": {
                mid: s for mid, p in self._spaces.env_to_module.items() if (s := p.get_state())
            },
            **{key: getattr(self, key) for key in _LIFETIME_KEYS},
        }
        if select_components(components, not_components, "rl_module")[0]:
            weights = self.module.get_state(inference_only=True)
            state["rl_module"] = {
                mid: {k: v.numpy() for k, v in s.items()} for mid, s in weights.items()
            }
        return state

    def set_state(self, state: StateDict) -> None:
        """Restores any subset of `get_state()`; weights of a module this EnvRunner does
        not hold (e.g. a learner-only one) raise UnknownModuleIDError."""
        self.make_module()
        state = self._drop_stale_weights(state)
        if "rl_module" in state:
            self._set_weights(cast("Mapping[ModuleID, Mapping[str, Array]]", state["rl_module"]))
        connector_states = cast(
            "Mapping[ModuleID, dict[str, object]]", state.get("env_to_module", {})
        )
        for mid, s in connector_states.items():
            self._spaces.env_to_module[mid].set_state(s)
        for key in _LIFETIME_KEYS:
            if key in state:
                setattr(self, key, int(cast(int, state[key])))

    def _set_weights(self, weights: Mapping[ModuleID, Mapping[str, Array]]) -> None:
        """Loads inference-only weights by module ID."""
        assert self._module is not None
        self._module.set_state(cast(dict, weights))

    def stop(self) -> None:
        for env in self.envs:
            env.close()


def unsupported_features(config: AlgorithmConfig) -> list[str]:
    """The settings of `config` that need the vectorized MultiAgentEnvRunner."""
    wanted = {
        "offline_data(output=...)": config.output is not None,
        "restart_failed_sub_environments": config.restart_failed_sub_environments,
        "episode callbacks": Callbacks.from_config(config).any_of(EPISODE_HOOKS),
    }
    return [name for name, on in wanted.items() if on]
