"""Bad settings and calls a user can make, each with the phrase its message must hold.

setting / call                                     -> exception
    message (the pinned phrase; ... marks text left out here)

.training(gamma=1.5)                               -> ValueError
    gamma=1.5 is invalid: must be a number in [0.0, 1.0].
.training(gamma="0.9")                             -> TypeError
    gamma='0.9' is of the wrong kind: expected a number in [0.0, 1.0].
.training(lr=-1)                                   -> ValueError
    lr=-1 is invalid: must be a number in (0.0, inf].
.training(lr=[[100, 1e-3]])                        -> ValueError
    a schedule's timesteps must start at 0 and increase.
.training(clip_param=0)                            -> ValueError
    clip_param=0 is invalid: must be a number in (0.0, inf].
.env_runners(num_envs_per_env_runner=0)            -> ValueError
    num_envs_per_env_runner=0 is invalid: must be an int >= 1.
.env_runners(num_env_runners=True)                 -> TypeError
    num_env_runners=True is of the wrong kind: expected an int >= 0.
.env_runners(rollout_fragment_length=0)            -> ValueError
    rollout_fragment_length=0 is invalid: must be 'auto' or an int >= 1.
.env_runners(rollout_fragment_length="Auto")       -> TypeError
    ... is of the wrong kind: expected 'auto' or an int >= 1.
.evaluation(evaluation_duration_unit="weeks")      -> ValueError
    evaluation_duration_unit='weeks' is invalid: must be one of ['episodes', ...
.multi_agent(policies=set())                       -> ValueError
    policies=set() is invalid: needs at least one module ID.
.rl_module(rl_module_spec="ppo")                   -> TypeError
    rl_module_spec='ppo' is of the wrong kind: expected an RLModuleSpec, ...
.training(lamda_=0.9)                              -> TypeError
    .training() got an unexpected keyword argument 'lamda_'. Did you mean 'lambda_'?
config.lamda_ = 0.9                                -> AttributeError
    PPOConfig has no setting 'lamda_'. Did you mean 'lambda_'?
PPOConfig.from_dict({"lamda_": 0.9})               -> ValueError
    PPOConfig.from_dict: unknown setting 'lamda_'. Did you mean 'lambda_'?
frozen config: config.lr = 1e-3                    -> AttributeError
    Cannot set attribute (lr) of an already frozen AlgorithmConfig ... Change a config.copy() instead.
minibatch_size=200 > train_batch_size=100, validate() -> ValueError
    minibatch_size (200) is larger than train_batch_size_per_learner (100); ...
train_batch_size=2, num_learners=3, validate()     -> ValueError
    train_batch_size (2) // num_learners (3) is 0; raise train_batch_size or ...
policies_to_train=["default_polcy"], validate()    -> UnknownModuleIDError
    policies_to_train names 'default_polcy', which is not a module ...
    Did you mean 'default_policy'?
overrides {"default_policy": {"lrr": 1e-3}}, validate() -> ValueError
    algorithm_config_overrides_per_module['default_policy'] names 'lrr', ... Did you mean 'lr'?
overrides {"default_policy": {"gamma": 2.0}}, validate() -> ValueError
    gamma=2.0 is invalid: must be a number in [0.0, 1.0].
.environment("CartPol-v1").build_algo()            -> ValueError
    env='CartPol-v1' is neither registered ... nor a gymnasium ID. Did you mean 'CartPole-v1'?
no env at all, build_algo()                        -> ValueError
    No env is set: call config.environment(env=...) ...
env creator returns no gymnasium.Env, build_algo() -> TypeError
    made a object, not a gymnasium.Env.
model_config={"fcnet_hiden": [32]}, build_algo()   -> ValueError
    model_config has unknown key 'fcnet_hiden'. Did you mean 'fcnet_hiddens'?
num_env_runners=2 without ray, build_algo()        -> ImportError
    num_env_runners=2 runs components as Ray actors, but ray is not installed.
    Install it with `pip install 'rlmod[ray]'` ...
num_learners=2 without ray, build_algo()           -> ImportError
    num_learners=2 runs components as Ray actors, but ray is not installed. ...
no spaces anywhere: get_rl_module_spec()           -> ValueError
    Cannot infer the observation and action spaces of module 'default_policy': ...
    Pass get_*_spec(spaces=env_runner_group.get_spaces()) or env=..., set
    RLModuleSpec(observation_space=..., action_space=...), or call
    config.environment(observation_space=..., action_space=...).
RLModuleSpec(inference_only=True, learner_only=True) -> ValueError
    RLModuleSpec got inference_only=True and learner_only=True; ... Set at most one of the two.
runner.sample(num_timesteps=10, num_episodes=1)    -> ValueError
    sample() takes num_timesteps or num_episodes, not both.
.debugging(seed=2**64)                             -> ValueError
    seed=18446744073709551616 is invalid: must be an int >= 0 and <= 18446744073709551615.
.environment(gym.make("CartPole-v1"))              -> TypeError
    ... is of the wrong kind: env is an env instance (TimeLimit, as gym.make(...) returns), ...
env class whose __init__ takes no env_config, build_algo() -> TypeError
    ... is called as _NoConfigEnv(env_config) to make each env (RLlib's convention), ...
creator function without env_config, build_algo() -> TypeError
    ... is called as <lambda>(env_config) ..., but it takes no such argument. Give it ...
env without spaces, build_algo()                   -> TypeError
    ... whose action_space is a NoneType, not a gymnasium Space; set self.action_space ...
"""

