"""RLlib names on Algorithm, AlgorithmConfig, LearnerGroup and learner results, as RLlib's
docs and config unit tests use them (rewritten, not copied)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig, PPOLearner
from rlmod.connectors import MeanStdFilter
from rlmod.core import DEFAULT_MODULE_ID, MultiRLModuleSpec, RLModuleSpec
from rlmod.errors import UnknownModuleIDError
from rlmod.testing import MultiAgentCartPole


def small(config: PPOConfig) -> PPOConfig:
    return config.training(train_batch_size=128, minibatch_size=64, num_epochs=1)


# ---------------------------------------------------------------------- get_module
def test_get_module_single_agent_is_the_env_runners_module_with_the_learners_weights():
    algo = small(PPOConfig().environment("CartPole-v1")).build_algo()
    algo.train()
    module = algo.get_module()
    assert module is algo.env_runner.module and module.inference_only
    learner_module = algo.learner_group.learner.module[DEFAULT_MODULE_ID]
    assert torch.equal(module.pi[0].weight, learner_module.pi[0].weight)
    with pytest.raises(UnknownModuleIDError, match="default_policy"):
        algo.get_module("defualt_policy")
    algo.stop()


def test_get_module_of_a_learner_only_module_comes_from_the_learner():
    spec = MultiRLModuleSpec(
        rl_module_specs={
            DEFAULT_MODULE_ID: RLModuleSpec(),
            "critic": RLModuleSpec(learner_only=True),
        }
    )
    algo = small(PPOConfig().environment("CartPole-v1").rl_module(rl_module_spec=spec)).build_algo()
    assert algo.get_module("critic") is algo.learner_group.learner.module["critic"]
    algo.stop()


def test_get_module_multi_agent_picks_the_module_by_id():
    algo = small(
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}")
    ).build_algo()
    assert algo.get_module("p1") is algo.env_runner.module["p1"]
    assert algo.get_module("p0") is not algo.get_module("p1")
    with pytest.raises(UnknownModuleIDError, match="p0"):
        algo.get_module()  # no default_policy in this setup
    algo.stop()


# ---------------------------------------------------------------------- config methods
def test_overrides_returns_checked_settings_for_per_module_configs():
    over = PPOConfig.overrides(lr=1e-3, **{"lambda": 0.9})
    assert over == {"lr": 1e-3, "lambda_": 0.9}
    with pytest.raises(KeyError, match="'lrr'.*lr"):
        PPOConfig.overrides(lrr=1e-3)
    with pytest.raises(ValueError, match="lr"):
        PPOConfig.overrides(lr=-1.0)
    config = PPOConfig().multi_agent(
        policies={"p0", "p1"},
        algorithm_config_overrides_per_module={"p1": PPOConfig.overrides(lr=1e-3)},
    )
    assert config.get_config_for_module("p1").lr == 1e-3
    assert config.get_config_for_module("p0") is config


def test_framework_and_api_stack_accept_what_rlmod_is_and_refuse_the_rest():
    config = (
        PPOConfig()
        .framework("torch")
        .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
    )
    assert isinstance(config, PPOConfig)
    with pytest.raises(ValueError, match="PyTorch only"):
        PPOConfig().framework("tf2")
    with pytest.raises(TypeError, match="torch.compile"):
        PPOConfig().framework("torch", torch_compile_learner=True)
    with pytest.raises(ValueError, match="only RLlib's new API stack"):
        PPOConfig().api_stack(enable_rl_module_and_learner=False)


class ScaledLossLearner(PPOLearner):
    """A custom Learner reading its own setting, as RLlib's learner_config_dict examples."""

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        loss = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        scale = self.config.learner_config_dict["loss_scale"]
        self.log(module_id, loss_scale=scale)
        return loss * scale


def test_learner_class_is_built_and_reads_learner_config_dict():
    config = small(
        PPOConfig()
        .environment("CartPole-v1")
        .training(learner_class=ScaledLossLearner, learner_config_dict={"loss_scale": 0.5})
        .learners(learner_config_dict={"other": 1})
    )
    assert config.learner_config_dict == {"loss_scale": 0.5, "other": 1}  # updated, as RLlib
    algo = config.build_algo()
    assert type(algo.learner_group.learner) is ScaledLossLearner
    assert algo.train()["learners"][DEFAULT_MODULE_ID]["loss_scale"] == 0.5
    algo.stop()


def test_learner_class_reads_as_the_default_when_unset_and_is_checked():
    config = PPOConfig()
    assert config.learner_class is PPOLearner
    assert config.to_dict()["learner_class"] is None
    with pytest.raises(TypeError, match="learner_class"):
        config.training(learner_class=dict)


def test_env_to_module_connector_takes_rllib_three_argument_signature():
    calls = []

    def factory(env, spaces, device):
        calls.append((env, spaces, device))
        return [MeanStdFilter()]

    algo = small(
        PPOConfig().environment("CartPole-v1").env_runners(env_to_module_connector=factory)
    ).build_algo()
    env, spaces, device = calls[0]
    assert env is algo.env_runner.env
    assert spaces["__env_single__"][0].shape == (4,)
    assert spaces["__env__"] == (env.observation_space, env.action_space)
    assert device == torch.device("cpu")
    algo.stop()


