"""MultiRLModule / MultiRLModuleSpec / RLModuleSpec API as RLlib's unit tests for specs
and multi-modules exercise it (rewritten, not copied): custom MultiRLModule classes with a
shared encoder, from_module, add/remove, as_multi_rl_module, update, dict round trips."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmod.algorithms.ppo import DefaultPPORLModule
from rlmod.core import (
    DEFAULT_MODULE_ID,
    Columns,
    MultiRLModule,
    MultiRLModuleSpec,
    RLModuleSpec,
    TorchRLModule,
)
from rlmod.errors import UnknownModuleIDError

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
TWO = gym.spaces.Discrete(2)
ENCODER = "shared_encoder"


class Encoder(TorchRLModule):
    def setup(self):
        self.net = nn.Linear(self.observation_space.shape[0], self.model_config["embedding_dim"])

    def _forward(self, batch, **kwargs):
        return {Columns.EMBEDDINGS: self.net(batch[Columns.OBS])}


class HeadAfterEncoder(TorchRLModule):
    def setup(self):
        self.head = nn.Linear(self.model_config["embedding_dim"], self.action_space.n)

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.head(batch[Columns.EMBEDDINGS])}


class SharedEncoderModule(MultiRLModule):
    """As RLlib's VPGMultiRLModuleWithSharedEncoder: setup() finds the encoder among
    the built modules, _forward_train sends each policy's batch through it."""

    def setup(self):
        super().setup()
        self.encoder = self[ENCODER]

    def _forward_train(self, batch, **kwargs):
        out = {}
        for mid, cols in batch.items():
            if mid == ENCODER:
                continue
            embedded = {**cols, **self.encoder.forward_train(cols)}
            out[mid] = self[mid].forward_train(embedded)
        return out


def shared_encoder_spec() -> MultiRLModuleSpec:
    head = {"embedding_dim": 8}
    return MultiRLModuleSpec(
        multi_rl_module_class=SharedEncoderModule,
        rl_module_specs={
            ENCODER: RLModuleSpec(
                module_class=Encoder,
                observation_space=BOX4,
                action_space=TWO,
                model_config={"embedding_dim": 8},
            ),
            "p0": RLModuleSpec(
                module_class=HeadAfterEncoder,
                observation_space=BOX4,
                action_space=TWO,
                model_config=head,
            ),
            "p1": RLModuleSpec(
                module_class=HeadAfterEncoder,
                observation_space=BOX4,
                action_space=TWO,
                model_config=head,
            ),
        },
    )


def ppo_spec(**kw) -> RLModuleSpec:
    return RLModuleSpec(
        module_class=DefaultPPORLModule, observation_space=BOX4, action_space=TWO, **kw
    )


def test_custom_multi_rl_module_class_builds_and_shares_its_encoder():
    module = shared_encoder_spec().build()
    assert type(module) is SharedEncoderModule and module.encoder is module[ENCODER]
    obs = {Columns.OBS: torch.randn(5, 4)}
    out = module.forward_train({"p0": dict(obs), "p1": dict(obs)})
    assert out["p0"][Columns.ACTION_DIST_INPUTS].shape == (5, 2)
    out["p0"][Columns.ACTION_DIST_INPUTS].sum().backward()
    assert module.encoder.net.weight.grad is not None  # the gradient reaches the shared part


def test_spec_build_with_a_module_id_builds_that_module_only():
    assert isinstance(shared_encoder_spec().build("p0"), HeadAfterEncoder)


def test_multi_rl_module_from_specs_and_inference_only_propagates():
    module = MultiRLModule(rl_module_specs={"a": ppo_spec(), "b": ppo_spec()}, inference_only=True)
    assert module.inference_only and all(module[m].inference_only for m in ("a", "b"))
    assert not hasattr(module["a"], "vf")
    assert not MultiRLModule(rl_module_specs={"a": ppo_spec()}).inference_only


def test_multi_spec_inference_only_defaults_to_all_sub_specs():
    assert MultiRLModuleSpec(rl_module_specs={"a": ppo_spec(inference_only=True)}).inference_only
    assert not MultiRLModuleSpec(
        rl_module_specs={"a": ppo_spec(inference_only=True), "b": ppo_spec()}
    ).inference_only


