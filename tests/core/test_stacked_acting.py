"""Tests of StackedActing (rlmod/core/stacked_acting.py), the EnvRunner acting fast path of
stacked groups, against the plain path (`StackedGroup.call_rows`: vmap over the class's
own forward): with modules missing from the rows, after weights change (the transposed weight copy is remade), and where the fast path
must not run (free log-std, a subclass, autograd on).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlmod.core.stacked_acting as sa
from rlmod.algorithms.ppo import DefaultPPORLModule
from rlmod.core import MultiRLModule
from rlmod.core.columns import Columns
from rlmod.core.stacked import StackedGroup, find_stack_groups
from rlmod.core.stacked_acting import StackedActing, acting_layers

BOX = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)  # flattened to 6 inputs


def _group(n: int, model_config: dict, action_space: gym.Space | None = None) -> StackedGroup:
    torch.manual_seed(0)
    multi = MultiRLModule(
        {
            f"p{i}": DefaultPPORLModule(
                observation_space=BOX,
                action_space=action_space or gym.spaces.Discrete(3),
                inference_only=True,
                model_config=model_config,
            )
            for i in range(n)
        }
    )
    for m in multi.values():  # distinct, non-zero biases too
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.1 * torch.randn_like(p))
    [group] = find_stack_groups(multi)
    return group


def _plain(group: StackedGroup, obs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = group.call_rows("forward_exploration", {"obs": obs}, index)[
        Columns.ACTION_DIST_INPUTS
    ]
    return out


def _rows(n: int, num_modules: int, missing: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(num_modules, generator=g)[: num_modules - missing]
    index = keep[torch.randint(0, len(keep), (n,), generator=g)]
    return torch.randn(n, *BOX.shape, generator=g), index


@pytest.mark.parametrize(
    "model_config",
    [
        {"fcnet_hiddens": [16, 16]},
        {
            "fcnet_hiddens": [8],
            "fcnet_activation": "relu",
            "head_fcnet_hiddens": [5],
            "head_fcnet_activation": "silu",
        },
        {"fcnet_hiddens": [], "head_fcnet_hiddens": [4], "head_fcnet_activation": "elu"},
    ],
)
def test_fast_path_gives_the_plain_paths_outputs(model_config: dict) -> None:
    group = _group(12, model_config)
    assert isinstance(StackedActing.of(group), StackedActing)
    for n, missing, seed in [(40, 0, 0), (25, 7, 1), (1, 11, 2), (12, 0, 3)]:
        obs, index = _rows(n, 12, missing, seed)
        with torch.inference_mode():
            fast = group.forward_exploration(obs, index)
            greedy = group.forward_inference(obs, index)
        assert set(fast) == {Columns.ACTION_DIST_INPUTS}
        want = _plain(group, obs, index).detach()
        torch.testing.assert_close(fast[Columns.ACTION_DIST_INPUTS], want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(greedy[Columns.ACTION_DIST_INPUTS], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("out_space", [gym.spaces.Discrete(3), gym.spaces.Discrete(9)])
def test_few_present_modules_are_computed_alone(out_space: gym.Space) -> None:
    """A call whose rows come from few of the group's modules computes only those (copies of
    their weight rows; both the narrow and the wide last layer), with the plain path's
    results, and a full call still computes every module."""
    group = _group(80, {"fcnet_hiddens": [8, 8]}, out_space)
    for n, missing, seed in [(5, 77, 5), (9, 72, 6), (11, 70, 7), (80, 0, 8)]:
        obs, index = _rows(n, 80, missing, seed)
        assert (sa.GATHER_BELOW * n < 80) == (n < 10)  # the first two calls gather
        with torch.inference_mode():
            fast = group.forward_exploration(obs, index)[Columns.ACTION_DIST_INPUTS]
        want = _plain(group, obs, index).detach()
        torch.testing.assert_close(fast, want, rtol=1e-5, atol=1e-6)


def test_transposed_weights_follow_weight_changes() -> None:
    """The transposed weight copies are remade when a module's weights change through the
    per-module API (set_state writes into the group's storage)."""
    group = _group(6, {"fcnet_hiddens": [8, 8]})
    obs, index = _rows(30, 6, 0, 4)
    with torch.inference_mode():
        before = group.forward_exploration(obs, index)[Columns.ACTION_DIST_INPUTS]
    state = {k: torch.as_tensor(v) * 2 + 0.3 for k, v in group.modules[2].get_state().items()}
    group.modules[2].set_state(state)
    with torch.inference_mode():
        after = group.forward_exploration(obs, index)[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(after, _plain(group, obs, index).detach(), rtol=1e-5, atol=1e-6)
    changed = (after - before).abs().amax(1) > 1e-6
    assert torch.equal(changed, index == 2)  # only module 2's rows changed


def test_groups_stacked_under_inference_mode() -> None:
    """Weights made under inference mode have no version counter: they are then transposed
    anew each call (right after an in-place change too)."""
    with torch.inference_mode():
        group = _group(5, {"fcnet_hiddens": [8]})
        obs, index = _rows(20, 5, 0, 7)
        first = group.forward_exploration(obs, index)[Columns.ACTION_DIST_INPUTS]
        group.params["encoder.0.weight"].mul_(2.0)
        second = group.forward_exploration(obs, index)[Columns.ACTION_DIST_INPUTS]
        want = _plain(group, obs, index)
    torch.testing.assert_close(second, want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(first, second)


def test_plain_path_where_the_fast_path_does_not_apply() -> None:
    # A free log-std is concatenated to the policy head's output: no acting layers.
    boxed = _group(3, {"fcnet_hiddens": [4]}, gym.spaces.Box(-1, 1, (2,), np.float32))
    assert StackedActing.of(boxed) is None
    obs, index = _rows(5, 3, 0, 5)
    with torch.inference_mode():
        out = boxed.forward_exploration(obs, index)[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(out, _plain(boxed, obs, index).detach())

    # A subclass may change the forwards: it declares its acting layers anew.
    class Sub(DefaultPPORLModule):
        pass

    sub = Sub(
        observation_space=BOX,
        action_space=gym.spaces.Discrete(2),
        inference_only=True,
        model_config={"fcnet_hiddens": [4]},
    )
    assert acting_layers(sub) is None

    # With autograd on, the plain path runs (the StackedActing is not even built); its
    # acting forwards run without grad, as RLlib's.
    group = _group(4, {"fcnet_hiddens": [4]})
    obs, index = _rows(6, 4, 0, 6)
    out = group.forward_exploration(obs, index)[Columns.ACTION_DIST_INPUTS]
    assert group._acting is None and out.grad_fn is None
    torch.testing.assert_close(out, _plain(group, obs, index).detach())
