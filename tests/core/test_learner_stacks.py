"""TrainStack and row_buckets (rlmod.core.learner_stacks), driven directly on a small
StackedGroup: the working order of an update, the row layout of its minibatches (cycled
rows, the zero row behind padded slots), per-module gradient norms and clipping, the
write-back of parameter and Adam rows, early stops and the per-module log means.

End-to-end checks that a stacked Learner trains exactly like per-module Learners are in
tests/core/test_learner_stacked.py (also row_buckets' optimality against brute force).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule, PPOConfig
from rlmod.core.columns import Columns
from rlmod.core.learner_stacks import TrainStack, row_buckets
from rlmod.core.optim import GroupAdam
from rlmod.core.stacked import StackedGroup

BOX = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
IDS = ["a", "b", "c"]
CONFIGS = dict.fromkeys(IDS, PPOConfig())  # each module's config (`get_config_for_module`)


def _stack(lr: float = 0.1) -> tuple[TrainStack, list[DefaultPPORLModule]]:
    torch.manual_seed(0)
    modules = [
        DefaultPPORLModule(
            observation_space=BOX,
            action_space=gym.spaces.Discrete(2),
            model_config={"fcnet_hiddens": [4]},
        )
        for _ in IDS
    ]
    group = StackedGroup(IDS, modules)
    trained = [p for p in group.params.values() if p.requires_grad]
    return TrainStack(group, GroupAdam(trained, lrs=[lr] * len(IDS))), modules


def _batch(rows: dict[str, int]) -> dict[str, dict[str, torch.Tensor]]:
    """Observation rows whose first feature names the row: 100 * module index + row."""
    out = {}
    for i, (mid, n) in enumerate(rows.items()):
        obs = torch.zeros(n, 3)
        obs[:, 0] = 100 * (IDS.index(mid) + 1) + torch.arange(n)
        obs[:, 1] = float(i)
        out[mid] = {Columns.OBS: obs}
    return out


def _bucket_losses(stack: TrainStack, step: int = 0) -> torch.Tensor:
    """`[W]`: per working module, the masked mean of its action logits' sum; backward."""
    losses = []
    for bucket, cols in stack.minibatch(step):
        out = bucket.call_padded("forward_train", {Columns.OBS: cols[Columns.OBS]})
        loss = bucket.mean(out[Columns.ACTION_DIST_INPUTS].sum(-1))  # [m]
        losses.append(loss)
    per_module = torch.cat(losses)
    per_module.sum().backward()
    return per_module.detach()


def test_row_buckets_refuses_a_module_with_no_rows():
    with pytest.raises(ValueError, match="row counts > 0, sorted from most to fewest"):
        row_buckets(np.array([4, 2, 0]))


def test_working_order_is_most_rows_first_and_leaves_out_absent_and_empty_modules():
    stack, _ = _stack()
    batch = _batch({"a": 2, "b": 5, "c": 0})
    stack.start_update(batch, CONFIGS, None)
    assert stack.ids == ["b", "a"] and stack.order.tolist() == [1, 0]
    assert stack.num_rows.tolist() == [5, 2]

    # a module not in `configs` (not trainable) does not train even with rows
    stack.start_update(_batch({"a": 2, "b": 5, "c": 3}), {"a": PPOConfig(), "c": PPOConfig()}, None)
    assert stack.ids == ["c", "a"]
    # ties keep the group's order (a stable sort)
    stack.start_update(_batch({"a": 4, "b": 4, "c": 4}), CONFIGS, None)
    assert stack.ids == IDS


def test_columns_only_some_modules_have_are_dropped_and_a_zero_row_is_appended():
    stack, _ = _stack()
    batch = _batch({"a": 2, "b": 3})
    batch["a"]["extra"] = torch.ones(2)
    stack.start_update(batch, CONFIGS, None)
    assert set(stack.columns) == {Columns.OBS}
    obs = stack.columns[Columns.OBS]
    assert obs.shape == (2 + 3 + 1, 3)
    assert obs[:3, 0].tolist() == [200, 201, 202]  # b first: most rows
    assert obs[3:5, 0].tolist() == [100, 101]
    assert obs[-1].abs().sum() == 0


