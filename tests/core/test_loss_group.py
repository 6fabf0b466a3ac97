"""A loss written once (`Learner.compute_losses` over `[M, B, ...]` with a LossGroup,
rlmod/core/loss_group.py) serves a module trained alone (M = 1) and a stacked group: the
masked reductions equal the plain ones over each module's rows, and a Learner that writes
only `compute_losses` is stacked with nothing more to write."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig, PPOLearner
from rlmod.core.loss_group import LeadingAxis, masked_mean, masked_var
from rlmod.testing import MultiAgentCartPole


@pytest.mark.parametrize("trailing", [(), (3,)])
def test_masked_reductions_equal_the_plain_ones_over_each_modules_rows(trailing):
    gen = torch.Generator().manual_seed(0)
    counts = [5, 1, 8, 3]
    x = torch.randn(len(counts), 8, *trailing, generator=gen)
    mask = torch.arange(8).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
    means = masked_mean(x, mask)
    for i, k in enumerate(counts):
        torch.testing.assert_close(means[i], x[i, :k].mean())
    if not trailing:
        variances = masked_var(x, mask)
        for i, k in enumerate(counts):
            torch.testing.assert_close(variances[i], x[i, :k].var(), equal_nan=True)


def test_a_module_alone_reads_its_columns_with_a_leading_axis_of_one():
    cols = {"obs": torch.zeros(4, 2), "actions": torch.arange(4)}
    view = LeadingAxis(cols)
    assert view["obs"].shape == (1, 4, 2) and view["actions"].shape == (1, 4)
    assert view["obs"].data_ptr() == cols["obs"].data_ptr()  # a view, not a copy
    assert sorted(view) == ["actions", "obs"] and len(view) == 2


class HalfPPOLearner(PPOLearner):
    """A "new algorithm" that writes its loss once, as `compute_losses` (half PPO's)."""

    def compute_losses(self, **kwargs):
        return super().compute_losses(**kwargs) * 0.5


def _train(stack: bool) -> tuple[list, dict]:
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 3})
        .multi_agent(
            policies={"p0", "p1", "p2"},
            policy_mapping_fn=lambda aid, ep, **kw: f"p{aid}",
            stack_modules=stack,
        )
        .rl_module(model_config={"fcnet_hiddens": [16, 16]})
        .training(
            learner_class=HalfPPOLearner, train_batch_size=128, minibatch_size=32, num_epochs=2
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        algo.train()
        learner = algo.learner_group.learner
        weights = {m: learner.module[m].get_state() for m in ("p0", "p1", "p2")}
        return [s.module_ids for s in learner.stacked.stacks], weights
    finally:
        algo.stop()


@pytest.mark.fast_path
def test_a_learner_writing_only_compute_losses_is_stacked_and_trains_as_unstacked():
    stacks, stacked = _train(stack=True)
    assert stacks == [["p0", "p1", "p2"]]
    none, plain = _train(stack=False)
    assert none == []
    for mid, state in plain.items():
        for name, value in state.items():
            np.testing.assert_allclose(stacked[mid][name], value, atol=1e-5, err_msg=name)