def test_get_spec_from_module_round_trips_class_spaces_and_model_config():
    module = shared_encoder_spec().build()
    spec = MultiRLModuleSpec.from_module(module)
    assert spec.multi_rl_module_class is SharedEncoderModule
    assert spec.rl_module_specs["p0"].model_config == {"embedding_dim": 8}
    rebuilt = spec.build()
    assert type(rebuilt) is SharedEncoderModule and set(rebuilt.keys()) == set(module.keys())
    single = RLModuleSpec.from_module(module["p0"])
    assert single.module_class is HeadAfterEncoder and single.observation_space == BOX4


def test_as_multi_rl_module_wraps_under_default_policy():
    module = ppo_spec().build()
    multi = module.as_multi_rl_module()
    assert isinstance(multi, MultiRLModule) and list(multi.keys()) == [DEFAULT_MODULE_ID]
    assert multi[DEFAULT_MODULE_ID] is module  # rlmod keeps the very module (weights)
    assert multi.as_multi_rl_module() is multi
    assert ppo_spec().as_multi_rl_module_spec().rl_module_specs[DEFAULT_MODULE_ID] == ppo_spec()


def test_add_module_refuses_a_duplicate_id_unless_override():
    multi = MultiRLModule(rl_module_specs={"a": ppo_spec()})
    other = ppo_spec().build()
    with pytest.raises(ValueError, match="already exists"):
        multi.add_module("a", other)
    multi.add_module("a", other, override=True)
    assert multi["a"] is other
    multi.add_module("b", ppo_spec().build())
    assert set(multi.keys()) == {"a", "b"} and set(multi.rl_module_specs) == {"a", "b"}


def test_remove_module_raises_for_unknown_ids_unless_told_not_to():
    multi = MultiRLModule(rl_module_specs={"a": ppo_spec(), "b": ppo_spec()})
    multi.remove_module("a")
    assert list(multi.keys()) == ["b"] and "a" not in multi.rl_module_specs
    with pytest.raises(KeyError):  # UnknownModuleIDError is a KeyError, as RLlib's
        multi.remove_module("a")
    multi.remove_module("a", raise_err_if_not_found=False)
    assert multi.get("a") is None and multi.get("b") is multi["b"]


def test_multi_spec_update_with_a_single_spec_fills_unset_fields_of_every_sub_spec():
    multi = MultiRLModuleSpec(
        rl_module_specs={"a": RLModuleSpec(), "b": RLModuleSpec(module_class=Encoder)}
    )
    multi.update(ppo_spec(model_config={"x": 1}))
    assert multi["a"].module_class is DefaultPPORLModule and multi["a"].model_config == {"x": 1}
    assert multi["b"].module_class is Encoder  # set: kept (override=False for sub-specs)


def test_multi_spec_update_with_a_multi_spec_adds_or_replaces():
    multi = MultiRLModuleSpec(rl_module_specs={"a": ppo_spec(model_config={"x": 1})})
    multi.update(
        MultiRLModuleSpec(
            rl_module_specs={"a": RLModuleSpec(model_config={"y": 2}), "b": ppo_spec()}
        )
    )
    assert set(multi.rl_module_specs) == {"a", "b"}
    assert multi["a"].model_config == {"y": 2}  # updated in place: replaced, not merged
    assert multi["a"].module_class is DefaultPPORLModule
    multi.update(MultiRLModuleSpec(rl_module_specs={"a": RLModuleSpec()}), override=True)
    assert multi["a"].module_class is None  # replaced whole


def test_multi_spec_dict_round_trip_keeps_class_and_shared_fields():
    spec = MultiRLModuleSpec(
        observation_space=BOX4,
        model_config={"shared": 3},
        rl_module_specs={"a": ppo_spec(), "b": ppo_spec(learner_only=True)},
    )
    back = MultiRLModuleSpec.from_dict(spec.to_dict())
    assert back == spec
    assert set(spec.to_dict()) == {
        "multi_rl_module_class",
        "observation_space",
        "action_space",
        "inference_only",
        "model_config",
        "rl_module_specs",
    }


def test_multi_spec_of_a_local_class_names_the_missing_import_path():
    class Local(MultiRLModule):
        pass

    with pytest.raises(ValueError, match="multi_rl_module_class"):
        MultiRLModuleSpec(multi_rl_module_class=Local, rl_module_specs={}).to_dict()


def test_unknown_module_id_names_the_known_ones():
    with pytest.raises(UnknownModuleIDError, match="p0"):
        shared_encoder_spec().build()["p2"]
