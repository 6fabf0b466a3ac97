"""What a loss reports (rlmod/core/loss_reports.py) reaches the right module's step unit."""

from __future__ import annotations

import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.rl_module import RLModuleSpec
from rlmod.testing import MultiAgentCartPole


@pytest.mark.fast_path
def test_values_logged_by_id_for_a_stacked_or_unknown_module_are_refused_with_the_fix():
    narrow = RLModuleSpec(model_config={"fcnet_hiddens": [4]})  # alone: no group of one
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 4})
        .multi_agent(
            policies={"p0": None, "p1": None, "p2": None, "alone": narrow},
            policy_mapping_fn=lambda aid, ep, **kw: "alone" if aid == 3 else f"p{aid}",
        )
        .rl_module(model_config={"fcnet_hiddens": [8]})
    )
    algo = config.build_algo()
    learner = algo.learner_group.learner
    assert "p0" in learner.stacked and "alone" not in learner.stacked
    learner.log("alone", policy_loss=torch.tensor(1.0))  # trains alone: kept
    assert learner.logged_mean("alone", "policy_loss") == 1.0
    for mid in ("p0", "nope"):
        with pytest.raises(ValueError, match=rf"Module '{mid}' does not train alone.*group"):
            learner.log(mid, policy_loss=1.0)
        with pytest.raises(ValueError, match=rf"Module '{mid}'"):
            learner.stop_early(mid, torch.tensor(1.0), 0.5)
    algo.stop()
