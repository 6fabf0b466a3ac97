"""Scripted RLModules shared by tests, examples and users: known policies that an EnvRunner
can run (and record, `offline_data(output=...)`), multi-agent EnvRunners included.

Used where episodes of a known quality must come from an EnvRunner rather than from
`rlmod.offline.record_episodes` (which runs any Python callable on a gymnasium env).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlmod.core.columns import Columns
from rlmod.core.rl_module import RLModule, TensorDict

EXPERT_GAINS = (0.02, 0.1, 1.0, 0.3)
"""`rlmod.testing.cartpole_expert`'s weights of (x, x_dot, theta, theta_dot)."""


class CartPoleExpertModule(RLModule):
    """`cartpole_expert` as an RLModule: logits `(-s * z, s * z)` with z the expert's
    linear score and s = `model_config["sharpness"]` (default 1000, so sampled actions are
    the expert's except within ~1e-3 of its switching line). A real `nn.Linear` holds the
    weights, so a Learner could also train it.

    Example:
        >>> import gymnasium as gym, numpy as np, torch
        >>> module = CartPoleExpertModule(
        ...     observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        ...     action_space=gym.spaces.Discrete(2), inference_only=True)
        >>> logits = module.forward_inference({"obs": torch.tensor([[0.0, 0.0, 0.1, 0.0]])})
        >>> int(logits["action_dist_inputs"].argmax())  # pole leans right: push right
        1
    """

    def setup(self) -> None:
        sharpness = float((self.model_config or {}).get("sharpness", 1000.0))
        self.pi = nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            w = torch.tensor(EXPERT_GAINS) * sharpness
            self.pi.weight.copy_(torch.stack([-w, w]))

    def _forward(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}
