"""Tests of RLModule, RLModuleSpec and MultiRLModule (rlmod/core/rl_module.py, multi_rl_module.py).

Pins DESIGN.md rule 1 for one module: an inference-only DefaultPPORLModule has no value
function, and its state is the inference-only part of a full module's state.
"""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule
from rlmod.core import Columns, MultiRLModule, MultiRLModuleSpec, RLModuleSpec
from rlmod.errors import UnknownModuleIDError

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
DISCRETE2 = gym.spaces.Discrete(2)


def ppo_spec(action_space: gym.Space = DISCRETE2, **kwargs) -> RLModuleSpec:
    return RLModuleSpec(
        module_class=DefaultPPORLModule, observation_space=BOX4, action_space=action_space, **kwargs
    )


# ---------------------------------------------------------------------- RLModuleSpec
def test_spec_refuses_both_flags():
    with pytest.raises(ValueError, match="got inference_only=True and learner_only=True"):
        RLModuleSpec(inference_only=True, learner_only=True)


def test_spec_each_flag_alone_is_fine():
    assert RLModuleSpec(inference_only=True).inference_only
    assert RLModuleSpec(learner_only=True).learner_only


def test_spec_build_makes_the_module_with_spaces_flags_and_model_config():
    module = ppo_spec(inference_only=True, model_config={"fcnet_hiddens": [8]}).build()
    assert isinstance(module, DefaultPPORLModule)
    assert module.observation_space == BOX4 and module.action_space == DISCRETE2
    assert module.inference_only and not module.learner_only
    assert module.config.fcnet_hiddens == (8,)


def test_spec_build_without_spaces_names_the_missing_field():
    with pytest.raises(ValueError, match=r"RLModuleSpec.build\(\) needs observation_space"):
        RLModuleSpec(module_class=DefaultPPORLModule, action_space=DISCRETE2).build()


def test_spec_update_works_in_place_and_replaces_the_model_config_as_rllib():
    # RLlib's RLModuleSpec.update: like dict.update, returns None, model_config replaced.
    base = ppo_spec(model_config={"fcnet_hiddens": [8], "fcnet_activation": "relu"})
    other_space = gym.spaces.Discrete(5)
    assert (
        base.update(
            RLModuleSpec(
                action_space=other_space, inference_only=True, model_config={"fcnet_hiddens": [16]}
            )
        )
        is None
    )
    assert base.module_class is DefaultPPORLModule  # other leaves it None: kept
    assert base.observation_space == BOX4
    assert base.action_space == other_space
    assert base.inference_only and not base.learner_only  # other's or self's
    assert base.model_config == {"fcnet_hiddens": [16]}  # replaced, not merged


def test_spec_update_without_override_fills_only_what_is_unset():
    spec = RLModuleSpec(module_class=DefaultPPORLModule, model_config={"a": 1})
    spec.update(
        RLModuleSpec(
            observation_space=BOX4,
            action_space=DISCRETE2,
            model_config={"b": 2},
            inference_only=True,
        ),
        override=False,
    )
    assert (spec.observation_space, spec.action_space) == (BOX4, DISCRETE2)
    assert spec.model_config == {"a": 1} and not spec.inference_only  # flags stay


def test_spec_update_with_a_non_spec_is_a_value_error():
    with pytest.raises(ValueError, match="takes another RLModuleSpec"):
        ppo_spec().update({"model_config": {}})  # type: ignore[arg-type]


def test_config_layering_merges_model_configs_and_takes_flags_from_the_user_spec():
    # The config's own (private) layering of a user's spec over the algorithm's default.
    base = ppo_spec(model_config={"fcnet_hiddens": [8], "fcnet_activation": "relu"})
    merged = base._merged_with(
        RLModuleSpec(inference_only=True, model_config={"fcnet_hiddens": [16]})
    )
    assert merged.model_config == {"fcnet_hiddens": [16], "fcnet_activation": "relu"}
    assert merged.inference_only and merged.action_space == DISCRETE2
    assert base.model_config == {"fcnet_hiddens": [8], "fcnet_activation": "relu"}


@pytest.mark.parametrize(
    "obs_space, act_space",
    [
        (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Discrete(4, start=1)),
        (
            gym.spaces.Box(np.array([0.0, -np.inf]), np.array([np.inf, 2.0]), dtype=np.float64),
            gym.spaces.MultiDiscrete([2, 3, 4]),
        ),
        (
            gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2, 2)), "cell": gym.spaces.Discrete(9)}),
            gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
        ),
    ],
    ids=["inf-box/discrete", "mixed-bounds/multidiscrete", "dict/box"],
)
def test_spec_json_round_trip_keeps_spaces_class_flags_and_model_config(obs_space, act_space):
    spec = RLModuleSpec(
        module_class=DefaultPPORLModule,
        observation_space=obs_space,
        action_space=act_space,
        inference_only=True,
        model_config={"fcnet_hiddens": [32, 32], "vf_share_layers": True},
    )
    back = RLModuleSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back.module_class is DefaultPPORLModule
    assert back.observation_space == obs_space
    assert back.action_space == act_space
    assert back.inference_only and not back.learner_only
    assert back.model_config == {"fcnet_hiddens": [32, 32], "vf_share_layers": True}


