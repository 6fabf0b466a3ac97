"""`AlgorithmConfig.experimental()` (rlmod/algorithms/experimental.py): RLlib's options are
accepted where rlmod honours them, old-stack flags RLlib's new stack never reads are
accepted as bools, the rest refused with rlmod's alternative; nothing is stored."""

from __future__ import annotations

import pytest

from rlmod.algorithms.experimental import OLD_STACK_FLAGS
from rlmod.algorithms.ppo import PPOConfig


@pytest.mark.parametrize("flag", sorted(OLD_STACK_FLAGS))
def test_old_stack_flags_take_any_bool_and_change_nothing(flag: str) -> None:
    config = PPOConfig()
    before = config.to_dict()
    assert config.experimental(**{flag: True}).experimental(**{flag: False}) is config
    assert config.to_dict() == before
    with pytest.raises(TypeError, match=f"{flag}='yes'.*True or False"):
        config.experimental(**{flag: "yes"})


def test_options_that_ask_for_what_rlmod_does_are_accepted() -> None:
    config = PPOConfig().experimental(
        _use_msgpack_checkpoints=True,
        _validate_config=True,
        _torch_grad_scaler_class=None,
        _torch_lr_scheduler_classes=None,
    )
    assert config.experimental(_use_msgpack_checkpoints=False) is config
    assert config.to_dict() == PPOConfig().to_dict()
    with pytest.raises(TypeError, match="True or False"):
        config.experimental(_use_msgpack_checkpoints=1)


@pytest.mark.parametrize(
    ("option", "value", "hint"),
    [
        ("_validate_config", False, "cannot be turned off"),
        ("_torch_grad_scaler_class", object, r"mixed_precision='float16'"),
        ("_torch_lr_scheduler_classes", [object], r"training\(lr=\[\[0"),
    ],
)
def test_options_rlmod_cannot_honour_are_refused_with_its_alternative(
    option: str, value: object, hint: str
) -> None:
    with pytest.raises(ValueError, match=f"{option}=.*{hint}"):
        PPOConfig().experimental(**{option: value})


def test_unknown_and_old_options_are_type_errors_naming_the_fix() -> None:
    with pytest.raises(TypeError, match="Did you mean '_validate_config'"):
        PPOConfig().experimental(_validate_confg=True)
    with pytest.raises(TypeError, match=r"api_stack\(enable_rl_module_and_learner"):
        PPOConfig().experimental(_enable_new_api_stack=True)
