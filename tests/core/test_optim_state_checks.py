"""A stored Adam state is checked against its parameters before any of it is loaded, by the
one check `Adam`, `AdamSlot` and `OptimizerStates` share (issue 30, item 6): a `[1]`
moment was broadcast into a `(16, 4)` one, NaN, negative or overflowing moments made every
later step NaN, and a short second-moment list failed after the first moments were loaded."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from rlmod.core.optim import Adam, GroupAdam, OptimizerStates
from rlmod.errors import CheckpointError


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))


def _trained_adam() -> Adam:
    """Adam of one Linear(4, 16) (parameters (16, 4) and (16,), as `_slot`'s), stepped."""
    torch.manual_seed(0)
    net = nn.Linear(4, 16)
    opt = Adam(net.parameters(), lr=1e-3)
    for _ in range(3):
        net(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    return opt


def _slot() -> Any:
    """Module 1's AdamSlot of a two-module GroupAdam, stepped (its moments are not 0)."""
    stacked = [nn.Parameter(torch.randn(2, 16, 4)), nn.Parameter(torch.randn(2, 16))]
    group = GroupAdam(stacked, lrs=[1e-3, 1e-3])
    for p in stacked:
        p.grad = torch.randn_like(p)
    group.step(np.array([True, True]))
    return group.slot(1, [nn.Parameter(p.detach()[1]) for p in stacked])


def _snapshot(opt: Any) -> tuple[int, float, list[torch.Tensor]]:
    return (
        opt.step_count,
        opt.param_groups[0]["lr"],
        [t.clone() for t in opt.exp_avg + opt.exp_avg_sq],
    )


def _assert_unchanged(opt: Any, before: tuple[int, float, list[torch.Tensor]]) -> None:
    step, lr, moments = before
    assert opt.step_count == step and opt.param_groups[0]["lr"] == lr
    for a, b in zip(opt.exp_avg + opt.exp_avg_sq, moments, strict=True):
        assert torch.equal(a, b)


def test_a_moment_of_one_element_is_not_broadcast_into_its_parameter() -> None:
    """The issue's case: exp_avg[0] of a (16, 4) weight stored as [1]."""
    opt = _trained_adam()
    state = opt.state_dict()
    state["exp_avg"][0] = torch.tensor([0.5])
    before = _snapshot(opt)
    with pytest.raises(
        CheckpointError,
        match=r"exp_avg\[0\] \(parameter 0\) has shape \(1,\), "
        r"the parameter \(16, 4\)",
    ):
        opt.load_state_dict(state)
    _assert_unchanged(opt, before)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        state[key] = value

    return edit


def _moment(
    key: str, index: int, make: Callable[[torch.Tensor], Any]
) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        state[key] = list(state[key])
        state[key][index] = make(state[key][index])

    return edit


BAD_STATES = [
    ("step-negative", _set("step", -1), r"step=-1 must be an int >= 0"),
    ("step-float", _set("step", 2.5), r"step=2.5 must be an int >= 0"),
    ("step-text", _set("step", "3"), r"step='3' must be an int >= 0"),
    ("lr-nan", _set("lr", float("nan")), r"lr=nan must be a finite number >= 0"),
    ("lr-inf", _set("lr", float("inf")), r"lr=inf must be a finite number >= 0"),
    ("lr-negative", _set("lr", -1e-3), r"lr=-0.001 must be a finite number >= 0"),
    ("lr-text", _set("lr", "abc"), r"lr='abc' must be a finite number >= 0"),
    ("missing-key", lambda s: s.pop("exp_avg_sq"), r"lacks \['exp_avg_sq'\]"),
    ("moment-not-a-list", _set("exp_avg", {"0": 1}), r"exp_avg is a dict, not a list"),
    (
        "short-second-moments",
        lambda s: s.update(exp_avg_sq=s["exp_avg_sq"][:1]),
        r"has 1 tensors for 2 parameters in exp_avg_sq",
    ),
    (
        "moment-shape",
        _moment("exp_avg_sq", 1, lambda t: t[:1]),
        r"exp_avg_sq\[1\] \(parameter 1\) has shape \(1,\), the parameter \(16,\)",
    ),
    (
        "moment-transposed",
        _moment("exp_avg", 0, lambda t: t.T.contiguous()),
        r"exp_avg\[0\] \(parameter 0\) has shape \(4, 16\), the parameter \(16, 4\)",
    ),
    (
        "moment-nan",
        _moment("exp_avg", 1, lambda t: torch.full_like(t, float("nan"))),
        r"exp_avg\[1\] \(parameter 1\) holds NaN or inf",
    ),
    (
        "moment-overflows-float32",
        _moment("exp_avg", 1, lambda t: t.double() + 1e300),
        r"exp_avg\[1\] \(parameter 1\) holds NaN or inf \(in torch.float32\)",
    ),
    (
        "second-moment-negative",
        _moment("exp_avg_sq", 0, lambda t: -t - 1),
        r"exp_avg_sq\[0\] \(parameter 0\) holds negative values",
    ),
    (
        "moment-int",
        _moment("exp_avg", 0, lambda t: t.to(torch.int64)),
        r"exp_avg\[0\] \(parameter 0\) is a torch.int64 tensor, not a float tensor",
    ),
    (
        "moment-list",
        _moment("exp_avg", 0, lambda t: t.tolist()),
        r"exp_avg\[0\] \(parameter 0\) is a list, not a float tensor",
    ),
]


@pytest.mark.parametrize("kind", ["Adam", "AdamSlot"])
@pytest.mark.parametrize("name, edit, message", BAD_STATES, ids=[c[0] for c in BAD_STATES])
def test_a_bad_state_is_refused_and_changes_nothing(
    kind: str, name: str, edit: Any, message: str
) -> None:
    opt = _trained_adam() if kind == "Adam" else _slot()
    state = copy.deepcopy(opt.state_dict())
    edit(state)
    before = _snapshot(opt)
    with pytest.raises(CheckpointError, match=message):
        opt.load_state_dict(state)
    _assert_unchanged(opt, before)


@pytest.mark.parametrize("kind", ["Adam", "AdamSlot"])
def test_a_good_state_still_loads_into_either_kind(kind: str) -> None:
    source = _slot()
    target = (
        Adam([nn.Parameter(p.detach().clone()) for p in source.params], lr=0.5)
        if kind == "Adam"
        else _slot()
    )
    state = source.state_dict()
    state["exp_avg"] = [t.numpy() for t in state["exp_avg"]]  # numpy, as from other sources
    target.load_state_dict(state)
    assert target.step_count == source.step_count
    for a, b in zip(
        target.exp_avg + target.exp_avg_sq, source.exp_avg + source.exp_avg_sq, strict=True
    ):
        assert torch.equal(a, b)


def test_errors_name_the_parameter_when_the_optimizer_knows_its_name() -> None:
    net = _net()
    opt = Adam(net.parameters(), lr=1e-3, names=[n for n, _ in net.named_parameters()])
    state = opt.state_dict()
    state["exp_avg"][2] = torch.zeros(1)
    with pytest.raises(
        CheckpointError,
        match=r"exp_avg\[2\] \(parameter '2.weight'\) has "
        r"shape \(1,\), the parameter \(2, 16\)",
    ):
        opt.load_state_dict(state)


def test_optimizer_states_check_every_module_before_loading_any() -> None:
    """A bad state of module 'b' leaves module 'a' as it was, and names 'b'."""
    a, b = _trained_adam(), _trained_adam()
    states = OptimizerStates({"a": a, "b": b})
    saved = copy.deepcopy(states.get_state())
    saved["a"]["step"] = 99
    saved["b"]["exp_avg"][0] = torch.tensor([1.0])
    before = _snapshot(a)
    with pytest.raises(CheckpointError, match=r"Optimizer state of module 'b': exp_avg\[0\]"):
        states.set_state(saved)
    _assert_unchanged(a, before)
