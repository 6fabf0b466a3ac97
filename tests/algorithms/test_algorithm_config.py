"""Tests of AlgorithmConfig (rlmod/algorithms/algorithm_config.py), through PPOConfig.

Pins DESIGN.md rule 2 (one path from config to spec), rule 4 for one module (per-module
overrides) and rule 5 (batch sizes), plus JSON round trip, copy and freeze. Messages of
bad settings are pinned in test_bad_input.py.
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.ppo import DefaultPPORLModule, PPOConfig
from rlmod.core import MultiRLModuleSpec, RLModuleSpec

FROZEN_LAKE_OBS = gym.spaces.Discrete(16)
ONE_HOT_16 = gym.spaces.Box(0.0, 1.0, (16,), np.float32)
FOUR_ACTIONS = gym.spaces.Discrete(4)
BOX3 = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


# ---------------------------------------------------------------------- rule 2
def test_spec_from_spaces_takes_them_as_the_module_sees_them():
    spec = PPOConfig().get_rl_module_spec(spaces={"default_policy": (BOX3, FOUR_ACTIONS)})
    assert spec.module_class is DefaultPPORLModule
    assert (spec.observation_space, spec.action_space) == (BOX3, FOUR_ACTIONS)
    assert not spec.inference_only and not spec.learner_only


def test_spec_from_env_goes_through_the_env_to_module_connectors():
    env = gym.make("FrozenLake-v1")
    spec = PPOConfig().get_rl_module_spec(env=env)
    assert (spec.observation_space, spec.action_space) == (ONE_HOT_16, FOUR_ACTIONS)
    env.close()


def test_spec_from_the_users_spec():
    config = PPOConfig().rl_module(
        rl_module_spec=RLModuleSpec(
            observation_space=BOX3, action_space=FOUR_ACTIONS, model_config={"fcnet_hiddens": [8]}
        )
    )
    spec = config.get_rl_module_spec()
    assert spec.module_class is DefaultPPORLModule  # the algorithm's default fills it in
    assert (spec.observation_space, spec.action_space) == (BOX3, FOUR_ACTIONS)
    assert spec.model_config == {"fcnet_hiddens": [8]}


def test_spec_from_environment_spaces_goes_through_the_connectors():
    config = PPOConfig().environment(observation_space=FROZEN_LAKE_OBS, action_space=FOUR_ACTIONS)
    spec = config.get_rl_module_spec()
    assert (spec.observation_space, spec.action_space) == (ONE_HOT_16, FOUR_ACTIONS)


def test_spaces_win_over_env_over_user_spec_over_environment_spaces():
    env = gym.make("CartPole-v1")
    config = (
        PPOConfig()
        .environment(observation_space=FROZEN_LAKE_OBS, action_space=FOUR_ACTIONS)
        .rl_module(rl_module_spec=RLModuleSpec(observation_space=BOX3, action_space=FOUR_ACTIONS))
    )
    given = (gym.spaces.Box(-2.0, 2.0, (7,), np.float32), gym.spaces.Discrete(3))
    assert (
        config.get_rl_module_spec(env=env, spaces={"default_policy": given}).observation_space
        == given[0]
    )
    assert config.get_rl_module_spec(env=env).observation_space.shape == (4,)
    assert config.get_rl_module_spec().observation_space == BOX3
    env.close()


def test_spaces_missing_everywhere_says_how_to_provide_them():
    with pytest.raises(
        ValueError,
        match=r"Cannot infer the observation and action spaces of "
        r"module 'default_policy'.*"
        r"config\.environment\(observation_space=\.\.\., "
        r"action_space=\.\.\.\)",
    ):
        PPOConfig().get_rl_module_spec()
    with pytest.raises(ValueError, match="Cannot infer the observation and action spaces"):
        PPOConfig().get_multi_rl_module_spec()


@pytest.mark.parametrize("user_flag", [False, True])
def test_inference_only_none_keeps_the_specs_value(user_flag):
    config = PPOConfig().rl_module(rl_module_spec=RLModuleSpec(inference_only=user_flag))
    spaces = {"default_policy": (BOX3, FOUR_ACTIONS)}
    assert config.get_rl_module_spec(spaces=spaces).inference_only is user_flag
    assert config.get_rl_module_spec(spaces=spaces, inference_only=True).inference_only
    assert not config.get_rl_module_spec(spaces=spaces, inference_only=False).inference_only


def test_model_config_of_the_config_reaches_the_spec_and_the_spec_wins():
    config = PPOConfig().rl_module(
        model_config={"fcnet_hiddens": [8], "fcnet_activation": "relu"},
        rl_module_spec=RLModuleSpec(model_config={"fcnet_hiddens": [16]}),
    )
    spec = config.get_rl_module_spec(spaces={"default_policy": (BOX3, FOUR_ACTIONS)})
    assert spec.model_config == {"fcnet_hiddens": [16], "fcnet_activation": "relu"}


@pytest.mark.parametrize("inference_only", [False, True])
def test_multi_spec_single_module_case_has_exactly_the_default_policy(inference_only):
    config = PPOConfig().environment(observation_space=FROZEN_LAKE_OBS, action_space=FOUR_ACTIONS)
    multi = config.get_multi_rl_module_spec(inference_only=inference_only)
    assert isinstance(multi, MultiRLModuleSpec)
    assert set(multi.rl_module_specs) == {"default_policy"}
    sub = multi["default_policy"]
    assert sub == config.get_rl_module_spec(inference_only=inference_only)
    assert sub.inference_only is inference_only


# ---------------------------------------------------------------------- rule 5
@pytest.mark.parametrize(
    "num_learners, per_learner, total", [(0, 4000, 4000), (1, 4000, 4000), (3, 1333, 3999)]
)
def test_per_learner_batch_derived_from_train_batch_size(num_learners, per_learner, total):
    config = PPOConfig().training(train_batch_size=4000).learners(num_learners=num_learners)
    assert config.train_batch_size_per_learner == per_learner  # derived on read, as RLlib
    assert (
        config.to_dict()["_train_batch_size_per_learner"] is None
    )  # what the user set (RLlib key)
    assert config.total_train_batch_size == total


@pytest.mark.parametrize("num_learners, total", [(0, 500), (1, 500), (3, 1500)])
def test_per_learner_batch_set_wins_over_train_batch_size(num_learners, total):
    config = (
        PPOConfig()
        .training(train_batch_size=4000, train_batch_size_per_learner=500)
        .learners(num_learners=num_learners)
    )
    assert config.train_batch_size_per_learner == 500
    assert config.total_train_batch_size == total


def test_validate_checks_minibatch_against_the_derived_per_learner_batch():
    config = PPOConfig().training(train_batch_size=300, minibatch_size=128)
    config.validate()
    config.learners(num_learners=3)  # 300 // 3 = 100 < 128
    with pytest.raises(
        ValueError,
        match=r"minibatch_size \(128\) is larger than "
        r"train_batch_size_per_learner \(100\)",
    ):
        config.validate()


def test_auto_rollout_fragment_length_splits_the_train_batch():
    config = PPOConfig().training(train_batch_size=1000).env_runners(num_envs_per_env_runner=8)
    assert config.get_rollout_fragment_length() == 125
    config.env_runners(num_env_runners=3)
    assert config.get_rollout_fragment_length() == 42  # ceil(1000 / 24)
    config.env_runners(rollout_fragment_length=10)
    assert config.get_rollout_fragment_length() == 10


# ---------------------------------------------------------------------- rule 4 (one module)
def test_config_for_module_without_overrides_is_the_config_itself():
    config = PPOConfig()
    assert config.get_config_for_module("default_policy") is config
    config.rl_module(algorithm_config_overrides_per_module={"other": {"lr": 1e-3}})
    assert config.get_config_for_module("default_policy") is config


def test_config_for_module_with_overrides_is_a_cached_frozen_copy():
    config = (
        PPOConfig()
        .training(lr=3e-4, gamma=0.9)
        .rl_module(algorithm_config_overrides_per_module={"default_policy": {"lr": 5e-4}})
    )
    per_module = config.get_config_for_module("default_policy")
    assert per_module is not config
    assert per_module is config.get_config_for_module("default_policy")
    assert per_module.lr == 5e-4 and config.lr == 3e-4
    assert per_module.gamma == 0.9  # everything else comes from the main config
    assert per_module.is_frozen and not config.is_frozen
    with pytest.raises(
        AttributeError, match=r"Cannot set attribute \(gamma\) of an already frozen"
    ):
        per_module.gamma = 0.5


def test_changing_the_config_drops_cached_per_module_copies():
    config = PPOConfig().rl_module(
        algorithm_config_overrides_per_module={"default_policy": {"lr": 5e-4}}
    )
    first = config.get_config_for_module("default_policy")
    config.training(gamma=0.5)
    second = config.get_config_for_module("default_policy")
    assert second is not first and second.gamma == 0.5 and second.lr == 5e-4


def test_unknown_override_key_fails_at_validate():
    config = PPOConfig().rl_module(
        algorithm_config_overrides_per_module={"default_policy": {"lamda_": 0.9}}
    )
    with pytest.raises(
        ValueError,
        match=r"algorithm_config_overrides_per_module"
        r"\['default_policy'\] names 'lamda_'",
    ):
        config.validate()


def test_bad_override_value_fails_at_validate():
    config = PPOConfig().rl_module(
        algorithm_config_overrides_per_module={"default_policy": {"gamma": 2.0}}
    )
    with pytest.raises(ValueError, match=r"gamma=2\.0 is invalid"):
        config.validate()


# ---------------------------------------------------------------------- JSON, copy, freeze
def test_to_dict_json_from_dict_round_trip(cartpole_config):
    config = (
        cartpole_config.environment(
            observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
            action_space=gym.spaces.Discrete(2),
        )
        .training(lr=[[0, 1e-3], [1000, 1e-4]], lambda_=0.9)
        .rl_module(
            model_config={"fcnet_hiddens": [32]},
            rl_module_spec=RLModuleSpec(module_class=DefaultPPORLModule),
            algorithm_config_overrides_per_module={"default_policy": {"lr": 1e-3}},
        )
        .multi_agent(policies_to_train={"default_policy"})
    )
    data = config.to_dict()
    back = PPOConfig.from_dict(json.loads(json.dumps(data)))
    assert back.to_dict() == data
    assert back.observation_space == config.observation_space
    assert back.rl_module_spec == config.rl_module_spec
    assert back.policies_to_train == {"default_policy"}
    assert back.policy_mapping_fn is config.policy_mapping_fn
    assert (back.lambda_, back.lr, back.train_batch_size) == (0.9, [[0, 1e-3], [1000, 1e-4]], 256)


def test_copy_is_independent(cartpole_config):
    cartpole_config.rl_module(model_config={"fcnet_hiddens": [32]})
    clone = cartpole_config.copy()
    clone.training(lr=1e-2)
    clone.model_config["fcnet_hiddens"] = [1]
    clone.env_config["render_mode"] = None
    assert cartpole_config.lr == 5e-5
    assert cartpole_config.model_config == {"fcnet_hiddens": [32]}
    assert cartpole_config.env_config == {}


def test_copy_of_a_frozen_config_is_unfrozen_unless_asked():
    config = PPOConfig()
    config.freeze()
    assert not config.copy().is_frozen
    assert config.copy(copy_frozen=True).is_frozen


def test_freeze_makes_setters_and_attributes_read_only():
    config = PPOConfig()
    config.freeze()
    with pytest.raises(AttributeError, match=r"Cannot set attribute \(lr\) of an already frozen"):
        config.lr = 1e-3
    with pytest.raises(
        AttributeError, match=r"Cannot set attribute \(gamma\) of an already frozen"
    ):
        config.training(gamma=0.5)


def test_built_algos_config_is_a_frozen_copy(cartpole_config):
    algo = cartpole_config.build_algo()
    assert algo.config.is_frozen and algo.config is not cartpole_config
    assert not cartpole_config.is_frozen
    cartpole_config.training(lr=1e-2)  # the user may go on changing theirs
    assert algo.config.lr == 5e-5
    with pytest.raises(AttributeError, match="already frozen"):
        algo.config.lr = 1e-2
    algo.stop()


def test_setters_chain_and_ppo_defaults():
    config = PPOConfig()
    assert config.training(lambda_=0.9, lr=1e-3) is config
    assert (config.lambda_, config.lr, config.num_epochs, config.grad_clip) == (0.9, 1e-3, 30, None)


def test_ppo_defaults_are_rllibs():
    """RLlib 2.60's PPOConfig() values (read from ray 2.60 in a separate venv)."""
    config = PPOConfig()
    assert {
        name: getattr(config, name)
        for name in (
            "lr",
            "gamma",
            "lambda_",
            "clip_param",
            "vf_clip_param",
            "use_kl_loss",
            "kl_coeff",
            "kl_target",
            "entropy_coeff",
            "vf_loss_coeff",
            "grad_clip",
            "num_epochs",
            "minibatch_size",
            "train_batch_size",
            "explore",
        )
    } == {
        "lr": 5e-5,
        "gamma": 0.99,
        "lambda_": 1.0,
        "clip_param": 0.3,
        "vf_clip_param": 10.0,
        "use_kl_loss": True,
        "kl_coeff": 0.2,
        "kl_target": 0.01,
        "entropy_coeff": 0.0,
        "vf_loss_coeff": 1.0,
        "grad_clip": None,
        "num_epochs": 30,
        "minibatch_size": 128,
        "train_batch_size": 4000,
        "explore": True,
    }
    module = (
        config.environment("CartPole-v1")
        .get_rl_module_spec(
            spaces={"default_policy": (gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))}
        )
        .build()
    )
    widths = [layer.out_features for layer in module.encoder if hasattr(layer, "out_features")]
    assert widths == [256, 256] and hasattr(module, "vf_encoder")  # vf_share_layers=False
