"""MultiAgentCartPole and StatelessCartPole: tiny solvable envs for tests, examples and benchmarks.

MultiAgentCartPole implements `rlmod.env.multi_agent_env.MultiAgentEnv`; tests and benchmarks of
MultiAgentEnvRunners and multi-module training use it.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, cast

import gymnasium as gym
import numpy as np

from rlmod.env.multi_agent_env import ALL_AGENTS, MultiAgentDict, MultiAgentEnv

_DEFAULT_CONFIG: dict[str, Any] = {"num_agents": 2, "max_episode_steps": 500}


class MultiAgentCartPole(MultiAgentEnv):
    """MultiAgentCartPole: N independent CartPole-v1 copies, one per agent, simulated at once.

    Agent IDs are the ints `0..N-1`. Each agent balances its own pole and gets a reward of
    1.0 per step; an agent whose pole falls (or whose cart leaves the track) is terminated
    and leaves the episode, and every agent still active after `max_episode_steps` steps is
    truncated, as with CartPole-v1's time limit. The episode is over when no agent is left.

    All agents' physics run in one numpy-vectorized step with the equations, constants
    and thresholds of gymnasium's `CartPoleVectorEnv` (euler integrator), so the env stays
    fast with thousands of agents; only the output dicts are built in Python.

    Args:
        config: `{"num_agents": N, "max_episode_steps": T}`; defaults N=2, T=500.

    Example:
        >>> env = MultiAgentCartPole({"num_agents": 3})
        >>> obs, infos = env.reset(seed=0)
        >>> sorted(obs), obs[0].shape, obs[0].dtype
        ([0, 1, 2], (4,), dtype('float32'))
        >>> obs, rewards, terminateds, truncateds, infos = env.step({0: 0, 1: 1, 2: 1})
        >>> rewards
        {0: 1.0, 1: 1.0, 2: 1.0}
    """

    # The constants of gymnasium's CartPole-v1.
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        """Builds the spaces of all agents from the config."""
        super().__init__()
        cfg = _parse_config(config)
        self._n: int = cfg["num_agents"]
        self.max_episode_steps: int = cfg["max_episode_steps"]

        # Limits at twice the failure thresholds, so a failing observation is still in bounds.
        high = np.array(
            [self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf],
            dtype=np.float32,
        )
        obs_space = gym.spaces.Box(-high, high, dtype=np.float32)
        act_space = gym.spaces.Discrete(2)
        self.possible_agents = list(range(self._n))
        # One space object shared by all agents: cheap with thousands of agents.
        self.observation_spaces = dict.fromkeys(self.possible_agents, obs_space)
        self.action_spaces = dict.fromkeys(self.possible_agents, act_space)

        self._rng: np.random.Generator | None = None
        self._state: np.ndarray | None = None  # [4, N] float64: x, x_dot, theta, theta_dot
        self._active = np.zeros(self._n, dtype=np.int64)  # sorted IDs of active agents
        self._num_steps = 0  # steps of the current episode (all agents start together)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        """Starts all agents from a uniform random state in [low, high] (default ±0.05).

        Args:
            seed: Seeds the env's `np.random.default_rng` when given.
            options: Optional `{"low": float, "high": float}` bounds of the start state.

        Returns:
            The first observation of every agent and an empty infos dict.
        """
        low, high = _parse_reset_bounds(options)
        if seed is not None or self._rng is None:
            self._rng = np.random.default_rng(seed)
        self._state = self._rng.uniform(low=low, high=high, size=(4, self._n))
        self._active = np.arange(self._n)
        self._num_steps = 0
        self.agents = list(self.possible_agents)
        return dict(zip(self.agents, self._state.T.astype(np.float32, order="C"), strict=True)), {}

    def step(
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        """Pushes each active agent's cart left (action 0) or right (action 1) for one step.

        Args:
            action_dict: One action (0 or 1) for every active agent.

        Returns:
            `(obs, rewards, terminateds, truncateds, infos)` for the agents that acted;
            infos is empty.
        """
        if self._state is None:
            raise RuntimeError("MultiAgentCartPole.step() was called before reset().")
        if not self.agents:
            raise RuntimeError("MultiAgentCartPole: the episode is over; call reset() first.")
        action = self._action_array(action_dict)
        ids = self.agents

        x, x_dot, theta, theta_dot = self._state[:, self._active]
        force = np.sign(action - 0.5) * self.force_mag
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        # The equations of gymnasium's CartPoleVectorEnv, see
        # https://coneural.org/florian/papers/05_cart_pole.pdf
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        new_state = np.stack((x, x_dot, theta, theta_dot))
        self._state[:, self._active] = new_state

        terminated = (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold_radians)
            | (theta > self.theta_threshold_radians)
        )
        self._num_steps += 1
        truncated = self._num_steps >= self.max_episode_steps  # CartPole-v1's time limit

        # C order: each agent's obs is a contiguous row, which consumers stack fast.
        obs: MultiAgentDict = dict(zip(ids, new_state.T.astype(np.float32, order="C"), strict=True))
        rewards: MultiAgentDict = dict.fromkeys(ids, 1.0)
        terminateds: MultiAgentDict = dict(zip(ids, terminated.tolist(), strict=True))
        truncateds: MultiAgentDict = dict.fromkeys(ids, truncated)

        # Terminated agents leave; at the time limit everyone left leaves, truncated.
        self._active = self._active[:0] if truncated else self._active[~terminated]
        self.agents = self._active.tolist()
        done = not self.agents
        truncated_all = done and truncated and not bool(terminated.all())
        terminateds[ALL_AGENTS] = done and not truncated_all
        truncateds[ALL_AGENTS] = truncated_all
        return obs, rewards, terminateds, truncateds, {}

    def _action_array(self, action_dict: MultiAgentDict) -> np.ndarray:
        """Returns the actions as floats ordered like the active agents, or raises."""
        try:
            ids = np.fromiter(action_dict.keys(), dtype=np.int64, count=len(action_dict))
            acts = np.fromiter(action_dict.values(), dtype=np.float64, count=len(action_dict))
        except (TypeError, ValueError) as e:
            raise ValueError(
                "MultiAgentCartPole: action_dict must map int agent IDs to actions 0 or 1 "
                f"(got {_head(action_dict)}): {e}"
            ) from e
        if not np.array_equal(ids, self._active):  # not the obs' order: reorder, check IDs
            if set(ids.tolist()) != set(self.agents):
                agents = cast("list[int]", self.agents)  # this env's agent IDs are ints
                missing = sorted(set(agents) - set(ids.tolist()))[:5]
                extra = sorted(set(ids.tolist()) - set(agents))[:5]
                raise ValueError(
                    "MultiAgentCartPole: action_dict must hold exactly one action per active "
                    f"agent (env.agents). Missing agents: {missing}; agents that are not "
                    f"active (done or unknown): {extra}."
                )
            position = np.empty(self._n, dtype=np.int64)
            position[ids] = np.arange(len(ids))
            acts = acts[position[self._active]]
        bad = np.flatnonzero((acts != 0.0) & (acts != 1.0))
        if bad.size:
            aid = int(self._active[bad[0]])
            raise ValueError(
                f"MultiAgentCartPole: the action of agent {aid} is {action_dict[aid]!r}; "
                "actions must be 0 (push left) or 1 (push right), from Discrete(2)."
            )
        return acts


def _parse_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """Returns the config with defaults filled in, or raises naming the bad key."""
    if config is not None and not isinstance(config, dict):
        raise TypeError(
            f"MultiAgentCartPole config must be a dict like {{'num_agents': 2}}, got "
            f"{type(config).__name__}."
        )
    cfg = {**_DEFAULT_CONFIG, **(config or {})}
    for key in cfg:
        if key not in _DEFAULT_CONFIG:
            close = difflib.get_close_matches(key, list(_DEFAULT_CONFIG), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"MultiAgentCartPole config has unknown key {key!r}; valid keys are "
                f"{sorted(_DEFAULT_CONFIG)}.{hint}"
            )
    for key, value in cfg.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(
                f"MultiAgentCartPole config[{key!r}] must be a positive int, got {value!r}."
            )
        cfg[key] = int(value)
    return cfg


def _parse_reset_bounds(options: dict[str, Any] | None) -> tuple[float, float]:
    """Returns the (low, high) bounds of the start state from reset options."""
    options = options or {}
    unknown = set(options) - {"low", "high"}
    if unknown:
        raise ValueError(
            f"MultiAgentCartPole.reset() got unknown options {sorted(unknown)}; it accepts "
            "only 'low' and 'high' (bounds of the uniform start state)."
        )
    low, high = float(options.get("low", -0.05)), float(options.get("high", 0.05))
    if low > high:
        raise ValueError(
            f"MultiAgentCartPole.reset(): options['low'] ({low}) is above options['high'] "
            f"({high}); swap them."
        )
    return low, high


def _head(d: MultiAgentDict, limit: int = 3) -> str:
    """Returns the first few items of a dict, for error messages."""
    items = list(d.items())[:limit]
    return (
        "{" + ", ".join(f"{k!r}: {v!r}" for k, v in items) + (", ...}" if len(d) > limit else "}")
    )


class StatelessCartPole(gym.Env[np.ndarray, int]):
    """CartPole-v1 without the velocities (RLlib's `StatelessCartPole` example env; the
    `CartPoleNoVel-v1` of rl-baselines3-zoo): observations are only the cart position and
    the pole angle, so a policy must remember earlier steps to balance the pole (a
    partially observed task for recurrent modules, `use_lstm`).

    Rewards, termination and the 500-step truncation are CartPole-v1's.

    Example:
        >>> env = StatelessCartPole()
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, env.observation_space.shape
        ((2,), (2,))
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = dict(config or {})
        self._env = gym.make("CartPole-v1", **config)
        inner = cast(gym.spaces.Box, self._env.observation_space)
        self.observation_space = gym.spaces.Box(
            inner.low[[0, 2]], inner.high[[0, 2]], dtype=np.float32
        )
        self.action_space = self._env.action_space

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self._env.reset(seed=seed, options=options)
        return obs[[0, 2]], info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._env.step(action)
        return obs[[0, 2]], float(reward), terminated, truncated, info

    def close(self) -> None:
        self._env.close()
