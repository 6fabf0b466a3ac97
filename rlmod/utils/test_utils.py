"""`check`: RLlib's test helper (`ray.rllib.utils.test_utils.check`), same arguments and
meaning, for tests written against RLlib that run on rlmod with only imports changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["check"]


def _as_array(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return x


def check(
    x: Any,
    y: Any,
    decimals: int = 5,
    atol: float | None = None,
    rtol: float | None = None,
    false: bool = False,
) -> None:
    """Asserts that two nested structures (dicts, lists, tuples, arrays, tensors, numbers,
    other objects) are equal, numbers up to `decimals` digits (or `atol`/`rtol`).

    `false=True` asserts that they differ: in a dict or list, every leaf must differ
    (RLlib's semantics); structure (keys, lengths) must still match.

    Example:
        >>> check({"a": [1.0, 2.0]}, {"a": [1.0, 2.000001]})
        >>> check(1.0, 2.0, false=True)
    """
    if isinstance(x, Mapping):
        assert isinstance(y, Mapping), f"x is a dict, y is a {type(y).__name__}: {y!r}"
        missing = [k for k in x if k not in y]
        assert not missing, f"y lacks x's key(s) {missing}; y has {list(y)}"
        extra = [k for k in y if k not in x]
        assert not extra, f"y has key(s) {extra} that x lacks"
        for key, value in x.items():
            check(value, y[key], decimals=decimals, atol=atol, rtol=rtol, false=false)
        return
    if isinstance(x, (tuple, list)):
        assert isinstance(y, (tuple, list)), f"x is a {type(x).__name__}, y is {y!r}"
        assert len(x) == len(y), f"lengths differ: {len(x)} vs {len(y)}"
        for a, b in zip(x, y, strict=True):
            check(a, b, decimals=decimals, atol=atol, rtol=rtol, false=false)
        return
    xa, ya = _as_array(x), _as_array(y)
    numeric = isinstance(xa, (np.ndarray, np.number, int, float, bool)) and isinstance(
        ya, (np.ndarray, np.number, int, float, bool)
    )
    if x is None or y is None or isinstance(x, str) or not numeric:
        if false:
            assert x != y, f"x and y are equal: {x!r}"
        else:
            assert x == y, f"x ({x!r}) != y ({y!r})"
        return
    xa, ya = np.asarray(xa), np.asarray(ya)
    if xa.dtype == np.bool_ or ya.dtype == np.bool_ or xa.dtype.kind in "OUS":
        same = bool(np.array_equal(xa, ya))
    elif atol is not None or rtol is not None:
        same = bool(np.allclose(xa, ya, atol=atol or 0.0, rtol=rtol or 0.0, equal_nan=True))
    else:
        a, b = xa.astype(np.float64), ya.astype(np.float64)
        same = a.shape == b.shape and bool(
            np.all((np.abs(a - b) < 1.5 * 10.0**-decimals) | (np.isnan(a) & np.isnan(b)))
        )
    if false:
        assert not same, f"x and y are (almost) equal: {xa!r}"
    else:
        assert same, f"x ({xa!r}) and y ({ya!r}) differ at {decimals} decimals"
