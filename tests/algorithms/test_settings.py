"""The settings table (rlmod.algorithms.settings): each setting declared once drives the
setters' keywords and signatures, the defaults, repr and the unknown-name errors."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import pytest

from rlmod.algorithms.algorithm_config import AlgorithmConfig
from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.algorithms.settings import NOT_PROVIDED, Setting

CONFIGS = [PPOConfig, DQNConfig, SACConfig, MARWILConfig, BCConfig]


@pytest.mark.parametrize("cls", CONFIGS)
def test_training_takes_exactly_the_training_settings_of_the_class(cls):
    params = inspect.signature(cls().training).parameters
    expected = {n for n, st in cls.settings().items() if st.section == "training"}
    assert set(params) == expected | {"learner_config_dict"}
    assert all(p.kind is p.KEYWORD_ONLY and p.default is NOT_PROVIDED for p in params.values())


def test_ppo_training_has_rllib_keyword_names_and_sets_them():
    names = set(inspect.signature(PPOConfig.training).parameters)
    for rllib_name in (
        "lambda_",
        "clip_param",
        "vf_clip_param",
        "vf_loss_coeff",
        "entropy_coeff",
        "kl_coeff",
        "kl_target",
        "use_kl_loss",
        "gamma",
        "lr",
        "train_batch_size_per_learner",
        "minibatch_size",
        "num_epochs",
        "grad_clip",
        "learner_class",
    ):
        assert rllib_name in names
    config = PPOConfig().training(lambda_=0.9, lr=1e-3, learner_config_dict={"a": 1})
    assert (config.lambda_, config.lr, config.learner_config_dict) == (0.9, 1e-3, {"a": 1})
    config.training(learner_config_dict={"b": 2})  # updates, as RLlib's does
    assert config.learner_config_dict == {"a": 1, "b": 2}


def test_a_setting_of_another_algorithm_is_refused_with_the_valid_names():
    with pytest.raises(
        TypeError,
        match=r"\.training\(\) got an unexpected keyword argument "
        r"'clip_param'\..*Valid: \[",
    ):
        DQNConfig().training(clip_param=0.1)
    with pytest.raises(TypeError, match=r"\.environment\(\) takes 1 positional"):
        PPOConfig().environment("CartPole-v1", {})


def test_positional_and_aliased_keywords_are_rllibs():
    def on_result(**kwargs: Any) -> None:
        pass

    config = PPOConfig().environment("CartPole-v1").callbacks(None, on_train_result=on_result)
    assert config.env == "CartPole-v1"
    assert config.callbacks_on_train_result is on_result
    sig = inspect.signature(PPOConfig().callbacks)
    assert list(sig.parameters)[0] == "callbacks_class"
    assert "on_train_result" in sig.parameters and "callbacks_on_train_result" not in sig.parameters


@pytest.mark.parametrize("cls", CONFIGS)
def test_repr_of_a_fresh_config_shows_no_changes(cls):
    assert repr(cls()) == f"{cls.__name__}({{}})"


def test_algorithm_defaults_come_from_setting_defaults_and_are_not_shared():
    assert PPOConfig().num_epochs == 30 and AlgorithmConfig().num_epochs == 1
    assert BCConfig().beta == 0.0 and MARWILConfig().beta == 1.0
    a, b = DQNConfig(), DQNConfig()
    a.model_config["fcnet_hiddens"].append(7)
    assert b.model_config["fcnet_hiddens"] == [256, 256]
    assert repr(PPOConfig().training(num_epochs=1)) == "PPOConfig({'num_epochs': 1})"


def test_setting_defaults_are_checked_when_the_class_is_made():
    with pytest.raises(
        TypeError, match="names 'num_epoch', which is not a setting. Did you mean 'num_epochs'?"
    ):

        class Typo(AlgorithmConfig):
            setting_defaults: ClassVar[dict[str, Any]] = {"num_epoch": 3}

    with pytest.raises(ValueError, match="num_epochs=0 is invalid"):

        class Bad(AlgorithmConfig):
            setting_defaults: ClassVar[dict[str, Any]] = {"num_epochs": 0}


def test_a_new_setting_gets_its_setter_keyword_without_a_method():
    class MyConfig(PPOConfig):
        my_coeff = Setting(0.5, section="training", doc="A new loss weight.")

    config = MyConfig().training(my_coeff=0.25, lr=1e-3)
    assert config.my_coeff == 0.25
    assert "my_coeff" in inspect.signature(MyConfig.training).parameters
    assert "A new loss weight." in MyConfig().training.__doc__


def test_a_subclass_setter_that_calls_super_works_as_in_rllib():
    class MyConfig(PPOConfig):
        my_coeff = Setting(0.5, section="training", doc="A new loss weight.")

        def training(self, *, extra=NOT_PROVIDED, **kwargs: Any):
            if extra is not NOT_PROVIDED:
                kwargs["my_coeff"] = extra * 2
            return super().training(**kwargs)

    config = MyConfig().training(extra=0.25, lr=1e-3)
    assert (config.my_coeff, config.lr) == (0.5, 1e-3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'lrr'"):
        MyConfig().training(lrr=1e-3)