def test_env_to_module_connector_one_argument_form_still_works():
    seen = []
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(env_to_module_connector=lambda env: seen.append(env) or MeanStdFilter())
    )
    small(config).build_algo().stop()
    assert seen


def test_a_type_error_inside_a_connector_factory_is_not_swallowed():
    def factory(env, spaces, device):
        raise TypeError("bug inside the factory")

    with pytest.raises(TypeError, match="bug inside the factory"):
        PPOConfig().environment("CartPole-v1").env_runners(
            env_to_module_connector=factory
        ).build_algo()


def test_update_from_dict_round_trips_to_dict_and_accepts_rllib_keys():
    config = PPOConfig().environment("CartPole-v1").training(lr=1e-3, lambda_=0.9)
    back = PPOConfig().update_from_dict(config.to_dict())
    assert back.to_dict() == config.to_dict()
    assert back.train_batch_size_per_learner == 4000  # derived on read ...
    assert "train_batch_size_per_learner" not in back.to_dict()  # RLlib: the raw field ...
    assert back.to_dict()["_train_batch_size_per_learner"] is None  # ... None as set
    other = PPOConfig().update_from_dict(
        {"framework": "torch", "lambda": 0.5, "enable_rl_module_and_learner": True}
    )
    assert other.lambda_ == 0.5
    with pytest.raises(ValueError, match="unknown setting 'lrr'"):
        PPOConfig().update_from_dict({"lrr": 1.0})


# ---------------------------------------------------------------------- learner side
def test_get_weights_returns_copies_of_all_modules_learner_only_ones_included():
    spec = MultiRLModuleSpec(
        rl_module_specs={
            DEFAULT_MODULE_ID: RLModuleSpec(),
            "critic": RLModuleSpec(learner_only=True),
        }
    )
    algo = small(PPOConfig().environment("CartPole-v1").rl_module(rl_module_spec=spec)).build_algo()
    weights = algo.learner_group.get_weights()
    assert set(weights) == {DEFAULT_MODULE_ID, "critic"}
    assert any(k.startswith("vf") for k in weights[DEFAULT_MODULE_ID])  # full, not inference
    frozen = {k: v.copy() for k, v in weights[DEFAULT_MODULE_ID].items()}
    algo.train()
    assert all(np.array_equal(frozen[k], v) for k, v in weights[DEFAULT_MODULE_ID].items())
    assert set(algo.learner_group.get_weights(module_ids=["critic"])) == {"critic"}
    algo.stop()


def test_learner_results_use_rllibs_keys():
    # RLlib logs the global gradient norm where it clips by it (grad_clip set).
    algo = small(
        PPOConfig().environment("CartPole-v1").training(lr=3e-4, grad_clip=0.5)
    ).build_algo()
    learner = algo.train()["learners"][DEFAULT_MODULE_ID]
    for key in (
        "default_optimizer_learning_rate",
        "vf_explained_var",
        "vf_loss",
        "vf_loss_unclipped",
        "policy_loss",
        "entropy",
        "mean_kl_loss",
        "num_module_steps_trained",
        "gradients_default_optimizer_global_norm",
    ):
        assert key in learner, key
    assert "curr_lr" not in learner
    assert learner["default_optimizer_learning_rate"] == pytest.approx(3e-4)
    algo.stop()


# ---------------------------------------------------------------------- evaluation
def test_evaluation_config_overrides_apply_to_the_evaluation_runner_only():
    algo = (
        small(PPOConfig().environment("CartPole-v1"))
        .evaluation(
            evaluation_interval=2,
            evaluation_duration=3,
            evaluation_num_env_runners=0,
            evaluation_config=PPOConfig.overrides(explore=False),
            evaluation_parallel_to_training=False,
        )
        .build_algo()
    )
    first = algo.train()
    assert "evaluation" not in first  # not due yet
    second = algo.train()
    evaluation = second["evaluation"]["env_runners"]
    assert evaluation["num_episodes"] >= 3
    eval_config = algo.eval_env_runner_group.local_env_runner.config
    assert eval_config.explore is False and eval_config.in_evaluation
    assert algo.config.explore is True and not algo.config.in_evaluation
    # RLlib keeps the last evaluation's numbers in later results until the next one.
    third = algo.train()
    assert third["evaluation"] is second["evaluation"]
    assert algo.train()["evaluation"] is not second["evaluation"]
    algo.stop()


