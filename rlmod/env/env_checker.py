"""The env checker: compares what an env emits with the spaces it declares, before training.

It uses `MultiAgentEnv` (and gymnasium's own checker for single-agent envs); users and
tests call it on their envs.
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import SupportsFloat, cast

import gymnasium as gym
import numpy as np

from rlmod.env.guards import bad_observation
from rlmod.env.multi_agent_env import ALL_AGENTS, AgentID, MultiAgentEnv, _preview

_INFO_KEYS_EXTRA = ("__common__",)  # infos may also carry data not tied to one agent


def check_multi_agent_env(env: MultiAgentEnv, *, num_steps: int = 100, seed: int = 0) -> None:
    """Resets and steps a MultiAgentEnv with random actions, checking every output.

    The checks: the spaces exist for every possible agent; obs, rewards, terminateds,
    truncateds and infos are dicts keyed by agents of `possible_agents`; each observation
    is in its agent's declared observation space; rewards are finite numbers; the flags
    are bools, and terminateds/truncateds hold `"__all__"`; an agent that terminated does
    not come back in the same episode. Actions are sampled from the declared action
    spaces (copies of them, so the env's own spaces keep their random state).

    Args:
        env: The env to check. It is reset (first with `seed`) and stepped, not closed.
        num_steps: How many steps to take in all, resetting when an episode ends.
        seed: The seed of the first reset and of the action sampling.

    Raises:
        TypeError: If `env` is not a MultiAgentEnv, or it returns the wrong kind of thing
            (obs not a dict, a reward that is not a number, a flag that is not a bool, a
            space that is not a gymnasium Space).
        ValueError: If a value disagrees with the declaration: an obs outside its space
            (the message gives its shape and dtype against the space's), an unknown agent,
            a missing `"__all__"`, a reward that is not finite. Each message names the
            agent, the dict and the key, and says how to fix it.

    Example:
        >>> from rlmod.testing import MultiAgentCartPole
        >>> check_multi_agent_env(MultiAgentCartPole({"num_agents": 3}), num_steps=20)
    """
    if not isinstance(env, MultiAgentEnv):
        raise TypeError(
            f"check_multi_agent_env needs a rlmod MultiAgentEnv, got {type(env).__name__}. "
            "Wrap a PettingZoo ParallelEnv with rlmod.env.pettingzoo_env.ParallelPettingZooEnv; "
            "check a single-agent gymnasium env with rlmod.env.env_checker.check_env."
        )
    name = type(env).__name__
    possible = _check_possible_agents(env, name)
    samplers = _action_samplers(env, possible, seed)

    obs, infos = _check_reset(env, name, possible, seed=seed)
    done_agents: set[AgentID] = set()
    for t in range(num_steps):
        acting = [aid for aid in obs if aid not in done_agents]
        actions = {aid: samplers[aid].sample() for aid in acting}
        result = env.step(actions)
        where = f"{name}.step() (step {t} of the check)"
        if not isinstance(result, tuple) or len(result) != 5:
            raise TypeError(
                f"{where} must return a tuple (obs, rewards, terminateds, truncateds, infos), "
                f"got {_describe(result)}."
            )
        obs, rewards, terminateds, truncateds, infos = result
        _check_dict_of_agents(obs, "obs", where, possible)
        _check_dict_of_agents(rewards, "rewards", where, possible)
        for flags_name, flags in (("terminateds", terminateds), ("truncateds", truncateds)):
            _check_dict_of_agents(flags, flags_name, where, possible, extra_keys=(ALL_AGENTS,))
            _check_flags(flags, flags_name, where)
        _check_dict_of_agents(infos, "infos", where, possible, extra_keys=_INFO_KEYS_EXTRA)
        for aid in obs:
            if aid in done_agents:
                raise ValueError(
                    f"{where} returned obs[{aid!r}], but agent {aid!r} was terminated or "
                    "truncated earlier in this episode, and such an agent has left it. Stop "
                    "emitting its obs, or set its flag only when the agent is really gone."
                )
            _check_obs(env, aid, obs[aid], where)
        for aid, reward in rewards.items():
            _check_reward(aid, reward, where)
        done_agents |= {a for a in possible if terminateds.get(a) or truncateds.get(a)}
        if terminateds[ALL_AGENTS] or truncateds[ALL_AGENTS]:
            obs, infos = _check_reset(env, name, possible, seed=None)
            done_agents = set()


def check_env(env: object, *, skip_render_check: bool = True) -> None:
    """Checks an env: gymnasium's checker for a single-agent env, else `check_multi_agent_env`.

    Args:
        env: A `gymnasium.Env` or a rlmod `MultiAgentEnv`.
        skip_render_check: Passed to gymnasium's checker; rendering is skipped by default.

    Raises:
        ValueError: If the env breaks the gymnasium API (gymnasium's message is kept).
        TypeError: If `env` is neither kind of env.
    """
    if isinstance(env, MultiAgentEnv):
        check_multi_agent_env(env)
        return
    if not isinstance(env, gym.Env):
        raise TypeError(
            f"check_env needs a gymnasium.Env or a rlmod MultiAgentEnv, got {type(env).__name__}."
        )
    from gymnasium.utils.env_checker import check_env as gym_check_env

    try:
        gym_check_env(env.unwrapped, skip_render_check=skip_render_check)
    except AssertionError as e:
        raise ValueError(
            f"{type(env.unwrapped).__name__} breaks the gymnasium Env API: {e} "
            "See https://gymnasium.farama.org/api/env/ for what reset() and step() must return."
        ) from e


def _check_possible_agents(env: MultiAgentEnv, name: str) -> list[AgentID]:
    possible = list(env.possible_agents)
    if not possible:
        raise ValueError(
            f"{name}.possible_agents is empty; set it in __init__ to the list of all agent IDs "
            "that can ever take part."
        )
    for aid in possible:
        for kind, get in (
            ("observation", env.get_observation_space),
            ("action", env.get_action_space),
        ):
            space = get(aid)  # raises a KeyError naming the agent if missing
            if not isinstance(space, gym.Space):
                raise TypeError(
                    f"{name}.{kind}_spaces[{aid!r}] is {_describe(space)}, not a gymnasium "
                    f"Space; set it to e.g. gymnasium.spaces.Box(...) or Discrete(n)."
                )
    return possible


def _action_samplers(
    env: MultiAgentEnv, possible: list[AgentID], seed: int
) -> dict[AgentID, gym.Space]:
    """Returns seeded copies of the action spaces (shared spaces are copied once)."""
    copies: dict[int, gym.Space] = {}
    samplers = {}
    for aid in possible:
        space = env.get_action_space(aid)
        if id(space) not in copies:
            copies[id(space)] = copy.deepcopy(space)
            copies[id(space)].seed(seed + len(copies))
        samplers[aid] = copies[id(space)]
    return samplers


def _check_reset(
    env: MultiAgentEnv, name: str, possible: list[AgentID], *, seed: int | None
) -> tuple[dict, dict]:
    result = env.reset(seed=seed)
    where = f"{name}.reset()"
    if not isinstance(result, tuple) or len(result) != 2:
        raise TypeError(f"{where} must return a tuple (obs, infos), got {_describe(result)}.")
    obs, infos = result
    _check_dict_of_agents(obs, "obs", where, possible)
    _check_dict_of_agents(infos, "infos", where, possible, extra_keys=_INFO_KEYS_EXTRA)
    for aid, value in obs.items():
        _check_obs(env, aid, value, where)
    return obs, infos


def _check_dict_of_agents(
    d: object, dict_name: str, where: str, possible: list[AgentID], extra_keys: tuple = ()
) -> None:
    """Checks `d` is a dict whose keys are possible agents (or `extra_keys`)."""
    if not isinstance(d, dict):
        raise TypeError(
            f"{where} returned {dict_name} as {_describe(d)}; it must be a dict keyed by "
            "agent ID, e.g. {agent_id: value}."
        )
    if ALL_AGENTS in extra_keys and ALL_AGENTS not in d:
        raise ValueError(
            f"{where} returned {dict_name} without the key '__all__'. Add "
            f"{dict_name}['__all__'] = True when the whole episode is over (False otherwise)."
        )
    allowed = set(possible)
    for key in d:
        if key not in allowed and key not in extra_keys:
            raise ValueError(
                f"{where} returned {dict_name}[{key!r}] for unknown agent {key!r}: it is not in "
                f"possible_agents {_preview(possible)}. Add it to possible_agents (and give it "
                "spaces) or fix the key."
            )


def _check_flags(flags: dict, dict_name: str, where: str) -> None:
    for key, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(
                f"{where} returned {dict_name}[{key!r}] = {_describe(value)}; it must be a bool. "
                "Convert it with bool(...)."
            )


def _check_reward(aid: AgentID, reward: object, where: str) -> None:
    is_number = isinstance(reward, numbers.Real) and not isinstance(reward, (bool, np.bool_))
    if isinstance(reward, np.ndarray) and reward.shape == () and reward.dtype.kind in "iuf":
        is_number = True
    if not is_number:
        raise TypeError(
            f"{where} returned rewards[{aid!r}] = {_describe(reward)}, but a reward must be a "
            "number (int or float). Return float(reward) for each agent."
        )
    if not math.isfinite(float(cast(SupportsFloat, reward))):  # a number, checked above
        raise ValueError(
            f"{where} returned rewards[{aid!r}] = {reward!r}; rewards must be finite. Look for "
            "a division by zero or an overflow in the reward computation."
        )


def _check_obs(env: MultiAgentEnv, aid: AgentID, value: object, where: str) -> None:
    space = env.get_observation_space(aid)
    if space.contains(value):
        # Stricter than space.contains(), which casts lists and other dtypes: EnvRunners stack
        # observations as they come, so a list or a float64 array breaks training later.
        problem = bad_observation(space, value)
        if problem is not None:
            raise ValueError(
                f"{where} returned obs[{aid!r}], which {problem} (agent {aid!r}'s observation "
                f"space is {space}). Return a numpy array of the "
                "declared shape and dtype, e.g. np.asarray(obs, dtype=space.dtype)."
            )
        return
    raise ValueError(
        f"{where} returned obs[{aid!r}] = {_describe(value)}, which is not in the observation "
        f"space of agent {aid!r}, {space}: {_mismatch(value, space)}. Fix the env's observations "
        f"or declare the space they really have in observation_spaces[{aid!r}]."
    )


def _mismatch(value: object, space: gym.Space) -> str:
    """Says how `value` disagrees with `space` (shape, dtype, bounds), as far as known."""
    if isinstance(space, gym.spaces.Box):
        arr = (
            np.asarray(value) if isinstance(value, (np.ndarray, list, tuple, np.generic)) else None
        )
        if arr is None:
            return f"expected a numpy array of shape {space.shape} and dtype {space.dtype}"
        if arr.shape != space.shape:
            return (
                f"shape {arr.shape} != declared shape {space.shape}; reshape the obs or fix "
                "the space's shape"
            )
        if not np.can_cast(arr.dtype, space.dtype):
            return (
                f"dtype {arr.dtype} != declared dtype {space.dtype}; cast the obs with "
                f".astype(np.{space.dtype})"
            )
        if np.isnan(arr).any():
            return "it contains NaN"
        outside = (arr < space.low) | (arr > space.high)
        if not outside.any():
            return "Box.contains() is False for it"
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        return (
            f"values outside [low, high], e.g. at index {index}: {arr[index].item()} not in "
            f"[{space.low[index].item()}, {space.high[index].item()}]"
        )
    if isinstance(space, gym.spaces.Discrete):
        last = space.start + space.n - 1
        return f"expected an int in [{space.start}, {last}] (a Python int or numpy integer)"
    return f"{type(space).__name__}.contains() is False for it"


def _describe(value: object) -> str:
    """Returns a short description of a value: its type, shape and dtype where it has them."""
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, np.generic):
        return f"numpy {value.dtype} scalar {value!r}"
    if isinstance(value, (bool, int, float, str)) or value is None:
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} of length {len(value)}"
    return type(value).__name__
