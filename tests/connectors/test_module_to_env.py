"""Module-to-env connectors (rlmod.connectors.module_to_env) by hand: the module's flat
actions mapped into each kind of env space (starts, Box unsquash where both bounds are
finite, clipping at a single finite bound, integer Boxes, nested parts in their spaces'
order), NaN refused before it reaches an env, GetActions' sampling vs mode, which spaces
need the mapping at all, log-probs added after sampling, and `actions_from_env`'s
inverse and refusal.

The connectors inside EnvRunners (actions that reach real envs, Box actions in bounds)
are tested in tests/connectors/test_actions_in_space.py and tests/connectors/test_pipeline.py;
the inverse over offline data in tests/offline/test_reader.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule
from rlmod.connectors.module_to_env import (
    ENV_ACTIONS,
    ActionsToEnvSpace,
    GetActions,
    actions_from_env,
    add_action_logp,
    default_module_to_env,
)
from rlmod.core.columns import Columns
from rlmod.errors import NonFiniteActionError

Box, Discrete = gym.spaces.Box, gym.spaces.Discrete
OBS = Box(-1.0, 1.0, (2,), np.float32)


def _to_env(space: gym.Space, flat: np.ndarray) -> object:
    connector = ActionsToEnvSpace()
    connector.recompute_output_observation_space(OBS, space)
    return connector({ENV_ACTIONS: flat}, rl_module=None, explore=True)[ENV_ACTIONS]


def test_discrete_kinds_are_shifted_by_their_start_and_shaped():
    out = _to_env(Discrete(3, start=5), np.array([0, 2]))
    assert out.tolist() == [5, 7] and out.dtype == np.int64
    md = gym.spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[1, 0], [0, -2]])
    out = _to_env(md, np.array([[1, 2, 3, 0]]))
    assert out.tolist() == [[[2, 2], [3, -2]]]
    bits = _to_env(gym.spaces.MultiBinary([2, 2]), np.array([[1.0, 0.0, 0.0, 1.0]]))
    assert bits.dtype == np.int8 and bits.tolist() == [[[1, 0], [0, 1]]]


def test_box_actions_are_unsquashed_where_both_bounds_are_finite_and_clipped():
    space = Box(
        np.array([-2.0, 0.0, -np.inf], np.float32), np.array([6.0, np.inf, np.inf], np.float32)
    )
    flat = np.array([[-1.0, -3.0, -7.0], [0.0, 5.0, 1e9], [3.0, 0.5, 0.0]], np.float32)
    out = _to_env(space, flat)
    # dim 0: [-1, 1] -> [-2, 6] (clipped to [-1, 1] first); dim 1: only clipped at 0
    assert out.tolist() == [[-2.0, 0.0, -7.0], [2.0, 5.0, 1e9], [6.0, 0.5, 0.0]]
    assert out.dtype == np.float32


def test_an_integer_box_is_mapped_in_float64_then_rounded_to_its_dtype():
    space = Box(0, 10, (2,), np.int64)
    out = _to_env(space, np.array([[-1.0, 1.0], [0.0, 0.38], [-0.98, 0.98]], np.float32))
    # 6.9 -> 7 and 9.9 -> 10 (a cast would truncate them to 6 and 9), 0.1 -> 0
    assert out.dtype == np.int64 and out.tolist() == [[0, 10], [5, 7], [0, 10]]


def test_non_finite_box_actions_never_reach_the_env():
    with pytest.raises(NonFiniteActionError, match="Box actions hold NaN or inf; no action"):
        _to_env(Box(-1.0, 1.0, (2,), np.float32), np.array([[0.0, np.nan]], np.float32))


def test_nested_spaces_split_the_flat_row_in_their_own_order():
    space = gym.spaces.Dict({"z": Discrete(2, start=1), "a": Box(-1.0, 1.0, (2,), np.float32)})
    assert list(space.spaces) == ["a", "z"]  # gymnasium sorts the keys: "a" is first
    out = _to_env(space, np.array([[0.5, -0.5, 1.0]], np.float32))
    assert list(out) == ["a", "z"]
    assert out["a"].tolist() == [[0.5, -0.5]] and out["z"].tolist() == [2]
    pair = _to_env(
        gym.spaces.Tuple([Discrete(3), gym.spaces.MultiBinary(2)]), np.array([[2, 1, 0]])
    )
    assert isinstance(pair, tuple) and pair[0].tolist() == [2] and pair[1].tolist() == [[1, 0]]


def test_an_unsupported_action_space_is_refused_by_name():
    with pytest.raises(
        TypeError, match=r"Action space Text.* is not supported by ActionsToEnvSpace"
    ):
        ActionsToEnvSpace().recompute_output_observation_space(OBS, gym.spaces.Text(3))


def test_only_a_discrete_space_from_0_needs_no_mapping():
    assert [type(c) for c in default_module_to_env(Discrete(3))] == [GetActions]
    for space in (Discrete(3, start=1), Box(-1.0, 1.0, (1,)), gym.spaces.MultiBinary(2)):
        assert [type(c) for c in default_module_to_env(space)] == [GetActions, ActionsToEnvSpace]


@pytest.fixture
def module() -> DefaultPPORLModule:
    torch.manual_seed(0)
    return DefaultPPORLModule(observation_space=OBS, action_space=Discrete(3), inference_only=True)


def test_get_actions_samples_when_exploring_and_takes_the_mode_otherwise(module):
    logits = torch.tensor([[0.0, 5.0, 0.0], [-9.0, -9.0, 9.0]])
    out = GetActions()({Columns.ACTION_DIST_INPUTS: logits}, rl_module=module, explore=False)
    assert out[Columns.ACTIONS].tolist() == [1, 2]
    assert isinstance(out[ENV_ACTIONS], np.ndarray) and out[ENV_ACTIONS].tolist() == [1, 2]
    torch.manual_seed(0)
    flat = torch.zeros(2000, 3)
    sampled = GetActions()({Columns.ACTION_DIST_INPUTS: flat}, rl_module=module, explore=True)
    counts = np.bincount(sampled[ENV_ACTIONS], minlength=3)
    assert (counts > 550).all()  # uniform logits: about 667 each
    given = {Columns.ACTIONS: torch.tensor([0, 0]), Columns.ACTION_DIST_INPUTS: logits}
    assert GetActions()(given, rl_module=module, explore=True)[ENV_ACTIONS].tolist() == [0, 0]


def test_get_actions_refuses_non_finite_distribution_inputs(module):
    bad = torch.tensor([[0.0, float("inf"), 0.0]])
    with pytest.raises(
        NonFiniteActionError, match="DefaultPPORLModule's action distribution inputs hold NaN"
    ):
        GetActions()({Columns.ACTION_DIST_INPUTS: bad}, rl_module=module, explore=True)


def test_add_action_logp_scores_the_actions_unless_already_recorded(module):
    logits = np.array([[0.0, np.log(3.0), 0.0], [1.0, 1.0, 1.0]], np.float32)
    batch = {Columns.ACTION_DIST_INPUTS: logits, Columns.ACTIONS: np.array([1, 0])}
    add_action_logp(batch, module)
    np.testing.assert_allclose(batch[Columns.ACTION_LOGP], np.log([3 / 5, 1 / 3]), rtol=1e-6)
    recorded = {**batch, Columns.ACTION_LOGP: np.array([-1.0, -2.0])}
    add_action_logp(recorded, module)
    assert recorded[Columns.ACTION_LOGP].tolist() == [-1.0, -2.0]


def test_actions_from_env_inverts_the_map_and_refuses_nested_spaces():
    space = Box(np.array([-2.0, 0.0], np.float32), np.array([6.0, np.inf], np.float32))
    env_actions = _to_env(space, np.array([[0.25, 3.0]], np.float32))
    np.testing.assert_allclose(actions_from_env(space, env_actions), [[0.25, 3.0]])
    assert actions_from_env(Discrete(4, start=2), np.array([2, 5])).tolist() == [0, 3]
    md = gym.spaces.MultiDiscrete([3, 3], start=[1, 1])
    assert actions_from_env(md, np.array([[1, 3]])).tolist() == [[0, 2]]
    with pytest.raises(TypeError, match=r"Recorded actions of space Tuple.* cannot be mapped back"):
        actions_from_env(gym.spaces.Tuple([Discrete(2)]), np.array([[0]]))