def test_multi_spec_json_round_trip():
    spec = MultiRLModuleSpec(
        rl_module_specs={
            "a": ppo_spec(),
            "b": ppo_spec(gym.spaces.MultiDiscrete([3, 2]), learner_only=True),
        }
    )
    back = MultiRLModuleSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec


# ---------------------------------------------------------------------- rule 1: inference-only
def vf_names(module: torch.nn.Module) -> list[str]:
    return [name for name, _ in module.named_parameters() if "vf" in name]


def test_inference_only_ppo_module_has_no_value_function_parameters():
    assert vf_names(ppo_spec(inference_only=True).build()) == []
    full = ppo_spec(inference_only=False).build()
    assert vf_names(full), "a Learner's module needs its value function"
    assert {n.split(".")[0] for n in vf_names(full)} == {"vf_encoder", "vf"}


def test_inference_only_module_with_shared_layers_also_has_no_value_head():
    spec = ppo_spec(model_config={"vf_share_layers": True})
    assert vf_names(dataclasses.replace(spec, inference_only=True).build()) == []
    assert {n.split(".")[0] for n in vf_names(spec.build())} == {"vf"}


def test_get_state_inference_only_drops_value_tensors_only():
    full = ppo_spec().build()
    all_keys = set(full.get_state())
    inference_keys = set(full.get_state(inference_only=True))
    assert not any("vf" in k for k in inference_keys)
    value_keys = {k for k in all_keys if k.startswith(("vf.", "vf_encoder."))}
    assert value_keys and all_keys - inference_keys == value_keys
    assert inference_keys == set(ppo_spec(inference_only=True).build().get_state())


def test_inference_only_module_loads_a_full_state():
    torch.manual_seed(0)
    full = ppo_spec().build()
    twin = ppo_spec(inference_only=True).build()
    twin.set_state(full.get_state())  # extra vf tensors are ignored
    for name, tensor in twin.get_state().items():
        assert torch.equal(tensor, full.get_state()[name]), name
    obs = {Columns.OBS: torch.randn(5, 4)}
    assert torch.equal(
        twin.forward_inference(obs)[Columns.ACTION_DIST_INPUTS],
        full.forward_inference(obs)[Columns.ACTION_DIST_INPUTS],
    )


def test_full_module_refuses_an_inference_only_state():
    state = ppo_spec(inference_only=True).build().get_state()
    with pytest.raises(ValueError, match=r"State does not fit DefaultPPORLModule: missing \["):
        ppo_spec().build().set_state(state)


# ---------------------------------------------------------------------- action spaces
@pytest.mark.parametrize(
    "action_space, inputs_dim, action_shape",
    [
        (gym.spaces.Discrete(3), 3, ()),
        (gym.spaces.MultiDiscrete([2, 3, 4]), 9, (3,)),
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), 4, (2,)),
    ],
    ids=["discrete", "multidiscrete", "box"],
)
def test_forward_sample_and_logp_per_action_space(action_space, inputs_dim, action_shape):
    torch.manual_seed(0)
    module = ppo_spec(action_space).build()
    batch = {Columns.OBS: torch.randn(7, 4)}
    for out in (module.forward_inference(batch), module.forward_exploration(batch)):
        assert out[Columns.ACTION_DIST_INPUTS].shape == (7, inputs_dim)
    train_out = module.forward_train(batch)
    assert train_out[Columns.ACTION_DIST_INPUTS].shape == (7, inputs_dim)
    assert module.compute_values(batch, train_out[Columns.EMBEDDINGS]).shape == (7,)
    dist = module.action_dist(train_out[Columns.ACTION_DIST_INPUTS])
    actions = dist.sample()
    assert actions.shape == (7, *action_shape)
    assert dist.deterministic_sample().shape == (7, *action_shape)
    logp = dist.logp(actions)
    assert logp.shape == (7,) and torch.isfinite(logp).all()
    assert dist.entropy().shape == (7,)
    if not isinstance(action_space, gym.spaces.Box):
        assert all(action_space.contains(a) for a in actions.numpy())


def test_unsupported_observation_space_is_a_type_error():
    with pytest.raises(TypeError, match="DefaultPPORLModule needs Box observations"):
        RLModuleSpec(
            module_class=DefaultPPORLModule,
            observation_space=gym.spaces.Discrete(3),
            action_space=DISCRETE2,
        ).build()


def test_model_config_unknown_key_suggests_the_closest():
    with pytest.raises(
        ValueError,
        match=r"model_config has unknown key 'fcnet_hidden'\. "
        r"Did you mean 'fcnet_hiddens'\?",
    ):
        ppo_spec(model_config={"fcnet_hidden": [32]}).build()


# ---------------------------------------------------------------------- MultiRLModule
def test_multi_rl_module_unknown_id_names_it():
    multi = MultiRLModuleSpec(rl_module_specs={"policy_a": ppo_spec()}).build()
    assert isinstance(multi, MultiRLModule)
    with pytest.raises(
        UnknownModuleIDError,
        match="No module 'policy_b' in this MultiRLModule. Did you mean 'policy_a'",
    ):
        multi["policy_b"]
    with pytest.raises(KeyError):  # a subclass of KeyError, as dict users expect
        multi["nope"]


def test_multi_rl_module_spec_unknown_id_names_it():
    spec = MultiRLModuleSpec(rl_module_specs={"policy_a": ppo_spec()})
    with pytest.raises(UnknownModuleIDError, match="No spec for module 'policy_x'"):
        spec["policy_x"]
