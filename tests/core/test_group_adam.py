"""GroupAdam: one Adam per module of a stacked group, bit-identical to separate Adams."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmod.core.optim import Adam, GroupAdam
from rlmod.errors import CheckpointError


def test_group_adam_equals_one_adam_per_module_bit_for_bit() -> None:
    torch.manual_seed(0)
    shapes = [(3, 5, 4), (3, 5)]  # [M, ...]: 3 modules
    stacked = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    own = [[torch.nn.Parameter(p.detach()[i].clone()) for p in stacked] for i in range(3)]
    lrs = [1e-3, 5e-2, 1e-3]  # module 1 has an lr override
    group = GroupAdam(stacked, lrs=lrs)
    singles = [Adam(own[i], lr=lrs[i]) for i in range(3)]
    # step 2 skips module 2 (a non-finite minibatch): its step count falls behind
    masks = [[True, True, True], [True, True, False], [True, True, True], [False, True, True]]
    for mask in masks:
        grads = [torch.randn(s) for s in shapes]
        for p, g in zip(stacked, grads, strict=True):
            p.grad = g.clone()
        group.step(np.array(mask))
        for i in range(3):
            if mask[i]:
                for p, g in zip(own[i], grads, strict=True):
                    p.grad = g[i].clone()
                singles[i].step()
    for i in range(3):
        assert group.steps[i] == singles[i].step_count
        slot = group.slot(i, own[i])
        for a, b in zip(slot.exp_avg_sq, singles[i].exp_avg_sq, strict=True):
            assert torch.equal(a, b)
        for p, q in zip(stacked, own[i], strict=True):
            assert torch.equal(p.detach()[i], q.detach())


def test_adam_slot_state_dict_round_trips_and_matches_adam_format() -> None:
    params = [torch.nn.Parameter(torch.zeros(2, 3))]
    group = GroupAdam(params, lrs=[0.1, 0.2])
    params[0].grad = torch.ones(2, 3)
    group.step(np.array([True, False]))
    views = [torch.nn.Parameter(params[0].detach()[0])]
    slot = group.slot(0, views)
    state = slot.state_dict()
    assert state.keys() == Adam(views, lr=0.1).state_dict().keys()
    assert state["step"] == 1 and state["lr"] == 0.1
    other = group.slot(1, [torch.nn.Parameter(params[0].detach()[1])])
    other.load_state_dict(state)
    assert group.steps.tolist() == [1, 1]
    assert torch.equal(group.exp_avg[0][1], group.exp_avg[0][0])
    other.param_groups[0]["lr"] = 0.5  # schedules write here
    assert group.lrs[1] == 0.5 and other.param_groups[0]["lr"] == 0.5
    with pytest.raises(CheckpointError, match="saved for another module"):
        other.load_state_dict({**state, "exp_avg": [], "exp_avg_sq": []})


def test_group_adam_with_gradient_pieces_equals_one_gradient_tensor() -> None:
    """A Learner's row buckets leave each parameter's gradient in pieces (one tensor per
    bucket); stepping with them is bit-identical to stepping with the whole gradient,
    also where a run of equal lr crosses a piece's edge."""
    torch.manual_seed(0)
    shapes = [(5, 4, 3), (5, 3)]
    a = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    lrs = [1e-3, 1e-3, 1e-3, 5e-2, 1e-3]
    whole, pieces = GroupAdam(a, lrs=lrs), GroupAdam(b, lrs=lrs)
    for mask in ([True] * 5, [True, False, True, True, True]):
        grads = [torch.randn(s) for s in shapes]
        for p, g in zip(a, grads, strict=True):
            p.grad = g.clone()
        whole.step(np.array(mask))
        pieces.step(np.array(mask), [[(0, g[:2].clone()), (2, g[2:].clone())] for g in grads])
    for p, q in zip(a, b, strict=True):
        assert torch.equal(p, q)
    for s, t in zip(whole.exp_avg_sq, pieces.exp_avg_sq, strict=True):
        assert torch.equal(s, t)
    assert whole.steps.tolist() == pieces.steps.tolist() == [2, 1, 2, 2, 2]
