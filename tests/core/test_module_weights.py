"""Tests of numpy_weights (rlmod/core/module_weights.py): stacked groups copied whole give
exactly what copying each module's state gives, and copies, not views of the weights."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule
from rlmod.core import MultiRLModule
from rlmod.core.module_weights import numpy_weights
from rlmod.core.stacked import find_stack_groups

BOX, TWO = gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)


def _multi(n: int = 6) -> MultiRLModule:
    torch.manual_seed(0)
    multi = MultiRLModule({f"p{i}": DefaultPPORLModule(
        observation_space=BOX, action_space=TWO, model_config={"fcnet_hiddens": [8, 8]})
        for i in range(n - 1)})
    multi.add_module(f"p{n - 1}", DefaultPPORLModule(  # a module alone
        observation_space=BOX, action_space=TWO, model_config={"fcnet_hiddens": [3]}))
    find_stack_groups(multi)
    return multi


def _plain(multi: MultiRLModule, ids: list[str], inference_only: bool) -> dict:
    return {m: {k: v.detach().numpy().copy()
                for k, v in multi[m].get_state(inference_only=inference_only).items()}
            for m in ids}


@pytest.mark.parametrize("inference_only", [False, True])
@pytest.mark.parametrize("ids", [["p0", "p1", "p2", "p3", "p4", "p5"], ["p4", "p2", "p5"],
                                 ["p1"]])
def test_same_names_order_and_values_as_per_module_copies(inference_only: bool,
                                                          ids: list[str]) -> None:
    multi = _multi()
    got, want = numpy_weights(multi, ids, inference_only=inference_only), _plain(
        multi, ids, inference_only)
    assert list(got) == list(want)
    for m in want:
        assert list(got[m]) == list(want[m])  # inference-only: no vf_encoder / vf
        for k in want[m]:
            np.testing.assert_array_equal(got[m][k], want[m][k])
    if inference_only:
        assert not any(k.startswith("vf") for s in got.values() for k in s)


def test_copies_do_not_change_with_the_weights() -> None:
    multi = _multi()
    got = numpy_weights(multi, ["p0", "p1", "p2", "p3"])
    before = {k: v.copy() for k, v in got["p1"].items()}
    with torch.no_grad():
        for p in multi.parameters():
            p.add_(1.0)
    for k, v in before.items():
        np.testing.assert_array_equal(got["p1"][k], v)


def test_a_group_whose_modules_left_its_storage_is_copied_per_module() -> None:
    multi = _multi()
    with torch.no_grad():  # p0 gets parameter objects of its own: no view any more
        multi["p0"].load_state_dict({k: v.clone() + 1 for k, v in
                                     multi["p0"].state_dict().items()}, assign=True)
    ids = [f"p{i}" for i in range(5)]
    got, want = numpy_weights(multi, ids), _plain(multi, ids, False)
    for m in want:
        for k in want[m]:
            np.testing.assert_array_equal(got[m][k], want[m][k])