def test_evaluation_config_takes_a_whole_config_and_checks_keys():
    eval_cfg = PPOConfig().env_runners(explore=False, num_envs_per_env_runner=2)
    config = PPOConfig().environment("CartPole-v1").evaluation(evaluation_config=eval_cfg)
    evaluated = config.get_evaluation_config_object()
    assert evaluated.explore is False and evaluated.num_envs_per_env_runner == 2
    assert evaluated.env is None  # taken whole, as RLlib takes an AlgorithmConfig
    merged = (
        PPOConfig()
        .evaluation(evaluation_config={"explore": False})
        .evaluation(evaluation_config={"num_envs_per_env_runner": 3})
    )
    assert merged.evaluation_config == {"explore": False, "num_envs_per_env_runner": 3}
    with pytest.raises(KeyError, match="explor"):
        PPOConfig().evaluation(evaluation_config={"explor": False})
    with pytest.raises(ValueError, match="auto"):
        PPOConfig().evaluation(evaluation_duration="auto")


def test_evaluation_parallel_to_training_gives_the_same_iterations_results():
    algo = (
        small(PPOConfig().environment("CartPole-v1"))
        .evaluation(
            evaluation_interval=1,
            evaluation_duration=200,
            evaluation_duration_unit="timesteps",
            evaluation_parallel_to_training=True,
        )
        .build_algo()
    )
    before = algo.learner_group.get_weights(inference_only=True)[DEFAULT_MODULE_ID]
    result = algo.train()
    assert result["evaluation"]["env_runners"]["num_env_steps_sampled"] >= 200
    # As RLlib: the evaluation ran on the weights from before this iteration's update.
    evaluated = algo.eval_env_runner_group.local_env_runner.module.get_state()
    assert all(np.array_equal(before[k], evaluated[k].numpy()) for k in before)
    after = algo.learner_group.get_weights(inference_only=True)[DEFAULT_MODULE_ID]
    assert not all(np.array_equal(before[k], after[k]) for k in before)
    assert result["num_env_steps_sampled_lifetime"] >= 128
    algo.stop()


# ---------------------------------------------------------------------- curiosity (RLlib's way)
def test_curiosity_through_learner_class_and_learner_config_dict_as_rllibs_example():
    from rlmod.algorithms.ppo.curiosity_learner import PPOTorchLearnerWithCuriosity
    from rlmod.curiosity import IntrinsicCuriosityModel

    spec = MultiRLModuleSpec(
        rl_module_specs={
            DEFAULT_MODULE_ID: RLModuleSpec(),
            "_intrinsic_curiosity_model": RLModuleSpec(
                module_class=IntrinsicCuriosityModel, learner_only=True
            ),
        }
    )
    config = (
        small(PPOConfig().environment("FrozenLake-v1"))
        .training(
            learner_class=PPOTorchLearnerWithCuriosity,
            learner_config_dict={"intrinsic_reward_coeff": 0.05, "forward_loss_weight": 0.3},
        )
        .rl_module(rl_module_spec=spec)
    )
    algo = config.build_algo()
    learner = algo.learner_group.learner
    assert learner.module["_intrinsic_curiosity_model"].config.forward_loss_weight == 0.3
    result = algo.train()
    assert "_intrinsic_curiosity_model" in result["learners"]  # trained in the same update
    assert algo.env_runner.module_ids == [DEFAULT_MODULE_ID]  # learner-only: not sampled
    algo.stop()
    with pytest.raises(KeyError, match="forward_loss_weight"):
        small(PPOConfig().environment("FrozenLake-v1")).training(
            learner_class=PPOTorchLearnerWithCuriosity,
            learner_config_dict={"intrinsic_reward_coeff": 0.05},
        ).rl_module(rl_module_spec=spec).build_algo()


# ---------------------------------------------------------------------- clip_rewards
# What clipping does to sampled batches and metrics: tests/env/test_reward_clipping.py.
def test_clip_rewards_is_an_environment_setting_checked_and_stored_as_json():
    from rlmod.algorithms.bc import BCConfig

    assert PPOConfig().clip_rewards is None
    for value in (True, False, 0.5, 2):
        config = PPOConfig().environment(clip_rewards=value)
        back = PPOConfig.from_dict(config.to_dict())
        assert back.clip_rewards == value and type(back.clip_rewards) is type(config.clip_rewards)
    pair = PPOConfig().environment(clip_rewards=[-1, 2])
    assert pair.clip_rewards == (-1.0, 2.0)
    assert PPOConfig.from_dict(pair.to_dict()).clip_rewards == (-1.0, 2.0)  # JSON: a list
    with pytest.raises(ValueError, match=r"clip_rewards=-1.0 .*must be > 0"):
        PPOConfig().environment(clip_rewards=-1.0)
    with pytest.raises(ValueError, match="None or False turns clipping off"):
        PPOConfig().environment(clip_rewards=0)
    with pytest.raises(TypeError, match="clip_rewards='sign' is of the wrong kind"):
        PPOConfig().environment(clip_rewards="sign")
    with pytest.raises(ValueError, match="low < high"):
        PPOConfig().environment(clip_rewards=(1.0, -1.0))
    with pytest.raises(ValueError, match="clip_rewards=True clips what EnvRunners sample"):
        BCConfig().environment(clip_rewards=True).validate()
