"""StackedGroup: grouping rules, stacked forwards against per-module forwards, and the
per-module view (state written on one side is seen on the other)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule
from rlmod.core import MultiRLModule
from rlmod.core.stacked import StackedGroup, find_stack_groups, stacked_group_of

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
TWO = gym.spaces.Discrete(2)
SMALL = {"fcnet_hiddens": [8, 8]}


def ppo(
    *,
    inference_only: bool = False,
    model_config: dict | None = None,
    action_space: gym.Space = TWO,
    cls: type = DefaultPPORLModule,
) -> DefaultPPORLModule:
    return cls(
        observation_space=BOX,
        action_space=action_space,
        inference_only=inference_only,
        model_config=SMALL if model_config is None else model_config,
    )


def multi(n: int, **kwargs) -> MultiRLModule:
    torch.manual_seed(0)
    return MultiRLModule({f"p{i}": ppo(**kwargs) for i in range(n)})


class CustomPPO(DefaultPPORLModule):
    """A subclass that does not declare supports_stacking itself."""


def test_grouping_rules() -> None:
    modules = {
        "a0": ppo(),
        "a1": ppo(),
        "a2": ppo(),
        "wide": ppo(model_config={"fcnet_hiddens": [16, 8]}),
        "wide2": ppo(model_config={"fcnet_hiddens": [16, 8]}),
        "box": ppo(action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32)),
        "custom0": ppo(cls=CustomPPO),
        "custom1": ppo(cls=CustomPPO),
    }
    groups = find_stack_groups(MultiRLModule(modules))
    assert sorted(g.module_ids for g in groups) == [["a0", "a1", "a2"], ["wide", "wide2"]]
    # module_ids restricts; a single module is no group (min_size=2) unless asked
    fresh = MultiRLModule({m: ppo() for m in ("a0", "a1", "a2")})
    assert [g.module_ids for g in find_stack_groups(fresh, ["a0", "a2"])] == [["a0", "a2"]]
    assert find_stack_groups(MultiRLModule({"a": ppo()})) == []
    assert len(find_stack_groups(MultiRLModule({"a": ppo()}), min_size=1)) == 1


def test_learner_only_and_inference_only_are_not_mixed() -> None:
    full, small = ppo(), ppo(inference_only=True)
    learner_only = DefaultPPORLModule(
        observation_space=BOX, action_space=TWO, learner_only=True, model_config=SMALL
    )
    groups = find_stack_groups({"f": full, "s": small, "l": learner_only, "f2": ppo()})
    assert [g.module_ids for g in groups] == [["f", "f2"]]


@pytest.mark.parametrize("inference_only", [True, False])
def test_stacked_forwards_equal_per_module_forwards(inference_only: bool) -> None:
    m = multi(6, inference_only=inference_only)
    [group] = find_stack_groups(m)
    obs = torch.randn(20, 4)
    index = torch.tensor([0, 5, 5, 2, 0, 1, 3, 3, 3, 4] * 2)
    for method in ("forward_exploration", "forward_inference"):
        out = getattr(group, method)(obs, index)
        for r, i in enumerate(index.tolist()):
            own = getattr(m[f"p{i}"], method)({"obs": obs[r : r + 1]})
            assert out.keys() == own.keys()
            for k in own:
                torch.testing.assert_close(out[k][r], own[k][0], atol=1e-6, rtol=1e-5)
    # a subset of the modules (only p2 and p4 have rows): their parameters are gathered
    sub = group.forward_inference(obs[:3], torch.tensor([4, 2, 4]))["action_dist_inputs"]
    torch.testing.assert_close(
        sub[1], m["p2"].forward_inference({"obs": obs[1:2]})["action_dist_inputs"][0]
    )
    if not inference_only:
        values = group.compute_values(obs, index)
        for r, i in enumerate(index.tolist()):
            torch.testing.assert_close(
                values[r],
                m[f"p{i}"].compute_values({"obs": obs[r : r + 1]})[0],
                atol=1e-6,
                rtol=1e-5,
            )
    # no rows: empty outputs of the right trailing shape
    assert group.forward_exploration(obs[:0], index[:0])["action_dist_inputs"].shape == (0, 2)


def test_values_without_autograd_run_in_module_slices_with_the_same_result(monkeypatch) -> None:
    """GAE's value pass (no autograd) runs modules in slices of at most VALUES_CHUNK_SLOTS
    padded rows, each padded to its own widest module: the values are those of the whole
    group padded at once and of each module alone, for uneven rows and modules without
    rows."""
    import rlmod.core.stacked as stacked

    m = multi(7)
    [group] = find_stack_groups(m)
    counts = [9, 0, 3, 1, 12, 0, 5]  # p1 and p5 have no rows
    index = torch.from_numpy(np.random.default_rng(0).permutation(np.repeat(np.arange(7), counts)))
    obs = torch.randn(len(index), 4)
    with torch.no_grad():
        whole = group.compute_values(obs, index)
        monkeypatch.setattr(stacked, "VALUES_CHUNK_SLOTS", 12)  # slices of 1-4 modules
        sliced = group.compute_values(obs, index)
    torch.testing.assert_close(sliced, whole, atol=1e-6, rtol=1e-5)
    for r, i in enumerate(index.tolist()):
        torch.testing.assert_close(
            sliced[r], m[f"p{i}"].compute_values({"obs": obs[r : r + 1]})[0], atol=1e-6, rtol=1e-5
        )


def test_per_module_view_and_stacked_storage_agree() -> None:
    m = multi(4)
    before = {k: v.clone() for k, v in m["p1"].get_state().items()}
    [group] = find_stack_groups(m)
    assert group.is_intact()
    # stacking keeps every module's weights
    for k, v in m["p1"].get_state().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    # set_state on one module is seen by the stacked forward (and only for that module)
    obs, index = torch.randn(4, 4), torch.arange(4)
    old = group.forward_inference(obs, index)["action_dist_inputs"]
    m["p2"].set_state({k: torch.full_like(v, 0.5) for k, v in m["p2"].get_state().items()})
    new = group.forward_inference(obs, index)["action_dist_inputs"]
    torch.testing.assert_close(
        new[2], m["p2"].forward_inference({"obs": obs[2:3]})["action_dist_inputs"][0]
    )
    assert not torch.equal(new[2], old[2])
    torch.testing.assert_close(new[[0, 1, 3]], old[[0, 1, 3]], rtol=0, atol=0)
    # ... and a write into the stacked storage is seen by the module's own view
    with torch.no_grad():
        group.params["pi.0.bias"][3] += 1.0
    assert torch.equal(m["p3"].get_state()["pi.0.bias"], group.params["pi.0.bias"][3])
    # weight sync style: get_state of one module is a copy-able view of its row
    assert m["p3"].get_state()["pi.0.bias"].data_ptr() == group.params["pi.0.bias"][3].data_ptr()


def test_restacking_reuses_an_intact_group_and_invalidates_a_replaced_one() -> None:
    m = multi(3)
    [group] = find_stack_groups(m, ["p0", "p1"])
    assert stacked_group_of(m["p0"]) is group and stacked_group_of(m["p2"]) is None
    # stacked modules keep their group; only the others are grouped (p2 alone: no group)
    assert find_stack_groups(m) == [group]
    assert find_stack_groups(m, ["p1"]) == [group]
    smaller = StackedGroup(["p0", "p1"], [m["p0"], m["p1"]])  # regrouping on purpose
    assert smaller is not group and not group.is_intact()
    with pytest.raises(RuntimeError, match="stacked again"):
        group.forward_inference(torch.zeros(1, 4), torch.tensor([0]))
    assert smaller.is_intact()


def test_stacked_gradients_equal_per_module_gradients() -> None:
    """The stacked forward_train's backward gives each module its own gradient."""
    m = multi(3)
    ref = multi(3)  # same seed, same weights, never stacked
    [group] = find_stack_groups(m)
    obs = torch.randn(3, 5, 4)  # [M, K, obs]
    out = group.call_padded("forward_train", {"obs": obs})
    values = group.call_padded("compute_values", {"obs": obs}, out["embeddings"])
    (out["action_dist_inputs"].pow(2).sum() + values.sum()).backward()
    for i in range(3):
        own = ref[f"p{i}"]
        o = own.forward_train({"obs": obs[i]})
        (
            o["action_dist_inputs"].pow(2).sum()
            + own.compute_values({"obs": obs[i]}, embeddings=o["embeddings"]).sum()
        ).backward()
        for name, p in own.named_parameters():
            torch.testing.assert_close(group.params[name].grad[i], p.grad, atol=1e-6, rtol=1e-5)
