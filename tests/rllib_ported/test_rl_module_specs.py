"""RLlib's `rllib/core/rl_module/tests/test_rl_module_specs.py` (checked against ray 2.60.0
and the version in RLlib's repository, see port.py: all 7 pass on rlmod), as rlmod's own
tests of the same behaviour, one per RLlib test and named alike."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.core import MultiRLModule, MultiRLModuleSpec, RLModuleSpec
from rlmod.testing.vpg import (
    SHARED_ENCODER_ID,
    SharedEncoder,
    VPGMultiRLModuleWithSharedEncoder,
    VPGPolicyAfterSharedEncoder,
    VPGTorchRLModule,
)

CARTPOLE = gym.make("CartPole-v1")
OBS, ACT = CARTPOLE.observation_space, CARTPOLE.action_space


def _vpg(hidden: int | str = 32, obs: object = OBS) -> RLModuleSpec:
    return RLModuleSpec(
        module_class=VPGTorchRLModule,
        observation_space=obs,  # type: ignore[arg-type]
        action_space=ACT,
        model_config={"hidden_dim": hidden} if isinstance(hidden, int) else hidden,  # type: ignore[arg-type]
    )


def test_single_agent_spec() -> None:
    module = _vpg(64).build()
    assert isinstance(module, VPGTorchRLModule)
    assert module._policy_net[0].out_features == 64


def test_multi_agent_spec() -> None:
    multi = MultiRLModuleSpec(rl_module_specs={f"m{i}": _vpg(16 * (i + 1)) for i in range(2)})
    module = multi.build()
    assert isinstance(module, MultiRLModule)
    assert [module[m]._policy_net[0].out_features for m in ("m0", "m1")] == [16, 32]


def test_customized_multi_agent_module() -> None:
    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    two = gym.spaces.Discrete(2)
    head = {"embedding_dim": 10, "hidden_dim": 20}
    module = MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
        rl_module_specs={
            SHARED_ENCODER_ID: RLModuleSpec(
                SharedEncoder, box, two, model_config={"embedding_dim": 10}
            ),
            "agent_1": RLModuleSpec(VPGPolicyAfterSharedEncoder, box, two, model_config=head),
            "agent_2": RLModuleSpec(VPGPolicyAfterSharedEncoder, box, two, model_config=head),
        },
    ).build()
    assert isinstance(module, VPGMultiRLModuleWithSharedEncoder)
    import torch

    out = module.forward_inference({"agent_1": {"obs": torch.zeros(3, 4)}})
    assert out["agent_1"]["action_dist_inputs"].shape == (3, 2)  # through the shared encoder


def test_get_spec_from_module_multi_agent() -> None:
    spec = MultiRLModuleSpec(rl_module_specs={f"m{i}": _vpg(16 * (i + 1)) for i in range(2)})
    assert MultiRLModuleSpec.from_module(spec.build()) == spec


def test_get_spec_from_module_single_agent() -> None:
    spec = _vpg(32)
    assert RLModuleSpec.from_module(spec.build()) == spec


def test_update_specs() -> None:
    spec = _vpg("Update me!")
    spec.update(RLModuleSpec(model_config={"hidden_dim": 32}))
    assert spec.model_config == {"hidden_dim": 32}
    assert spec.module_class is VPGTorchRLModule  # fields the other leaves None stay


@pytest.mark.parametrize("override", [True, False])
def test_update_specs_multi_agent(override: bool) -> None:
    old = _vpg("Update me!", obs="Do not update me!")
    new = RLModuleSpec(model_config={"hidden_dim": 32})
    multi = MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder, rl_module_specs={"a1": old}
    )
    multi.update(
        MultiRLModuleSpec(
            multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder, rl_module_specs={"a1": new}
        ),
        override=override,
    )
    if override:  # replaced whole
        assert multi.rl_module_specs["a1"] == new
    else:  # merged: what the new one leaves None stays
        assert multi.rl_module_specs["a1"].observation_space == "Do not update me!"
    multi.update(
        MultiRLModuleSpec(
            multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
            rl_module_specs={"a2": _vpg("I'm new!")},
        )
    )
    assert multi.rl_module_specs["a2"].model_config == "I'm new!"
