"""StackedTraining (rlmod.core.stacked_train): a stacked group's forward_train on Learners
through batched matmuls and a reused workspace gives what the plain vmap path gives,
values and gradients, and refuses to compute a gradient from overwritten activations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule
from rlmod.core.columns import Columns
from rlmod.core.stacked import StackedGroup
from rlmod.core.stacked_train import StackedTraining, Workspace

BOX = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
THREE = gym.spaces.Discrete(3)


def _group(m: int = 4, action_space: gym.Space = THREE, **model_config: object) -> StackedGroup:
    torch.manual_seed(0)
    config = {"fcnet_hiddens": [8, 6], **model_config}
    modules = [
        DefaultPPORLModule(observation_space=BOX, action_space=action_space, model_config=config)
        for _ in range(m)
    ]
    return StackedGroup([f"m{i}" for i in range(m)], modules)


def _loss(out: dict[str, torch.Tensor]) -> torch.Tensor:
    # every output element gets its own weight, so every gradient path is checked
    return sum(
        ((v * torch.linspace(-1, 2, v.numel()).view_as(v)).sum() for v in out.values()),
        torch.zeros(()),
    )


def _values_and_grads(group: StackedGroup, obs: torch.Tensor, fast: bool):
    params = {k: p.detach().clone().requires_grad_() for k, p in group.params.items()}
    if fast:
        training = StackedTraining.of(group)
        assert training is not None
        out = training(obs, params, Workspace())
    else:
        out = group.call_padded("forward_train", {Columns.OBS: obs}, params=params)
    _loss(out).backward()
    return (
        {k: v.detach() for k, v in out.items()},
        {k: p.grad for k, p in params.items() if p.grad is not None},
    )


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_fast_path_gives_the_vmap_paths_outputs_and_gradients(activation):
    group = _group(fcnet_activation=activation)
    obs = torch.randn(4, 5, 4)
    fast_out, fast_grads = _values_and_grads(group, obs, fast=True)
    plain_out, plain_grads = _values_and_grads(group, obs, fast=False)
    assert fast_out.keys() == plain_out.keys()
    for k in plain_out:
        torch.testing.assert_close(fast_out[k], plain_out[k], atol=1e-6, rtol=1e-5)
    # the value head is not on the fast path: only the layers it covers have gradients
    assert set(fast_grads) == {k for k in plain_grads if not k.startswith("vf.")}
    for k, g in fast_grads.items():
        torch.testing.assert_close(g, plain_grads[k], atol=1e-6, rtol=1e-5)


def _fast_path() -> tuple[StackedTraining, dict[str, torch.Tensor], Workspace]:
    """A default group's fast path, fresh leaf copies of its parameters, a new workspace."""
    group = _group()
    training = StackedTraining.of(group)
    assert training is not None
    params = {k: p.detach().clone().requires_grad_() for k, p in group.params.items()}
    return training, params, Workspace()


def test_the_workspace_is_reused_from_one_minibatch_to_the_next():
    training, params, workspace = _fast_path()
    pointers = []
    for _ in range(2):
        _loss(training(torch.randn(4, 5, 4), params, workspace)).backward()
        pointers.append(sorted(b.data_ptr() for b in workspace._buffers.values()))
    assert pointers[0] == pointers[1] and pointers[0]


def test_a_second_forward_before_the_backward_raises_instead_of_a_wrong_gradient():
    training, params, workspace = _fast_path()
    first = training(torch.randn(4, 5, 4), params, workspace)
    training(torch.randn(4, 5, 4), params, workspace)
    with pytest.raises(RuntimeError, match="ran again before the backward"):
        _loss(first).backward()


def test_classes_and_configs_without_plain_train_layers_take_the_vmap_path():
    assert StackedTraining.of(_group(vf_share_layers=True)) is None
    box_actions = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    assert StackedTraining.of(_group(action_space=box_actions)) is None  # free log-std

    class Custom(DefaultPPORLModule):  # may change its forwards: declares nothing anew
        supports_stacking = True

    modules = [Custom(observation_space=BOX, action_space=gym.spaces.Discrete(2)) for _ in range(2)]
    assert StackedTraining.of(StackedGroup(["a", "b"], modules)) is None
