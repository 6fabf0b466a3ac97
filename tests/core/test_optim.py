"""Tests of rlmod's own Adam and gradient norm (rlmod/core/optim.py) against torch's."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rlmod.core.optim import Adam, grad_norm
from rlmod.errors import CheckpointError


def small_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))


def loss_of(net: nn.Module, step: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(step)
    x, y = torch.randn(32, 5, generator=gen), torch.randn(32, 3, generator=gen)
    return (net(x) - y).pow(2).mean()


@pytest.mark.parametrize("lr, betas, eps", [(1e-2, (0.9, 0.999), 1e-8), (3e-3, (0.8, 0.99), 1e-5)])
def test_adam_matches_torch_adam_over_20_steps(lr, betas, eps):
    ours_net = small_net()
    ref_net = copy.deepcopy(ours_net)
    ours = Adam(ours_net.parameters(), lr=lr, betas=betas, eps=eps)
    ref = torch.optim.Adam(ref_net.parameters(), lr=lr, betas=betas, eps=eps)
    for step in range(20):
        for net, opt in ((ours_net, ours), (ref_net, ref)):
            opt.zero_grad()
            loss_of(net, step).backward()
            opt.step()
    for (name, p), q in zip(ours_net.named_parameters(), ref_net.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert ours.step_count == 20
    first = next(iter(ref_net.parameters()))
    torch.testing.assert_close(ours.exp_avg[0], ref.state[first]["exp_avg"])
    torch.testing.assert_close(ours.exp_avg_sq[0], ref.state[first]["exp_avg_sq"])


def test_adam_reads_lr_from_param_groups_each_step():
    ours_net = small_net()
    ref_net = copy.deepcopy(ours_net)
    ours = Adam(ours_net.parameters(), lr=1e-2)
    ref = torch.optim.Adam(ref_net.parameters(), lr=1e-2)
    for step in range(6):
        for net, opt in ((ours_net, ours), (ref_net, ref)):
            opt.param_groups[0]["lr"] = 1e-2 / (step + 1)  # what a schedule does
            opt.zero_grad()
            loss_of(net, step).backward()
            opt.step()
    for p, q in zip(ours_net.parameters(), ref_net.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_adam_skips_parameters_without_gradients():
    net = small_net()
    frozen = net[2].weight.detach().clone()
    opt = Adam(net.parameters(), lr=0.1)
    net(torch.randn(4, 5)).sum().backward()
    net[2].weight.grad = None
    opt.step()
    assert torch.equal(net[2].weight, frozen)


def test_adam_state_round_trip_and_wrong_module():
    net = small_net()
    opt = Adam(net.parameters(), lr=1e-3)
    loss_of(net, 0).backward()
    opt.step()
    other = Adam(small_net().parameters(), lr=5.0)
    other.load_state_dict(opt.state_dict())
    assert other.step_count == 1 and other.param_groups[0]["lr"] == 1e-3
    for a, b in zip(other.exp_avg, opt.exp_avg, strict=True):
        assert torch.equal(a, b)
    with pytest.raises(CheckpointError, match="Optimizer state has 4 tensors for 2 parameters"):
        Adam(nn.Linear(2, 2).parameters(), lr=1e-3).load_state_dict(opt.state_dict())


def test_adam_is_bit_identical_to_torch_fused_adam():
    # The same kernel torch.optim.Adam(fused=True) runs: equal to the last bit.
    ours_net = small_net()
    ref_net = copy.deepcopy(ours_net)
    ours = Adam(ours_net.parameters(), lr=3e-3)
    ref = torch.optim.Adam(ref_net.parameters(), lr=3e-3, fused=True)
    for step in range(10):
        for net, opt in ((ours_net, ours), (ref_net, ref)):
            opt.zero_grad()
            loss_of(net, step).backward()
            opt.step()
    for p, q in zip(ours_net.parameters(), ref_net.parameters(), strict=True):
        assert torch.equal(p, q)


def test_grad_norm_matches_torch_and_leaves_gradients_alone():
    net = small_net()
    loss_of(net, 0).backward()
    net[0].bias.grad = None  # a parameter without a gradient is skipped
    before = [None if p.grad is None else p.grad.clone() for p in net.parameters()]
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    torch.testing.assert_close(
        grad_norm(list(net.parameters())), torch.nn.utils.get_total_norm(grads)
    )
    for p, g in zip(net.parameters(), before, strict=True):
        assert (p.grad is None and g is None) or torch.equal(p.grad, g)
    assert float(grad_norm(list(small_net().parameters()))) == 0.0


def test_moments_of_parameters_without_gradient_never_become_denormal() -> None:
    """A dead unit's first moment shrinks by beta1 per step; unflushed it would pass
    through float32's denormal range (slow on x86) around step 800."""
    param = torch.nn.Parameter(torch.ones(64))
    opt = Adam([param], lr=1e-3)
    param.grad = torch.full((64,), 1e-3)
    opt.step()
    tiny = torch.finfo(torch.float32).tiny
    for _ in range(1200):
        param.grad = torch.zeros(64)
        opt.step()
        for t in (opt.exp_avg[0], opt.exp_avg_sq[0]):
            assert not ((t != 0) & (t.abs() < tiny)).any(), opt.step_count
    assert float(opt.exp_avg[0].abs().max()) == 0.0  # flushed, not denormal
