"""Tests of Connector and ConnectorPipeline (rlmod/connectors/pipeline.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.connectors.pipeline import Connector, ConnectorPipeline, as_connector_list

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


class Doubler(Connector):
    """Doubles observations and the width of the observation space; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        (n,) = input_observation_space.shape
        return gym.spaces.Box(-2.0, 2.0, (2 * n,), np.float32)

    def __call__(self, data, **kwargs):
        self.calls += 1
        return np.concatenate([data, data], axis=-1)

    def get_state(self):
        return {"calls": self.calls}

    def set_state(self, state):
        self.calls = state["calls"]


def test_each_connector_sees_the_previous_ones_output_spaces():
    first, second = Doubler(), Doubler()
    pipe = ConnectorPipeline([first, second], input_observation_space=BOX, input_action_space=ACT)
    assert first.input_observation_space == BOX
    assert second.input_observation_space.shape == (6,)
    assert pipe.observation_space.shape == (12,) and pipe.action_space == ACT
    assert pipe(np.ones((5, 3), np.float32)).shape == (5, 12)


def test_empty_pipeline_passes_data_and_spaces_through():
    pipe = ConnectorPipeline(input_observation_space=BOX, input_action_space=ACT)
    x = np.zeros((2, 3), np.float32)
    assert len(pipe) == 0 and pipe(x) is x
    assert pipe.observation_space == BOX


def test_state_round_trips_by_position_and_class():
    pipe = ConnectorPipeline(
        [Doubler(), Doubler()], input_observation_space=BOX, input_action_space=ACT
    )
    pipe(np.ones((1, 3), np.float32))
    state = pipe.get_state()
    assert state == {"0:Doubler": {"calls": 1}, "1:Doubler": {"calls": 1}}
    other = ConnectorPipeline([Doubler(), Doubler()])
    other.set_state(state)
    assert [c.calls for c in other.connectors] == [1, 1]


def test_a_non_connector_is_refused_with_what_it_was():
    with pytest.raises(TypeError, match="Connector pipelines take rlmod Connector instances"):
        ConnectorPipeline([lambda x: x])
    with pytest.raises(TypeError, match="my_setting must return a Connector or a list of them"):
        as_connector_list([Doubler(), 3], setting="my_setting")
    assert as_connector_list(None, setting="s") == []
