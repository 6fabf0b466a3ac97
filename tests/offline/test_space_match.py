"""Which spaces an offline module is built from (rlmod.offline.space_match): the configured
ones win, recorded ones fill what is unset, and where both exist `space_mismatch` says in
words why they disagree (kind, shape, size, an action Box's bounds) while an observation
Box may differ in bounds and dtype; batched spaces recorded before issue 30's fix are
recognized (with a warning) and nothing else is mistaken for them.

How OfflineData reads spaces.json and uses these rules end to end is tested in
tests/offline/test_data_checks.py and tests/offline/test_reader.py.
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

from rlmod.errors import OfflineDataError
from rlmod.offline.space_match import choose_spaces, space_mismatch

Box, Discrete = gym.spaces.Box, gym.spaces.Discrete
OBS = Box(-1.0, 1.0, (4,), np.float32)
ACT = Discrete(2)
WHERE = "data/spaces.json"


@pytest.mark.parametrize(
    ("given", "recorded", "action", "problem"),
    [
        (ACT, Box(0, 1, (1,)), True, "it is a Discrete, the recorded one a Box"),
        (Box(0, 1, (3,)), Box(0, 1, (4,)), False, r"its shape is (3,), the recorded one's (4,)"),
        (Box(-2, 2, (2,)), Box(-1, 1, (2,)), True, "its bounds differ"),
        (Discrete(3), Discrete(2), True, "its size differs"),
        (Discrete(2, start=1), Discrete(2), True, "its size differs"),
        (gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiDiscrete([2, 4]), True, "size"),
        (gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiDiscrete([2, 3, 4]), True, "size"),
        (gym.spaces.MultiBinary(3), gym.spaces.MultiBinary(4), True, "size"),
        (
            gym.spaces.Dict({"a": Discrete(2)}),
            gym.spaces.Dict({"a": Discrete(3)}),
            False,
            "size",
        ),
    ],
)
def test_space_mismatch_says_why(given, recorded, action, problem):
    got = space_mismatch(given, recorded, action=action)
    assert got is not None and problem in got


@pytest.mark.parametrize(
    ("given", "recorded", "action"),
    [
        (Box(-np.inf, np.inf, (4,), np.float64), OBS, False),  # observations: only the shape
        (Box(-1, 1, (2,), np.float64), Box(-1, 1, (2,), np.float32), True),  # same bounds
        (Discrete(2, seed=3), Discrete(2), True),
        (gym.spaces.MultiDiscrete([2, 3], dtype=np.int32), gym.spaces.MultiDiscrete([2, 3]), True),
        (gym.spaces.Tuple([ACT, OBS]), gym.spaces.Tuple([ACT, OBS]), False),
    ],
)
def test_space_mismatch_accepts_what_the_module_cannot_tell_apart(given, recorded, action):
    assert space_mismatch(given, recorded, action=action) is None


def test_configured_spaces_win_and_recorded_ones_fill_the_rest():
    wide = Box(-np.inf, np.inf, (4,), np.float32)
    spaces, origin = choose_spaces((wide, ACT), (OBS, ACT), WHERE, "BC")
    assert spaces == (wide, ACT) and origin == "config.environment(...)"
    spaces, origin = choose_spaces((None, ACT), (OBS, ACT), WHERE, "BC")
    assert spaces[0] is OBS and origin == f"config.environment(...) and {WHERE}"
    spaces, origin = choose_spaces((None, None), (OBS, ACT), WHERE, "BC")
    assert spaces == (OBS, ACT) and origin == WHERE
    spaces, origin = choose_spaces((OBS, ACT), None, WHERE, "BC")
    assert spaces == (OBS, ACT) and origin == "config.environment(...)"


def test_a_missing_space_names_what_to_set():
    with pytest.raises(
        OfflineDataError,
        match=r"MARWIL has no observation_space .* config.environment\(observation_space=\.\.\., "
        r"action_space=\.\.\.\) and the data has no data/spaces.json",
    ):
        choose_spaces((None, None), None, WHERE, "MARWIL")
    with pytest.raises(
        OfflineDataError,
        match=r"BC has no action_space .*config.environment\(action_space=\.\.\.\)",
    ):
        choose_spaces((OBS, None), None, WHERE, "BC")


def test_a_disagreement_names_the_setting_the_recorded_space_and_the_reason():
    with pytest.raises(
        OfflineDataError,
        match=r"config.environment\(action_space=Discrete\(3\)\) does not fit the recorded "
        r"action_space Discrete\(2\) in data/spaces.json: its size differs",
    ):
        choose_spaces((OBS, Discrete(3)), (OBS, ACT), WHERE, "BC")


def test_batched_recordings_are_read_with_the_configured_spaces(caplog):
    batched = (
        Box(-1.0, 1.0, (8, 4), np.float32),
        gym.spaces.MultiDiscrete([2] * 8),
    )
    with caplog.at_level(logging.WARNING, logger="rlmod.offline.space_match"):
        spaces, origin = choose_spaces((OBS, ACT), batched, WHERE, "BC")
    assert spaces == (OBS, ACT) and origin == "config.environment(...)"
    assert "batched spaces" in caplog.text

    box_act = Box(-1.0, 1.0, (2,), np.float32)
    batched_box = (Box(-1.0, 1.0, (3, 4), np.float32), Box(-1.0, 1.0, (3, 2), np.float32))
    assert choose_spaces((OBS, box_act), batched_box, WHERE, "BC")[0] == (OBS, box_act)


@pytest.mark.parametrize(
    "recorded_act",
    [gym.spaces.MultiDiscrete([2] * 7), gym.spaces.MultiDiscrete([3] * 8), Discrete(2)],
)
def test_only_the_exact_batched_form_is_taken_for_one(recorded_act):
    """An N that differs between the spaces, another size, or an unbatched action: the
    usual rule applies and the disagreement is an error."""
    recorded = (Box(-1.0, 1.0, (8, 4), np.float32), recorded_act)
    with pytest.raises(OfflineDataError, match="does not fit the recorded"):
        choose_spaces((OBS, ACT), recorded, WHERE, "BC")