from __future__ import annotations

import re
import sys

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import RLModuleSpec
from rlmod.env import SingleAgentEnvRunner
from rlmod.errors import UnknownModuleIDError


def small() -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )


class _NoConfigEnv(gym.Env):
    """gymnasium's convention: no env_config argument."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        super().__init__()


class _NoActionSpace(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, env_config: dict | None = None) -> None:
        super().__init__()


def frozen_lr() -> None:
    config = PPOConfig()
    config.freeze()
    config.lr = 1e-3


def set_typo() -> None:
    config = PPOConfig()
    config.lamda_ = 0.9


def sample_both() -> None:
    runner = SingleAgentEnvRunner(config=small())
    try:
        runner.sample(num_timesteps=10, num_episodes=1)
    finally:
        runner.stop()


def overrides(**per_module) -> PPOConfig:
    return small().rl_module(algorithm_config_overrides_per_module=per_module)


def without_ray(call):
    """`call` run as if ray were not installed (`import ray` raises ImportError), so the
    install message stays pinned where ray is installed too."""

    def run():
        saved = sys.modules.get("ray")
        sys.modules["ray"] = None  # type: ignore[assignment]
        try:
            return call()
        finally:
            if saved is None:
                del sys.modules["ray"]
            else:
                sys.modules["ray"] = saved

    return run


CASES = [
    # --- values checked when set
    (
        "gamma",
        lambda: PPOConfig().training(gamma=1.5),
        ValueError,
        "gamma=1.5 is invalid: must be a number in [0.0, 1.0].",
    ),
    (
        "gamma-kind",
        lambda: PPOConfig().training(gamma="0.9"),
        TypeError,
        "gamma='0.9' is of the wrong kind: expected a number in [0.0, 1.0].",
    ),
    (
        "lr",
        lambda: PPOConfig().training(lr=-1),
        ValueError,
        "lr=-1 is invalid: must be a number in (0.0, inf].",
    ),
    (
        "lr-schedule",
        lambda: PPOConfig().training(lr=[[100, 1e-3]]),
        ValueError,
        "lr=[[100, 0.001]] is invalid: a schedule's timesteps must start at 0 and increase.",
    ),
    (
        "clip_param",
        lambda: PPOConfig().training(clip_param=0),
        ValueError,
        "clip_param=0 is invalid: must be a number in (0.0, inf].",
    ),
    (
        "num_envs",
        lambda: PPOConfig().env_runners(num_envs_per_env_runner=0),
        ValueError,
        "num_envs_per_env_runner=0 is invalid: must be an int >= 1.",
    ),
    (
        "num_env_runners-kind",
        lambda: PPOConfig().env_runners(num_env_runners=True),
        TypeError,
        "num_env_runners=True is of the wrong kind: expected an int >= 0.",
    ),
    (
        "fragment",
        lambda: PPOConfig().env_runners(rollout_fragment_length=0),
        ValueError,
        "rollout_fragment_length=0 is invalid: must be 'auto' or an int >= 1.",
    ),
    (
        "fragment-kind",
        lambda: PPOConfig().env_runners(rollout_fragment_length="Auto"),
        TypeError,
        "rollout_fragment_length='Auto' is of the wrong kind: expected 'auto' or an int >= 1.",
    ),
    (
        "eval-unit",
        lambda: PPOConfig().evaluation(evaluation_duration_unit="weeks"),
        ValueError,
        "evaluation_duration_unit='weeks' is invalid: must be one of ['episodes', 'timesteps'].",
    ),
    (
        "policies-empty",
        lambda: PPOConfig().multi_agent(policies=set()),
        ValueError,
        "policies=set() is invalid: needs at least one module ID.",
    ),
    (
        "spec-kind",
        lambda: PPOConfig().rl_module(rl_module_spec="ppo"),
        TypeError,
        "rl_module_spec='ppo' is of the wrong kind: expected an RLModuleSpec, a MultiRLModuleSpec "
        "or None.",
    ),
    # --- unknown names
    (
        "setter-kwarg",
        lambda: PPOConfig().training(lamda_=0.9),
        TypeError,
        ".training() got an unexpected keyword argument 'lamda_'. Did you mean 'lambda_'?",
    ),
    (
        "attribute-typo",
        set_typo,
        AttributeError,
        "PPOConfig has no setting 'lamda_'. Did you mean 'lambda_'?",
    ),
    (
        "from_dict-key",
        lambda: PPOConfig.from_dict({"lamda_": 0.9}),
        ValueError,
        "PPOConfig.from_dict: unknown setting 'lamda_'. Did you mean 'lambda_'?",
    ),
    (
        "frozen",
        frozen_lr,
        AttributeError,
        "Cannot set attribute (lr) of an already frozen AlgorithmConfig (RLlib's words): it "
        "belongs to a built Algorithm or is a per-module copy. Change a config.copy() instead.",
    ),
    # --- cross-field rules in validate()
    (
        "minibatch",
        lambda: PPOConfig().training(train_batch_size=100, minibatch_size=200).validate(),
        ValueError,
        "minibatch_size (200) is larger than train_batch_size_per_learner (100); lower "
        "minibatch_size or raise the batch.",
    ),
    (
        "batch-per-learner-0",
        lambda: PPOConfig().training(train_batch_size=2).learners(num_learners=3).validate(),
        ValueError,
        "train_batch_size (2) // num_learners (3) is 0; raise train_batch_size or set "
        "train_batch_size_per_learner.",
    ),
    (
        "policies_to_train",
        lambda: small().multi_agent(policies_to_train=["default_polcy"]).validate(),
        UnknownModuleIDError,
        "policies_to_train names 'default_polcy', which is not a module: modules are "
        "['default_policy']. Did you mean 'default_policy'?",
    ),
    (
        "override-key",
        lambda: overrides(default_policy={"lrr": 1e-3}).validate(),
        ValueError,
        "algorithm_config_overrides_per_module['default_policy'] names 'lrr', which is not a "
        "setting of PPOConfig. Did you mean 'lr'?",
    ),
    (
        "override-value",
        lambda: overrides(default_policy={"gamma": 2.0}).validate(),
        ValueError,
        "gamma=2.0 is invalid: must be a number in [0.0, 1.0].",
    ),
    # --- build_algo()
    (
        "env-id",
        lambda: small().environment("CartPol-v1").build_algo(),
        ValueError,
        "env='CartPol-v1' is neither registered with rlmod.register_env nor a gymnasium ID. "
        "Did you mean 'CartPole-v1'?",
    ),
    (
        "no-env",
        lambda: PPOConfig().build_algo(),
        ValueError,
        "No env is set: call config.environment(env=...) with a gymnasium ID, a name registered "
        "with rlmod.register_env, or a callable(env_config) -> env.",
    ),
    (
        "not-a-gym-env",
        lambda: small().environment(lambda cfg: object()).build_algo(),
        TypeError,
        "made a object, not a gymnasium.Env.",
    ),
    (
        "model_config-key",
        lambda: small().rl_module(model_config={"fcnet_hiden": [32]}).build_algo(),
        ValueError,
        "model_config has unknown key 'fcnet_hiden'. Did you mean 'fcnet_hiddens'?",
    ),
    (
        "ray-env-runners",
        without_ray(lambda: small().env_runners(num_env_runners=2).build_algo()),
        ImportError,
        "num_env_runners=2 runs components as Ray actors, but ray is not installed. Install it "
        "with `pip install 'rlmod[ray]'`",
    ),
    (
        "ray-learners",
        without_ray(lambda: small().learners(num_learners=2).build_algo()),
        ImportError,
        "num_learners=2 runs components as Ray actors, but ray is not installed. Install it "
        "with `pip install 'rlmod[ray]'`",
    ),
    # --- specs and EnvRunners
    (
        "spaces-missing",
        lambda: PPOConfig().get_rl_module_spec(),
        ValueError,
        "Cannot infer the observation and action spaces of module 'default_policy': no "
        "spaces=..., no env, none on its RLModuleSpec and none in the config. Pass "
        "get_*_spec(spaces=env_runner_group.get_spaces()) or env=..., set "
        "RLModuleSpec(observation_space=..., action_space=...), or call "
        "config.environment(observation_space=..., action_space=...).",
    ),
    (
        "spec-flags",
        lambda: RLModuleSpec(inference_only=True, learner_only=True),
        ValueError,
        "RLModuleSpec got inference_only=True and learner_only=True; a learner-only module is "
        "never built on EnvRunners, so it never needs an inference-only version. Set at most one "
        "of the two.",
    ),
    (
        "sample-both",
        sample_both,
        ValueError,
        "sample() takes num_timesteps or num_episodes, not both.",
    ),
    # --- issue 30's adversarial pass
    (
        "seed-too-large",
        lambda: PPOConfig().debugging(seed=2**64),
        ValueError,
        "seed=18446744073709551616 is invalid: must be an int >= 0 and <= 18446744073709551615.",
    ),
    (
        "env-instance",
        lambda: PPOConfig().environment(gym.make("CartPole-v1")),
        TypeError,
        "env is an env instance (TimeLimit, as gym.make(...) returns), but each EnvRunner "
        "makes its own envs, one per sub-env. Pass its ID, env='CartPole-v1', or a creator: "
        "env=lambda env_config: gym.make(...).",
    ),
    (
        "env-class-without-env_config",
        lambda: small().environment(_NoConfigEnv).build_algo(),
        TypeError,
        "is called as _NoConfigEnv(env_config) to make each env (RLlib's "
        "convention), but it takes no such argument. Give it one (def __init__(self, "
        "env_config=None)), or pass a creator: env=lambda env_config: _NoConfigEnv(), or "
        "register it with gymnasium (gymnasium.register(id='_NoConfigEnv-v0', entry_point=",
    ),
    (
        "creator-without-env_config",
        lambda: small().environment(lambda: gym.make("CartPole-v1")).build_algo(),
        TypeError,
        "is called as <lambda>(env_config) to make each env (RLlib's convention), but it takes "
        "no such argument. Give it that parameter: def make(env_config): ... or lambda "
        "env_config: ...",
    ),
    (
        "env-without-spaces",
        lambda: small().environment(_NoActionSpace).build_algo(),
        TypeError,
        "made a _NoActionSpace whose action_space is a NoneType, not a gymnasium Space; set "
        "self.action_space in its __init__",
    ),
]


def _id(case) -> str:
    return case.id if hasattr(case, "id") else case[0]


@pytest.mark.parametrize("name, call, exc, phrase", CASES, ids=[_id(c) for c in CASES])
def test_bad_input_raises_with_its_message(name, call, exc, phrase):
    with pytest.raises(exc, match=re.escape(phrase)):
        call()
