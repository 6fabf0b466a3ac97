"""Connector and ConnectorPipeline: small data transforms that say how they map spaces.

Env-to-module pipelines run on EnvRunners before each forward pass, module-to-env
pipelines after it, learner pipelines on Learners before each update. The spaces a module
is built with are what its env-to-module pipeline outputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym


class Connector:
    """One step of a pipeline; the three families (env-to-module, module-to-env, learner)
    each define their own `__call__`.

    `set_input_spaces` is called once by the pipeline; afterwards `observation_space` and
    `action_space` are this connector's output spaces.
    """

    input_observation_space: gym.Space | None = None
    input_action_space: gym.Space | None = None
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    rllib_style = False
    """True for ConnectorV2 pieces, which the pipeline calls through `call_on_arrays`."""

    def set_input_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.input_observation_space = observation_space
        self.input_action_space = action_space
        self.observation_space = self.recompute_output_observation_space(
            observation_space, action_space
        )
        self.action_space = self.recompute_output_action_space(observation_space, action_space)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        """The observation space this connector outputs (default: unchanged)."""
        return input_observation_space

    def recompute_output_action_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        """The action space this connector outputs (default: unchanged)."""
        return input_action_space

    def get_state(self) -> dict[str, Any]:
        """Plain arrays and JSON-able values that `set_state` restores (default: none)."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what `get_state` returned."""


class ConnectorPipeline(Connector):
    """Runs connectors in order; each one's output spaces are the next one's input spaces."""

    def __init__(
        self,
        connectors: Iterable[Connector] = (),
        *,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
    ) -> None:
        self.connectors = list(connectors)
        for c in self.connectors:
            if not isinstance(c, Connector):
                raise TypeError(
                    f"Connector pipelines take rlmod Connector instances, got {c!r}; a "
                    "connector setting takes a callable that returns Connector(s)."
                )
        if input_observation_space is not None and input_action_space is not None:
            self.set_input_spaces(input_observation_space, input_action_space)

    def set_input_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.input_observation_space = observation_space
        self.input_action_space = action_space
        for c in self.connectors:
            c.set_input_spaces(observation_space, action_space)
            assert c.observation_space is not None and c.action_space is not None
            observation_space, action_space = c.observation_space, c.action_space
        self.observation_space, self.action_space = observation_space, action_space

    def __call__(self, data: Any, **kwargs: Any) -> Any:
        for c in self.connectors:
            piece: Any = c  # RLlib-style pieces (ConnectorV2) run through their array adapter
            data = (
                piece.call_on_arrays(data, **kwargs) if piece.rllib_style else piece(data, **kwargs)
            )
        return data

    def get_state(self) -> dict[str, Any]:
        return {
            f"{i}:{type(c).__name__}": s
            for i, c in enumerate(self.connectors)
            if (s := c.get_state())
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores each connector's state; a state for a connector this pipeline does not
        have is a ValueError (dropping it would, e.g., act on unnormalized observations)."""
        keys = [f"{i}:{type(c).__name__}" for i, c in enumerate(self.connectors)]
        unknown = [k for k in state if k not in keys]
        if unknown:
            raise ValueError(
                f"Connector state for {unknown} does not fit this pipeline, whose stateful "
                f"pieces would be named {keys}; build it with the connectors the state was "
                "saved with (env_to_module_connector, or learner_connector for a Learner's)."
            )
        for i, c in enumerate(self.connectors):
            key = f"{i}:{type(c).__name__}"
            if key in state:
                c.set_state(state[key])

    def __len__(self) -> int:
        return len(self.connectors)

    def __repr__(self) -> str:
        return f"ConnectorPipeline([{', '.join(type(c).__name__ for c in self.connectors)}])"


def as_connector_list(made: Any, *, setting: str) -> list[Connector]:
    """Normalizes what a user's connector factory returned into a list of Connectors."""
    if made is None:
        return []
    items = list(made) if isinstance(made, list | tuple) else [made]
    for c in items:
        if not isinstance(c, Connector):
            raise TypeError(
                f"{setting} must return a Connector or a list of them, got {c!r} "
                f"({type(c).__name__})."
            )
    return items
