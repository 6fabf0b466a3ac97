"""Module APIs: interfaces an RLModule implements so that algorithms can use it.

Used by custom RLModules (`class MyModule(TorchRLModule, ValueFunctionAPI)`) and by the
algorithms that need them (PPO's Learner and GAE call `compute_values`).
"""

from __future__ import annotations

import abc
from typing import Any

import torch


class ValueFunctionAPI(abc.ABC):
    """A module with a state-value function V(s) (RLlib's `ValueFunctionAPI`).

    PPO gets its value predictions only through `compute_values`: from the GAE learner
    connector (no gradient, on `obs` and `new_obs`) and from the loss (with gradient,
    passing `Columns.EMBEDDINGS` from `forward_train` when the module returned them), so
    a module's forwards need not write `vf_preds`.
    """

    @abc.abstractmethod
    def compute_values(self, batch: dict[str, Any],
                       embeddings: Any | None = None) -> torch.Tensor:
        """V(obs) for every row of `batch`, shape `[B]` (the value dim squeezed out).

        Args:
            batch: Columns, `batch["obs"]` at least.
            embeddings: What `forward_train` returned under `Columns.EMBEDDINGS`, if it
                did; reuse them to avoid a second pass through a shared encoder.
        """
