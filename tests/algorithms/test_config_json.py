"""Settings to JSON and back (rlmod.algorithms.config_json), one value at a time: spaces,
specs, sets and callables come back as themselves (by import path, under the trust model
and checked for the kind their setting expects), lambdas are refused or stored as "pass it
again" naming the setting, and a dict that merely looks like one of the tags is refused
rather than read back as something else.

Whole configs through to_dict / from_dict, checkpoints and `rlmod train --config` are tested
in tests/algorithms/test_settings.py, tests/utils/test_trust.py and tests/test_cli.py.
"""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.common_settings import default_policy_mapping_fn
from rlmod.algorithms.config_json import MUST_PASS, decode_setting, encode_setting
from rlmod.algorithms.ppo import DefaultPPORLModule, PPOLearner
from rlmod.core.rl_module import RLModuleSpec
from rlmod.utils.spaces import flat_dim
from rlmod.utils.trust import UntrustedImportError


def _round_trip(value: object, setting: str) -> object:
    return decode_setting(json.loads(json.dumps(encode_setting(value, setting))), setting)


def test_plain_values_spaces_and_sets_round_trip():
    assert _round_trip({"a": [1, 2.5, None, True, "x"]}, "env_config") == {
        "a": [1, 2.5, None, True, "x"]
    }
    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert _round_trip(space, "observation_space") == space
    assert _round_trip({"p1", "p0"}, "policies_to_train") == {"p0", "p1"}
    assert encode_setting(frozenset({"b", "a"}), "policies_to_train") == {"__set__": ["a", "b"]}
    assert _round_trip((64, 64), "fcnet_hiddens") == [64, 64]  # tuples come back as lists


def test_specs_round_trip():
    spec = RLModuleSpec(
        module_class=DefaultPPORLModule,
        observation_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        action_space=gym.spaces.Discrete(2),
        model_config={"fcnet_hiddens": [8]},
    )
    back = _round_trip(spec, "rl_module_spec")
    assert isinstance(back, RLModuleSpec)
    assert back.module_class is DefaultPPORLModule and back.model_config == spec.model_config
    assert back.action_space == spec.action_space


def test_callables_are_stored_by_import_path_and_checked_for_their_kind():
    encoded = encode_setting(PPOLearner, "learner_class")
    assert encoded == {"__import__": "rlmod.algorithms.ppo.ppo_learner:PPOLearner"}
    assert decode_setting(encoded, "learner_class") is PPOLearner
    mapping = default_policy_mapping_fn  # one of the rlmod functions its field lists
    assert _round_trip(mapping, "policy_mapping_fn") is mapping
    # other rlmod functions, and a function where a Learner class belongs, are refused
    with pytest.raises(UntrustedImportError, match="only those a field lists"):
        decode_setting(encode_setting(flat_dim, "some_callable"), "some_callable")
    with pytest.raises(UntrustedImportError):
        decode_setting({"__import__": "rlmod.utils.spaces:flat_dim"}, "learner_class")
    with pytest.raises(UntrustedImportError):
        decode_setting({"__import__": "os:system"}, "env_config['x']")


def test_lambdas_are_refused_or_stored_to_be_passed_again():
    with pytest.raises(ValueError, match=r"policy_mapping_fn=<function .* has no import path"):
        encode_setting(lambda aid, ep, **kw: "p0", "policy_mapping_fn")
    stored = encode_setting(
        {"fn": lambda aid, ep, **kw: "p0"}, "policy_mapping_fn", allow_unnamed=True
    )
    assert list(stored["fn"]) == [MUST_PASS]
    with pytest.raises(
        ValueError,
        match=r"policy_mapping_fn\['fn'\] was <function .*lambda.* when saved, which has no "
        r"import path .*from_checkpoint\(path, policy_mapping_fn=\.\.\.\)",
    ):
        decode_setting(stored, "policy_mapping_fn")


def test_dataclasses_are_stored_as_dicts_and_other_objects_refused():
    @dataclasses.dataclass
    class Schedule:
        start: float
        end: float

    assert encode_setting(Schedule(1.0, 0.1), "lr_schedule") == {"start": 1.0, "end": 0.1}
    with pytest.raises(ValueError, match=r"buffer=b'x' cannot be stored as JSON"):
        encode_setting(b"x", "buffer")


def test_dict_keys_become_strings_and_nested_settings_are_named():
    assert encode_setting({1: "a"}, "overrides") == {"1": "a"}
    with pytest.raises(ValueError, match=r"overrides\['p0'\]\['fn'\]=<function"):
        encode_setting({"p0": {"fn": lambda: 0}}, "overrides")


@pytest.mark.parametrize("tag", ["__set__", "__import__", "__space__", MUST_PASS])
def test_a_dict_that_looks_like_a_tag_is_refused(tag: str):
    """Read back, {"__set__": [1, 2]} would be the set {1, 2}, {"__import__": ...} an
    import, {"__must_pass__": ...} an error."""
    with pytest.raises(ValueError, match=rf"env_config\['x'\] is a dict with the one key '{tag}'"):
        encode_setting({"x": {tag: [1, 2]}}, "env_config")
    value = {"x": {tag: [1, 2], "other": 3}}  # with another key it is an ordinary dict
    assert _round_trip(value, "env_config") == value
