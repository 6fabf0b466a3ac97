"""A Learner's batches (rlmod/core/learner_batches.py): tensors, minibatch plan, shuffles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmod.core.learner_batches import minibatch_plan, num_rows, shuffled_rows, to_tensor_batch

CPU = torch.device("cpu")


def test_to_tensor_batch_concatenates_per_module_and_leaves_unknown_modules_out():
    a = {"p": {"obs": np.arange(3.0)}, "other": {"obs": np.zeros(1)}}
    b = {"p": {"obs": np.arange(3.0, 5.0)}}
    out = to_tensor_batch([a, b], {"p"}, CPU)
    assert list(out) == ["p"]
    assert out["p"]["obs"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    frozen = np.arange(2.0)
    frozen.flags.writeable = False  # as arrays from Ray's object store are
    t = to_tensor_batch({"p": {"obs": frozen}}, {"p"}, CPU)["p"]["obs"]
    t += 1  # a writable copy: the read-only array is untouched
    assert frozen.tolist() == [0.0, 1.0] and num_rows({"p": {"obs": t}}) == {"p": 2}


@pytest.mark.parametrize(
    "rows, size, plan",
    [
        ({"a": 0}, 64, (0, None)),
        ({"a": 100}, None, (1, None)),
        ({"a": 100}, 128, (1, None)),
        ({"a": 256, "b": 10}, 64, (4, 64)),
        ({"a": 1035}, 128, (8, 128)),  # round(8.09): the few rows past 8 x 128 wait
        ({"a": 100}, 64, (2, 64)),
    ],
)
def test_minibatch_plan(rows, size, plan):
    assert minibatch_plan(rows, size) == plan


def test_shuffled_rows_follow_the_permutation_and_cycle_a_short_module():
    batch = {"a": {"x": torch.arange(5)}, "b": {"x": torch.arange(2)}}
    perms = {"a": np.array([4, 0, 3, 1, 2]), "b": np.array([1, 0])}
    out = shuffled_rows(batch, perms, num_steps=2, size=2)
    assert out["a"]["x"].tolist() == [4, 0, 3, 1]  # 2 minibatches of 2; row 2 waits
    assert out["b"]["x"].tolist() == [1, 0, 1, 0]  # fewer rows than 2 minibatches: cycles
