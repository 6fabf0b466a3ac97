"""Type aliases shared by core and env: one home, one meaning per alias.

Used by rlmod.core and rlmod.env (and whoever calls them) in place of `Any`, so that
mypy checks what crosses the seams between modules, EnvRunners and Learners.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import numpy.typing as npt
import torch

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Array: TypeAlias = "npt.NDArray[np.generic[object]]"
"""A numpy array of any dtype and shape (a column, observations, actions). (A string:
numpy's scalar types take type arguments in stubs only.)"""
IntArray: TypeAlias = npt.NDArray[np.int64]
"""An int64 array: row indices, slots, episode IDs, module indices."""
BoolArray: TypeAlias = npt.NDArray[np.bool_]
"""A bool array: per-row flags (terminated, truncated, masks)."""
FloatArray: TypeAlias = npt.NDArray[np.float64]
"""A float64 array: rewards and returns as the multi-agent EnvRunner books them."""

ArrayTree: TypeAlias = "Array | dict[str, ArrayTree] | tuple[ArrayTree, ...]"
"""A batch of observations as a vector env returns it: an array, or dicts and tuples of
them (Dict and Tuple spaces)."""

TensorDict: TypeAlias = dict[str, torch.Tensor]
"""One module's batch or forward outputs: column name -> tensor."""

StateValue: TypeAlias = (
    "torch.Tensor | Array | np.generic[object] | int | float | str | bool | None "
    "| Sequence[StateValue] | Mapping[str, StateValue]"
)
"""What a `get_state()` holds at any depth: tensors, arrays, scalars, strings and
(nested) lists and dicts of them."""
StateDict: TypeAlias = dict[str, StateValue]
"""What `get_state()` returns and `set_state()` takes (RLlib's state dicts)."""

Components: TypeAlias = "str | Collection[str] | None"
"""`get_state(components=..., not_components=...)`: a component name or path
("rl_module/default_policy"), several, or None for all (RLlib's)."""

ModelConfig: TypeAlias = "Mapping[str, object] | DataclassInstance"
"""A module's model config: a dict, or a settings dataclass such as DefaultModelConfig."""

MetricsDict: TypeAlias = dict[str, object]
"""Results and metrics by name (numbers, or nested dicts of them per module); read by
loggers and reporters, which check what they print."""
