"""RLlib's `AlgorithmConfig.experimental()` options (ray 2.60) and what rlmod does with each.

Used by `AlgorithmConfig.experimental`. rlmod stores none of them: each option is either
already what rlmod does, one that RLlib's new API stack never reads either (old-stack
Policy, ModelV2 and TensorFlow flags), or refused with what to use instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlmod.utils.naming import did_you_mean

OLD_STACK_FLAGS: dict[str, str] = {
    "_tf_policy_handles_more_than_one_loss": "TensorFlow policies (rlmod is PyTorch only)",
    "_disable_preprocessor_api": (
        "ModelV2 preprocessors (observations go through env-to-module connectors only)"
    ),
    "_disable_action_flattening": (
        "the old sample collectors (actions are stored as the module outputs them)"
    ),
    "_disable_initialize_loss_from_dummy_batch": (
        "the old Policy's dummy-batch loss (no loss runs before the first real batch)"
    ),
}
"""Flags RLlib's new API stack accepts and never reads (only its old stack's Policy, ModelV2
and sample collectors did), so they change nothing there or in rlmod: any bool is accepted.
Value: what the flag was for."""

ALREADY: dict[str, tuple[Any, ...]] = {
    "_use_msgpack_checkpoints": (True, False),
    "_validate_config": (True,),
    "_torch_grad_scaler_class": (None,),
    "_torch_lr_scheduler_classes": (None,),
}
"""Options accepted with the values that ask for what rlmod does anyway: checkpoints
without pickle (JSON + safetensors, whichever msgpack choice), validation, no custom loss
scaler or torch LR scheduler. Other values are refused with `REFUSED`'s reason."""

REFUSED: dict[str, str] = {
    "_validate_config": (
        "rlmod's validate() cannot be turned off: it refuses only settings that would "
        "hang train(), fail later or be silently ignored. Fix the setting its error names."
    ),
    "_torch_grad_scaler_class": (
        "rlmod's Learners take no loss-scaler class; .learners(mixed_precision='float16') "
        "(CUDA) runs forward passes and losses under autocast with dynamic loss scaling "
        "(torch GradScaler's), and mixed_precision='bfloat16' needs no scaling."
    ),
    "_torch_lr_scheduler_classes": (
        "rlmod's Learners take no torch LR-scheduler classes; .training(lr=[[0, 1e-3], "
        "[1_000_000, 1e-5]]) is a piecewise-linear schedule over env steps (RLlib's lr "
        "schedule form), and a Learner's optimizer_groups() gives each optimizer its own."
    ),
}

OLD_SWITCHES = ("_enable_new_api_stack", "_enable_rl_module_api", "_enable_learner_api")
"""Older RLlib's experimental switches to its new API stack (ray 2.60 refuses them too)."""

VALID = sorted({*OLD_STACK_FLAGS, *ALREADY})


def check_experimental(options: Mapping[str, Any]) -> None:
    """Raises for any option of `config.experimental(**options)` rlmod cannot honour
    (TypeError for an unknown name or a non-bool flag, ValueError for a value refused)."""
    for name, value in options.items():
        if name in OLD_SWITCHES:
            raise TypeError(
                f".experimental({name}=...) was older RLlib's switch to its new API stack; "
                "ray 2.60 takes .api_stack(enable_rl_module_and_learner=True, "
                "enable_env_runner_and_connector_v2=True) instead, and that stack is the only "
                "one rlmod has: drop the argument."
            )
        if name not in VALID:
            raise TypeError(
                f".experimental() got an unexpected keyword argument {name!r}."
                f"{did_you_mean(name, VALID)} Valid: {VALID}."
            )
        if name in OLD_STACK_FLAGS or ALREADY[name] == (True, False):
            if not isinstance(value, bool):
                raise TypeError(f".experimental({name}={value!r}): expected True or False.")
            continue
        if not any(value is ok for ok in ALREADY[name]):
            raise ValueError(f".experimental({name}={value!r}): {REFUSED[name]}")
