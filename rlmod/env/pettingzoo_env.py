"""ParallelPettingZooEnv: the adapter that lets any PettingZoo `ParallelEnv` act as a MultiAgentEnv.

It uses pettingzoo (imported lazily, an optional extra); MultiAgentEnvRunners use it.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING

from rlmod.env.multi_agent_env import ALL_AGENTS, MultiAgentDict, MultiAgentEnv

if TYPE_CHECKING:
    from pettingzoo import ParallelEnv

_INSTALL_HINT = "pip install 'rlmod[pettingzoo]'"


class ParallelPettingZooEnv(MultiAgentEnv):
    """ParallelPettingZooEnv: a MultiAgentEnv that wraps a PettingZoo `ParallelEnv`.

    Observations, rewards, flags and infos pass through unchanged; the adapter adds the
    `"__all__"` key to terminateds and truncateds. The episode is over when the wrapped
    env has no agents left or every agent that stepped is terminated or truncated; then
    `truncateds["__all__"]` is True if one of them was truncated (and not terminated),
    else `terminateds["__all__"]` is.

    Args:
        env: The PettingZoo parallel env. For an AEC env, convert it first with
            `pettingzoo.utils.conversions.aec_to_parallel`.

    Example:
        >>> from rlmod.testing.pettingzoo_envs import TwoTeamGuessingEnv
        >>> env = ParallelPettingZooEnv(TwoTeamGuessingEnv())
        >>> env.possible_agents
        ['red_0', 'red_1', 'blue_0', 'blue_1']
        >>> obs, infos = env.reset(seed=0)
        >>> actions = {aid: env.get_action_space(aid).sample() for aid in obs}
        >>> obs, rewards, terminateds, truncateds, infos = env.step(actions)
        >>> terminateds["__all__"], truncateds["__all__"]
        (False, False)
    """

    def __init__(self, env: ParallelEnv) -> None:
        """Reads the agents and their spaces from the wrapped env."""
        super().__init__()
        pettingzoo = _import_pettingzoo()
        if isinstance(env, pettingzoo.AECEnv):
            raise TypeError(
                f"ParallelPettingZooEnv got an AEC env ({env}); it wraps parallel envs. Convert "
                "it with pettingzoo.utils.conversions.aec_to_parallel(env) first."
            )
        missing = [
            name
            for name in ("possible_agents", "observation_space", "action_space", "reset", "step")
            if not hasattr(env, name)
        ]
        if missing:
            raise TypeError(
                f"ParallelPettingZooEnv needs a pettingzoo.ParallelEnv, but {type(env).__name__} "
                f"lacks {missing}. Pass a ParallelEnv (e.g. `my_env_v0.parallel_env()`)."
            )
        self.par_env = env
        self.possible_agents = list(env.possible_agents)
        self.observation_spaces = {a: env.observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in self.possible_agents}

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        """Resets the wrapped env; see `MultiAgentEnv.reset`."""
        obs, infos = self.par_env.reset(seed=seed, options=options)
        self.agents = list(self.par_env.agents)
        return obs, infos

    def step(
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        """Steps the wrapped env and adds `"__all__"`; see `MultiAgentEnv.step`."""
        obs, rewards, terminateds, truncateds, infos = self.par_env.step(action_dict)
        self.agents = list(self.par_env.agents)
        terminateds, truncateds = dict(terminateds), dict(truncateds)
        stepped = terminateds.keys() | truncateds.keys()
        done = not self.agents or (
            bool(stepped)
            and all(terminateds.get(a, False) or truncateds.get(a, False) for a in stepped)
        )
        # Truncation (a time limit) ends the episode unless the last agents also terminated.
        truncated_all = done and any(
            truncateds.get(a, False) and not terminateds.get(a, False) for a in stepped
        )
        terminateds[ALL_AGENTS] = done and not truncated_all
        truncateds[ALL_AGENTS] = truncated_all
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> object:
        """Renders the wrapped env in the render mode it was made with."""
        return self.par_env.render()

    def close(self) -> None:
        """Closes the wrapped env."""
        self.par_env.close()


def _import_pettingzoo() -> types.ModuleType:
    """Imports pettingzoo, or raises an ImportError that says how to install it."""
    try:
        import pettingzoo
    except ImportError as e:
        raise ImportError(
            f"ParallelPettingZooEnv needs pettingzoo, which is not installed. Run: {_INSTALL_HINT}"
        ) from e
    return pettingzoo
