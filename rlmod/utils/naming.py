"""Helpers for error messages: the closest valid name, and import paths of classes."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """' Did you mean 'x'?' for the closest valid name, or '' when none is close. A name
    that differs only in case (`LR` for `lr`) matches first."""
    names = list(valid)
    same_case = [v for v in names if v.lower() == name.lower()]
    match = same_case or difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" Did you mean {match[0]!r}?" if match else ""


def import_path(obj: Any, *, setting: str) -> str:
    """'package.module:QualName' for a class or module-level function.

    Raises ValueError naming `setting` for lambdas and local functions, which have no
    import path and so cannot be stored as JSON.
    """
    qualname = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None)
    if not qualname or not module or "<" in qualname:
        raise ValueError(
            f"{setting}={obj!r} has no import path (a lambda or a local function), so it "
            "cannot be stored as JSON; define it at module level and pass that."
        )
    return f"{module}:{qualname}"


def from_import_path(path: str, *, setting: str) -> Any:
    """The object named by an `import_path` string."""
    module_name, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{setting}: cannot import {path!r} ({e}).") from e
    return obj
