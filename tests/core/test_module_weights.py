"""Tests of numpy_weights (rlmod/core/module_weights.py): stacked groups copied whole give
exactly what copying each module's state gives, copies, not views of the weights (views
when asked), and pickled as one buffer per stacked parameter."""

from __future__ import annotations

import pickle

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
    multi = MultiRLModule(
        {
            f"p{i}": DefaultPPORLModule(
                observation_space=BOX, action_space=TWO, model_config={"fcnet_hiddens": [8, 8]}
            )
            for i in range(n - 1)
        }
    )
    multi.add_module(
        f"p{n - 1}",
        DefaultPPORLModule(  # a module alone
            observation_space=BOX, action_space=TWO, model_config={"fcnet_hiddens": [3]}
        ),
    )
    multi.__dict__["groups"] = find_stack_groups(multi)  # held, as a Learner holds them
    assert len(multi.__dict__["groups"]) == 1
    return multi


def _plain(multi: MultiRLModule, ids: list[str], inference_only: bool) -> dict:
    return {
        m: {
            k: v.detach().numpy().copy()
            for k, v in multi[m].get_state(inference_only=inference_only).items()
        }
        for m in ids
    }


@pytest.mark.parametrize("inference_only", [False, True])
@pytest.mark.parametrize("ids", [["p0", "p1", "p2", "p3", "p4", "p5"], ["p4", "p2", "p5"], ["p1"]])
def test_same_names_order_and_values_as_per_module_copies(
    inference_only: bool, ids: list[str]
) -> None:
    multi = _multi()
    got, want = (
        numpy_weights(multi, ids, inference_only=inference_only),
        _plain(multi, ids, inference_only),
    )
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
        multi["p0"].load_state_dict(
            {k: v.clone() + 1 for k, v in multi["p0"].state_dict().items()}, assign=True
        )
    ids = [f"p{i}" for i in range(5)]
    got, want = numpy_weights(multi, ids), _plain(multi, ids, False)
    for m in want:
        for k in want[m]:
            np.testing.assert_array_equal(got[m][k], want[m][k])


def test_views_without_copy_share_the_live_weights() -> None:
    multi = _multi()
    ids = [f"p{i}" for i in range(6)]
    got, want = numpy_weights(multi, ids, copy=False), _plain(multi, ids, False)
    for m in want:
        for k in want[m]:
            np.testing.assert_array_equal(got[m][k], want[m][k])
    with torch.no_grad():
        for p in multi.parameters():
            p.add_(1.0)
    for m in ("p1", "p5"):  # stacked and alone: both views
        for k in want[m]:
            np.testing.assert_array_equal(got[m][k], want[m][k] + 1.0)


@pytest.mark.parametrize(
    "ids",
    [["p0", "p1", "p2", "p3", "p4", "p5"], ["p4", "p2", "p5"], ["p3", "p0", "p4", "p1", "p2"]],
)
def test_pickled_a_whole_group_travels_as_one_buffer_per_name(ids: list[str]) -> None:
    multi = _multi()
    got = numpy_weights(multi, ids, inference_only=True)
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(got, protocol=5, buffer_callback=buffers.append)
    back = pickle.loads(data, buffers=buffers)
    assert type(back) is dict and list(back) == ids
    for m in ids:
        assert list(back[m]) == list(got[m])
        for k in got[m]:
            np.testing.assert_array_equal(back[m][k], got[m][k])
    names = len(got[ids[0]])
    whole = {"p0", "p1", "p2", "p3", "p4"} <= set(ids)  # the stacked group p0..p4
    rows = sum(len(got[m]) for m in ids if m != "p5")
    alone = len(got["p5"]) if "p5" in ids else 0
    assert len(buffers) == (names if whole else rows) + alone


def test_a_replaced_entry_is_pickled_as_it_is_now() -> None:
    multi = _multi()
    ids = [f"p{i}" for i in range(5)]
    got = numpy_weights(multi, ids)
    got["p2"] = {k: v + 5.0 for k, v in got["p2"].items()}
    back = pickle.loads(pickle.dumps(got, protocol=5))
    for m in ids:
        for k in got[m]:
            np.testing.assert_array_equal(back[m][k], got[m][k])
