"""Module APIs: interfaces an RLModule implements so that algorithms can use it.

Used by custom RLModules (`class MyModule(TorchRLModule, ValueFunctionAPI)`) and by the
algorithms that need them (PPO's Learner and GAE call `compute_values`, Learners a module's
own `compute_self_supervised_loss`, the curiosity connector `compute_intrinsic_rewards`).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Protocol

import torch

from rlmod.core.types import TensorDict

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig
    from rlmod.core.learner import Learner


class ValueFunctionAPI(abc.ABC):
    """A module with a state-value function V(s) (RLlib's `ValueFunctionAPI`).

    PPO gets its value predictions only through `compute_values`: from the GAE learner
    connector (no gradient, on `obs` and `new_obs`) and from the loss (with gradient,
    passing `Columns.EMBEDDINGS` from `forward_train` when the module returned them), so
    a module's forwards need not write `vf_preds`.
    """

    @abc.abstractmethod
    def compute_values(
        self, batch: TensorDict, embeddings: torch.Tensor | None = None
    ) -> torch.Tensor:
        """V(obs) for every row of `batch`, shape `[B]` (the value dim squeezed out).

        Args:
            batch: Columns, `batch["obs"]` at least.
            embeddings: What `forward_train` returned under `Columns.EMBEDDINGS`, if it
                did; reuse them to avoid a second pass through a shared encoder.
        """


# Optional module methods that Learners and learner connectors look for. Each is found
# in one place below, by name, and typed by a Protocol of its signature, so that callers
# are type-checked against it (a module need not inherit anything to offer one).
class ComputeValues(Protocol):
    """A module's `compute_values(batch, embeddings=None) -> [B]` (see ValueFunctionAPI)."""

    def __call__(
        self, batch: TensorDict, embeddings: torch.Tensor | None = None
    ) -> torch.Tensor: ...


class ComputeSelfSupervisedLoss(Protocol):
    """A module's own loss, used by Learners instead of the algorithm's loss (the ICM's
    and RND's); it may log diagnostics through `learner.log(module_id, ...)`."""

    def __call__(
        self,
        *,
        learner: Learner,
        module_id: str,
        config: AlgorithmConfig,
        batch: dict[str, torch.Tensor],
        fwd_out: dict[str, torch.Tensor],
    ) -> torch.Tensor: ...


class ComputeIntrinsicRewards(Protocol):
    """A curiosity module's intrinsic reward per row, `[B]` (before any coefficient)."""

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...


def find_compute_values(module: object) -> ComputeValues | None:
    """`module.compute_values`, or None where the module has no value function."""
    return getattr(module, "compute_values", None)


def find_self_supervised_loss(module: object) -> ComputeSelfSupervisedLoss | None:
    """`module.compute_self_supervised_loss`, or None where the algorithm's loss applies."""
    return getattr(module, "compute_self_supervised_loss", None)


def find_intrinsic_rewards(module: object) -> ComputeIntrinsicRewards | None:
    """`module.compute_intrinsic_rewards`, or None where the module computes none."""
    fn = getattr(module, "compute_intrinsic_rewards", None)
    return fn if callable(fn) else None
