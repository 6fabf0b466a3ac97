"""TwoTeamGuessingEnv: a tiny PettingZoo ParallelEnv with two teams, for multi-module tests.

It subclasses `pettingzoo.ParallelEnv` (this module needs pettingzoo); tests and examples
wrap it with `rlmod.env.pettingzoo_env.ParallelPettingZooEnv`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

try:
    from pettingzoo import ParallelEnv
except ImportError as e:
    raise ImportError(
        "rlmod.testing.pettingzoo_envs needs pettingzoo, which is not installed. Run: "
        "pip install 'rlmod[pettingzoo]'"
    ) from e

TEAM_SIZES = {"red": 3, "blue": 5}
"""Number of choices (= observation size = number of actions) of each team's agents."""


class TwoTeamGuessingEnv(ParallelEnv):
    """TwoTeamGuessingEnv: four agents in two teams each guess a target they are shown.

    Agents "red_0", "red_1" see a one-hot target among 3 choices (Box(0, 1, (3,))) and act
    in Discrete(3); "blue_0", "blue_1" see one among 5 (Box(0, 1, (5,))) and act in
    Discrete(5), so the two teams need different modules. Every step each agent gets a new
    random target; it earns 1.0 for choosing it, plus 0.5 when its teammate also chose
    right (a cooperative bonus). Random play earns about 0.39 (red) and 0.22 (blue) per
    step, perfect play 1.5; a PPO policy learns it in a few thousand steps. All agents are
    truncated after `max_cycles` steps; no one terminates.

    Args:
        max_cycles: Episode length in steps.

    Example:
        >>> env = TwoTeamGuessingEnv()
        >>> obs, infos = env.reset(seed=0)
        >>> {aid: o.shape for aid, o in obs.items()}
        {'red_0': (3,), 'red_1': (3,), 'blue_0': (5,), 'blue_1': (5,)}
        >>> obs, rewards, terminations, truncations, infos = env.step(
        ...     {aid: int(o.argmax()) for aid, o in obs.items()}
        ... )
        >>> rewards
        {'red_0': 1.5, 'red_1': 1.5, 'blue_0': 1.5, 'blue_1': 1.5}
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "two_team_guessing_v0", "render_modes": []}

    def __init__(self, max_cycles: int = 25) -> None:
        """Builds the agents and their spaces."""
        if isinstance(max_cycles, bool) or not isinstance(max_cycles, int) or max_cycles < 1:
            raise ValueError(f"max_cycles must be a positive int, got {max_cycles!r}.")
        self.max_cycles = max_cycles
        self.render_mode = None
        self.possible_agents = [f"{team}_{i}" for team in TEAM_SIZES for i in range(2)]
        self.agents: list[str] = []
        self.observation_spaces = {
            a: gym.spaces.Box(0.0, 1.0, (self._size(a),), np.float32) for a in self.possible_agents
        }
        self.action_spaces = {a: gym.spaces.Discrete(self._size(a)) for a in self.possible_agents}
        self._rng = np.random.default_rng()
        self._targets: dict[str, int] = {}
        self._num_steps = 0

    def observation_space(self, agent: str) -> gym.Space:
        """Returns the observation space of one agent."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        """Returns the action space of one agent."""
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Starts an episode with all four agents and draws their first targets."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._num_steps = 0
        return self._observe(), {a: {} for a in self.agents}

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict, dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]:
        """Rewards each agent's guess of its current target, then draws new targets."""
        if set(actions) != set(self.agents):
            raise ValueError(
                f"TwoTeamGuessingEnv.step() needs one action per agent in env.agents "
                f"{self.agents}, got actions for {sorted(actions)}. Call reset() after the "
                "episode ends."
            )
        correct = {a: int(actions[a]) == self._targets[a] for a in self.agents}
        rewards = {}
        for a in self.agents:
            teammate = f"{a[:-1]}{1 - int(a[-1])}"
            rewards[a] = float(correct[a]) + (0.5 if correct[a] and correct[teammate] else 0.0)
        self._num_steps += 1
        truncated = self._num_steps >= self.max_cycles
        obs = self._observe()
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict] = {a: {} for a in self.agents}
        if truncated:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def _observe(self) -> dict[str, np.ndarray]:
        """Draws a new target per agent and returns the one-hot observations."""
        obs = {}
        for a in self.agents:
            size = self._size(a)
            self._targets[a] = int(self._rng.integers(size))
            obs[a] = np.eye(size, dtype=np.float32)[self._targets[a]]
        return obs

    @staticmethod
    def _size(agent: str) -> int:
        return TEAM_SIZES[agent.rsplit("_", 1)[0]]
