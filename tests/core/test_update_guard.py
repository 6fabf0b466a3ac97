"""The one guarded step (rlmod/core/update_guard.py) on a module alone (TrainAlone)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.optim import Adam
from rlmod.core.train_alone import TrainAlone
from rlmod.core.update_guard import GRAD_NORM_KEY, NonFiniteGuard
from rlmod.errors import NonFiniteUpdateError


def unit(grad_clip: float | None = None) -> tuple[nn.Module, TrainAlone]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    config = PPOConfig().training(grad_clip=grad_clip)
    return net, TrainAlone("m", Adam(net.parameters(), lr=1e-2), config)


def backward(net: nn.Module, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(32, 5, generator=gen), torch.randn(32, 3, generator=gen)
    for p in net.parameters():
        p.grad = None
    loss = (net(x) - y).pow(2).mean()
    loss.backward()
    return loss.detach().reshape(1)


def step(guard: NonFiniteGuard, alone: TrainAlone, losses: torch.Tensor) -> np.ndarray:
    """What the Learner does after backward: the guard's check, then the unit's step."""
    allowed = guard.check(alone, losses)
    alone.stepper.step(allowed)
    return allowed


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", ["loss", "weight", "bias"])
def test_a_non_finite_loss_or_gradient_changes_nothing_and_drops_the_minibatch_logs(bad, where):
    net, alone = unit()
    guard = NonFiniteGuard(3)
    guard.start_update(["m"])
    step(guard, alone, backward(net, 0))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    state = alone.optimizer.state_dict()
    loss = backward(net, 1)
    if where == "loss":
        loss = torch.tensor([bad])
    else:
        getattr(net[0], where).grad.view(-1)[0] = bad
    alone.log({"policy_loss": loss[0]})
    assert step(guard, alone, loss).tolist() == [False]
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())
    after = alone.optimizer.state_dict()
    assert after["step"] == state["step"] == 1
    for key in ("exp_avg", "exp_avg_sq"):
        assert all(torch.equal(a, b) for a, b in zip(state[key], after[key], strict=True))
    assert guard.counts == {"m": 1}
    assert "policy_loss" not in alone.means()  # the skipped minibatch's value left out


def test_skips_in_a_row_raise_naming_module_and_terms_and_a_step_ends_the_run():
    net, alone = unit()
    guard = NonFiniteGuard(2)
    guard.start_update(["m"])
    alone.log({"policy_loss": torch.tensor(float("nan"))})
    step(guard, alone, torch.tensor([float("nan")]))
    step(guard, alone, backward(net, 0))  # finite: the run of skips ends
    alone.log({"policy_loss": torch.tensor(float("nan"))})
    step(guard, alone, torch.tensor([float("nan")]))
    alone.log({"policy_loss": torch.tensor(float("nan"))})
    with pytest.raises(NonFiniteUpdateError, match=r"Module 'm'.*2 minibatches.*policy_loss"):
        step(guard, alone, torch.tensor([float("nan")]))


def test_clipping_is_clip_grad_norm_bit_for_bit_and_logs_the_norm():
    net, alone = unit(grad_clip=0.05)
    ref = [p.detach().clone().requires_grad_() for p in net.parameters()]
    backward(net, 3)
    for r, p in zip(ref, net.parameters(), strict=True):
        r.grad = p.grad.clone()
    norm = torch.nn.utils.clip_grad_norm_(ref, 0.05)
    alone.clip(alone.grad_norms(), torch.tensor([0.05]))
    for r, p in zip(ref, net.parameters(), strict=True):
        assert torch.equal(r.grad, p.grad)
    net, alone = unit(grad_clip=0.05)
    guard = NonFiniteGuard(3)
    guard.start_update(["m"])
    step(guard, alone, backward(net, 3))
    assert alone.means()[GRAD_NORM_KEY] == pytest.approx(float(norm))
    assert float(norm) > 0.05  # the clip was active


def test_guard_off_steps_a_non_finite_minibatch():
    net, alone = unit()
    guard = NonFiniteGuard(1, enabled=False)
    guard.start_update(["m"])
    backward(net, 0)
    assert step(guard, alone, torch.tensor([float("nan")])).tolist() == [True]
    assert alone.optimizer.step_count == 1 and guard.counts == {"m": 0}


def test_an_early_stop_keeps_the_module_unstepped_for_the_rest_of_the_update():
    net, alone = unit()
    guard = NonFiniteGuard(3)
    alone.request_stop(torch.tensor(0.5), 1.0)  # below the limit: steps
    assert step(guard, alone, backward(net, 0)).tolist() == [True]
    alone.request_stop(torch.tensor(2.0), 1.0)
    assert step(guard, alone, backward(net, 1)).tolist() == [False]
    assert step(guard, alone, backward(net, 2)).tolist() == [False]  # no new request
    assert alone.early_stops() == {"m": True} and alone.optimizer.step_count == 1
    alone.start_update(alone.configs[0])
    assert alone.early_stops() == {} and not alone.resolve_stops().any()
    assert isinstance(alone.resolve_stops(), np.ndarray)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), None])
@pytest.mark.parametrize("where", ["loss", "weight", "bias"])
def test_a_module_alones_cheap_check_decides_as_torch_isfinite_and_leaves_gradients_alone(
    bad, where
):
    net, alone = unit()
    loss = backward(net, 0)
    if bad is not None:
        if where == "loss":
            loss = torch.tensor([bad])
        else:
            getattr(net[0], where).grad.view(-1)[1] = bad
    grads = [p.grad.clone() for p in net.parameters()]
    plain = bool(torch.isfinite(loss).all()) and all(bool(torch.isfinite(g).all()) for g in grads)
    assert alone.finite(loss, None).tolist() == [plain]
    assert alone.finite(loss, alone.grad_norms()).tolist() == [plain]
    assert alone.finite(loss, None).tolist() == [plain]  # its flag was reset
    for p, g in zip(net.parameters(), grads, strict=True):  # bit for bit, NaNs included
        assert torch.equal(p.grad.view(torch.int32), g.view(torch.int32))