def test_padded_slots_point_at_the_zero_row_and_the_mask_marks_real_rows():
    stack, _ = _stack()
    stack.start_update(_batch({"a": 2, "b": 5, "c": 3}), CONFIGS, None)
    stack.start_epoch(None, 1)
    [(bucket, cols)] = stack.minibatch(0)
    assert (bucket.start, bucket.stop, bucket.width) == (0, 3, 5)
    assert bucket.positions is None  # one bucket: every module of the update
    assert bucket.module_ids == ["b", "c", "a"]
    assert bucket.mask.tolist() == [
        [True] * 5,
        [True] * 3 + [False] * 2,
        [True] * 2 + [False] * 3,
    ]
    first = cols[Columns.OBS][..., 0]
    assert first[0].tolist() == [200, 201, 202, 203, 204]
    assert first[1].tolist() == [300, 301, 302, 0, 0]
    assert first[2].tolist() == [100, 101, 0, 0, 0]
    assert torch.isfinite(cols[Columns.OBS]).all()


def test_minibatches_cycle_each_module_through_its_shuffled_rows():
    stack, _ = _stack()
    stack.start_update(_batch({"a": 1, "b": 5, "c": 3}), CONFIGS, size=2)
    perms = [np.array([4, 2, 0, 1, 3]), np.array([2, 0, 1]), np.array([0])]  # b, c, a
    stack.start_epoch(perms, num_steps=3)
    seen = {mid: [] for mid in stack.ids}
    for step in range(3):
        [(bucket, cols)] = stack.minibatch(step)
        first = cols[Columns.OBS][..., 0]
        for j, mid in enumerate(bucket.module_ids):
            seen[mid].append(first[j][bucket.mask[j]].int().tolist())
    # b: rows perm[(2s + t) % 5]; c: perm[(2s + t) % 3]; a: its single row, width 1
    assert seen["b"] == [[204, 202], [200, 201], [203, 204]]
    assert seen["c"] == [[302, 300], [301, 302], [300, 301]]
    assert seen["a"] == [[100], [100], [100]]


def test_grad_norms_are_each_modules_own_and_clip_scales_them_to_the_limit():
    stack, modules = _stack()
    rows = {"a": 2, "b": 5, "c": 3}
    batch = _batch(rows)
    stack.start_update(batch, CONFIGS, None)
    stack.start_epoch(None, 1)
    stack.zero_grad()
    losses = _bucket_losses(stack)
    norms = stack.grad_norms()

    for j, mid in enumerate(stack.ids):  # each module alone, on its own rows
        module = modules[IDS.index(mid)]
        out = module.forward_train({Columns.OBS: batch[mid][Columns.OBS]})
        loss = out[Columns.ACTION_DIST_INPUTS].sum(-1).mean()
        assert float(loss.detach()) == pytest.approx(float(losses[j]), abs=1e-5)
        params = [p for p in module.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        expected = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g) for g in grads if g is not None])
        )
        assert float(norms[j]) == pytest.approx(float(expected), rel=1e-5)

    limits = torch.tensor([float(norms[0]) / 2, float("inf"), float(norms[2]) * 2])
    stack.clip(norms, limits)
    clipped = stack.grad_norms()
    assert float(clipped[0]) == pytest.approx(float(norms[0]) / 2, rel=1e-4)
    assert float(clipped[1]) == pytest.approx(float(norms[1]), rel=1e-6)  # inf: no clip
    assert float(clipped[2]) == pytest.approx(float(norms[2]), rel=1e-6)  # under the limit

    bad = losses.clone()
    bad[1] = float("nan")
    assert stack.finite(bad, None).tolist() == [True, False, True]
    assert stack.finite(losses, torch.tensor([1.0, 1.0, float("inf")])).tolist() == [
        True,
        True,
        False,
    ]
    stack.finish_update()


