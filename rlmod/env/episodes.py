"""Episode objects: what `policy_mapping_fn` receives as `episode` (EpisodeInfo) and what
RLlib's episode hooks receive (MultiAgentEpisode, SingleAgentEpisode).

Built by EnvRunners only when a callback overrides an episode hook (on_episode_start,
on_episode_step, on_episode_end, on_sample_end); sampling itself never needs them (it
writes flat column arrays), so runs without such callbacks pay nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

from rlmod.core.types import Array
from rlmod.env.multi_agent_env import AgentID

if TYPE_CHECKING:
    from typing import Self

Indices: TypeAlias = "int | list[int] | slice[int | None, int | None, int | None] | None"
_T = TypeVar("_T")
AgentIDs: TypeAlias = "AgentID | Collection[AgentID] | None"
"""One agent ID, several, or None for all (RLlib's `agent_ids` argument)."""
VectorInfos: TypeAlias = "Mapping[str, Array | VectorInfos]"
"""A gymnasium vector env's infos: per key an array over sub-envs (and its mask `_key`),
or a nested dict of them."""


@dataclasses.dataclass(frozen=True)
class EpisodeInfo:
    """What `policy_mapping_fn(agent_id, episode)` receives as `episode`.

    The mapping function is called once per agent per episode, when the agent first
    appears; EnvRunners cache its answer for the rest of the episode. When the config
    infers module spaces from an env's `possible_agents` (at set-up, before any episode),
    the function gets `SETUP_EPISODE`: `id_ == -1`, env 0 of worker 0. It is never
    called with `episode=None`.

    Attributes:
        id_: The env episode's ID, unique within one EnvRunner.
        env_index: Which of the EnvRunner's envs plays the episode.
        worker_index: The EnvRunner's index (0: the local one).
    """

    id_: int
    env_index: int
    worker_index: int


SETUP_EPISODE = EpisodeInfo(id_=-1, env_index=0, worker_index=0)
"""The `episode` policy_mapping_fn gets at set-up, when module spaces are inferred."""


def _pick(items: list[_T], indices: Indices) -> _T | list[_T]:
    """RLlib's index semantics: None all, an int one item (negative from the end), a
    list several, a slice a range."""
    if indices is None:
        return list(items)
    if isinstance(indices, int):
        return items[indices]
    if isinstance(indices, slice):
        return items[indices]
    return [items[i] for i in indices]


def info_of(infos: VectorInfos, i: int) -> dict[str, object]:
    """Sub-env `i`'s info dict from a gymnasium vector env's batched infos (each key `k`
    holds an array and a mask `_k` of the sub-envs that reported it)."""
    out: dict[str, object] = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = cast("Array | None", infos.get("_" + key))  # "_k" keys hold masks
        if mask is not None and not mask[i]:
            continue
        out[key] = info_of(value, i) if isinstance(value, Mapping) else value[i]
    return out


class _Episode:
    """What both episode kinds share: identity, end flags, the user's dict, timing."""

    def __init__(self, *, id_: int, env_index: int) -> None:
        self.id_ = id_
        self.env_index = env_index
        self.is_terminated = False
        self.is_truncated = False
        self._custom_data: dict[str, object] = {}
        self._start_time = time.perf_counter()
        self._end_time: float | None = None

    def _set_done(self, terminated: bool, truncated: bool) -> None:
        """The end flags after a step; the clock stops at the step that ends the episode."""
        self.is_terminated, self.is_truncated = terminated, truncated
        if (terminated or truncated) and self._end_time is None:
            self._end_time = time.perf_counter()

    def get_duration_s(self) -> float:
        """Wall-clock seconds from the reset to the step that ended it (or now)."""
        end = self._end_time if self._end_time is not None else time.perf_counter()
        return end - self._start_time

    @property
    def custom_data(self) -> dict[str, object]:
        """A dict the user fills in callbacks (RLlib's `episode.custom_data`)."""
        return self._custom_data

    def chunk(self, start: int) -> Self:
        """The part of this episode from env step `start` on, as RLlib's episode chunks
        (what `on_sample_end(samples=...)` gets for an episode that an earlier `sample()`
        call began): the same `id_` and `custom_data`, the observation and info before step
        `start` as its first ones, `len()` and `get_return()` over its own steps only."""
        if start == 0:
            return self
        part = copy.copy(self)
        for name in ("observations", "infos", "actions", "rewards"):
            setattr(part, name, getattr(self, name)[start:])
        return part

    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated


class SingleAgentEpisode(_Episode):
    """One sub-env's episode as RLlib's `SingleAgentEpisode` shows it to callbacks.

    Matches the parts of ray 2.60's `ray/rllib/env/single_agent_episode.py` that callbacks
    use: `id_`, `custom_data` (a free dict for the user), `get_observations`,
    `get_actions`, `get_rewards`, `get_infos` (RLlib's index semantics), `get_return()`,
    `len(episode)` (env steps taken), `env_steps()`, `agent_steps()`, `is_done`,
    `is_terminated`, `is_truncated`, `get_duration_s()`. Observations are the raw env
    ones (before env-to-module connectors); there is one more observation and info than
    actions and rewards (the reset one).

    Example:
        >>> ep = SingleAgentEpisode(id_=0, observation=0.0, info={})
        >>> ep.add_env_step(1.0, action=1, reward=2.0, info={"x": 1})
        >>> ep.get_return(), len(ep), ep.get_infos(-1)
        (2.0, 1, {'x': 1})
    """

    def __init__(
        self, *, id_: int, observation: object, info: dict[str, object], env_index: int = 0
    ) -> None:
        super().__init__(id_=id_, env_index=env_index)
        self.observations: list[object] = [observation]
        self.infos: list[dict[str, object]] = [info]
        self.actions: list[object] = []
        self.rewards: list[float] = []

    def add_env_step(
        self,
        observation: object,
        *,
        action: object,
        reward: float,
        info: dict[str, object],
        terminated: bool = False,
        truncated: bool = False,
    ) -> None:
        """Appends one env step (what the EnvRunner calls, as RLlib's `add_env_step`);
        `reward`, `terminated` and `truncated` as Python scalars."""
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self.infos.append(info)
        self._set_done(terminated, truncated)

    @property
    def t(self) -> int:
        return len(self.actions)

    def get_observations(self, indices: Indices = None) -> object:
        return _pick(self.observations, indices)

    def get_infos(self, indices: Indices = None) -> dict[str, object] | list[dict[str, object]]:
        return _pick(self.infos, indices)

    def get_actions(self, indices: Indices = None) -> object:
        return _pick(self.actions, indices)

    def get_rewards(self, indices: Indices = None) -> float | list[float]:
        return _pick(self.rewards, indices)

    def get_return(self) -> float:
        """The sum of this episode's rewards."""
        return float(sum(self.rewards))

    def env_steps(self) -> int:
        return len(self.actions)

    def agent_steps(self) -> int:
        return len(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def __repr__(self) -> str:
        return (
            f"SingleAgentEpisode(id_={self.id_}, len={len(self)}, "
            f"return={self.get_return():.3g}, done={self.is_done})"
        )


class MultiAgentEpisode(_Episode):
    """One env's multi-agent episode as RLlib's `MultiAgentEpisode` shows it to callbacks.

    Per env step it keeps the dicts the env returned (observations, rewards, infos by
    agent) and the actions sent; `get_observations(indices, agent_ids)` and friends
    return one dict (an int index) or a list of them, as RLlib's (ray 2.60,
    `ray/rllib/env/multi_agent_episode.py`) with `env_steps=True`. `get_return()` sums all
    agents' rewards; `len(episode)` counts env steps; `module_for(agent_id)` names the
    module the agent was mapped to; `custom_data` is the user's dict.
    """

    def __init__(
        self,
        *,
        id_: int,
        observations: dict,
        infos: dict,
        env_index: int = 0,
        agent_to_module: dict | None = None,
    ) -> None:
        super().__init__(id_=id_, env_index=env_index)
        self.observations: list[dict] = [dict(observations)]
        self.infos: list[dict] = [dict(infos)]
        self.actions: list[dict] = []
        self.rewards: list[dict] = []
        self.terminateds: dict = {}
        self.truncateds: dict = {}
        self.agent_to_module: dict = agent_to_module if agent_to_module is not None else {}

    def add_env_step(
        self,
        observations: dict,
        *,
        actions: dict,
        rewards: dict,
        infos: dict,
        terminateds: dict,
        truncateds: dict,
    ) -> None:
        self.observations.append(dict(observations))
        self.actions.append(dict(actions))
        self.rewards.append({a: float(r) for a, r in rewards.items()})
        self.infos.append(dict(infos))
        self.terminateds.update(terminateds)
        self.truncateds.update(truncateds)
        self._set_done(
            bool(terminateds.get("__all__", False)), bool(truncateds.get("__all__", False))
        )

    @property
    def agent_ids(self) -> set:
        return {a for step in self.observations for a in step}

    def module_for(self, agent_id: AgentID) -> str | None:
        return self.agent_to_module.get(agent_id)

    @staticmethod
    def _filter(items: list[dict], indices: Indices, agent_ids: AgentIDs) -> dict | list[dict]:
        if agent_ids is not None and (
            isinstance(agent_ids, str) or not isinstance(agent_ids, Collection)
        ):
            agent_ids = [agent_ids]
        keep = None if agent_ids is None else set(agent_ids)
        picked = _pick(items, indices)

        def sel(d: dict) -> dict:
            return dict(d) if keep is None else {a: v for a, v in d.items() if a in keep}

        return sel(picked) if isinstance(picked, dict) else [sel(d) for d in picked]

    def get_observations(
        self, indices: Indices = None, agent_ids: AgentIDs = None
    ) -> dict | list[dict]:
        return self._filter(self.observations, indices, agent_ids)

    def get_infos(self, indices: Indices = None, agent_ids: AgentIDs = None) -> dict | list[dict]:
        return self._filter(self.infos, indices, agent_ids)

    def get_actions(self, indices: Indices = None, agent_ids: AgentIDs = None) -> dict | list[dict]:
        return self._filter(self.actions, indices, agent_ids)

    def get_rewards(self, indices: Indices = None, agent_ids: AgentIDs = None) -> dict | list[dict]:
        return self._filter(self.rewards, indices, agent_ids)

    def get_return(self) -> float:
        return float(sum(sum(step.values()) for step in self.rewards))

    def env_steps(self) -> int:
        return len(self.actions)

    def agent_steps(self) -> int:
        return sum(len(step) for step in self.actions)

    def __len__(self) -> int:
        return len(self.actions)


def chunk_start(starts: Mapping[int, tuple[object, int]], episode: object) -> int:
    """Where `episode`'s chunk of this `sample()` call begins: its length when the call
    began (`starts`: id -> (episode, length)), or 0 for an episode begun in the call."""
    entry = starts.get(id(episode))
    return entry[1] if entry is not None and entry[0] is episode else 0