@pytest.mark.parametrize("rows", [{"a": 5, "b": 3, "c": 2}, {"a": 2, "b": 5, "c": 3}])
def test_step_moves_only_stepped_modules_and_finish_update_writes_them_back(rows):
    """The first case trains in the group's own order (views), the second in another
    order (copies written back by finish_update)."""
    stack, modules = _stack()
    before = {k: p.detach().clone() for k, p in stack.group.params.items()}
    stack.start_update(_batch(rows), CONFIGS, None)
    stack.start_epoch(None, 1)
    stack.zero_grad()
    _bucket_losses(stack)
    skipped = "b"
    stepped = np.array([mid != skipped for mid in stack.ids])
    stack.stepper.step(stepped)
    stack.finish_update()

    assert stack.optimizer.steps.tolist() == [1, 0, 1]  # group order a, b, c
    b = IDS.index(skipped)
    for name, p in stack.group.params.items():
        assert torch.equal(p[b], before[name][b]), name
    for i, mid in enumerate(IDS):  # the modules see the group's storage
        module_moved = any(
            not torch.equal(p, before[name][i])
            for name, p in zip(stack.group.params, modules[i].parameters(), strict=True)
        )
        assert module_moved == (mid != skipped)
    # the skipped module's Adam moments stay zero, the others' were written back
    for m in stack.optimizer.exp_avg_sq:
        assert m[b].abs().sum() == 0
    assert any(m[0].abs().sum() > 0 for m in stack.optimizer.exp_avg_sq)
    assert stack.work is None and len(stack.columns) == 0


def test_an_update_with_no_rows_has_no_work_and_finishes_cleanly():
    stack, _ = _stack()
    stack.start_update(_batch({"a": 0}), CONFIGS, None)
    assert len(stack) == 0 and stack.work is None
    stack.start_epoch(None, 1)
    assert stack.minibatch(0) == []
    stack.finish_update()
    assert stack.optimizer.steps.tolist() == [0, 0, 0]


def _two_bucket_stack() -> TrainStack:
    stack, _ = _stack()
    # 600 + 600 + 1 rows: one bucket pads to 1800 slots; two cost 1201 + BUCKET_COST_SLOTS
    stack.start_update(_batch({"a": 600, "b": 1, "c": 600}), CONFIGS, None)
    assert [(b.start, b.stop, b.width) for b in stack._buckets] == [(0, 2, 600), (2, 3, 1)]
    assert stack.ids == ["a", "c", "b"]
    return stack


def test_means_keep_only_stepped_modules_logs_across_buckets():
    stack = _two_bucket_stack()
    stack.log({"x": torch.tensor([1.0, 2.0])}, positions=slice(0, 2))
    stack.log({"x": torch.tensor([3.0])}, positions=slice(2, 3))
    stack.log({"y": torch.tensor([9.0, 8.0, 7.0])}, valid=np.array([True, False, True]))
    assert stack.pending_terms(2) == {"x": 3.0, "y": 7.0}
    stack.commit(np.array([True, True, False]))  # b skipped: its values are dropped
    stack.log({"x": torch.tensor([5.0, 6.0, 7.0])})
    stack.commit(np.array([True, True, True]))
    stack.commit(np.array([False, False, False]))  # nothing pending: a no-op

    means = stack.means()
    assert means["a"] == {"x": 3.0, "y": 9.0}
    assert means["c"] == {"x": 4.0}  # c's "y" was marked invalid
    assert means["b"] == {"x": 7.0}  # only the minibatch where b stepped


def test_early_stops_count_only_checked_modules_and_stay_stopped():
    stack = _two_bucket_stack()
    stack.request_stop(torch.tensor([0.5, 2.0]), torch.tensor([1.0, 1.0]), slice(0, 2))
    stack.request_stop(torch.tensor([99.0]), torch.tensor([float("inf")]), slice(2, 3))
    assert stack.resolve_stops().tolist() == [False, True, False]
    assert stack.early_stops() == {"a": False, "c": True}  # b: inf limit, not checked
    # a later minibatch under its limit does not un-stop c
    stack.request_stop(torch.tensor([0.0, 0.0, 0.0]), torch.tensor([1.0, 1.0, 1.0]))
    assert stack.resolve_stops().tolist() == [False, True, False]
    assert stack.early_stops() == {"a": False, "c": True, "b": False}
    assert stack.resolve_stops().tolist() == [False, True, False]  # no request: unchanged
