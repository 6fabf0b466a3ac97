"""How AlgorithmConfig.to_dict / from_dict turn settings into JSON and back.

No pickle: functions and classes are stored by import path, spaces and specs as their own
JSON forms, so loading a config never runs stored bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from rlmod.core.multi_rl_module import MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.utils.naming import from_import_path, import_path
from rlmod.utils.spaces import space_from_dict, space_to_dict


def encode_setting(value: Any, setting: str) -> Any:
    """A setting's value as JSON: classes and functions by import path, spaces, specs and
    sets tagged so that `decode_setting` restores them; `setting` names it in errors."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, gym.Space):
        return {"__space__": space_to_dict(value)}
    if isinstance(value, RLModuleSpec):
        return {"__rl_module_spec__": value.to_dict()}
    if isinstance(value, MultiRLModuleSpec):
        return {"__multi_rl_module_spec__": value.to_dict()}
    if isinstance(value, set | frozenset):
        return {"__set__": sorted(encode_setting(v, setting) for v in value)}
    if isinstance(value, Mapping):
        return {str(k): encode_setting(v, f"{setting}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_setting(v, setting) for v in value]
    if callable(value):
        return {"__import__": import_path(value, setting=setting)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_setting(dataclasses.asdict(value), setting)
    raise ValueError(f"{setting}={value!r} cannot be stored as JSON.")


def decode_setting(value: Any, setting: str) -> Any:
    """Inverse of `encode_setting`."""
    if isinstance(value, list):
        return [decode_setting(v, setting) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, inner), = value.items()
        if key == "__space__":
            return space_from_dict(inner)
        if key == "__rl_module_spec__":
            return RLModuleSpec.from_dict(inner)
        if key == "__multi_rl_module_spec__":
            return MultiRLModuleSpec.from_dict(inner)
        if key == "__set__":
            return set(inner)
        if key == "__import__":
            return from_import_path(inner, setting=setting)
    return {k: decode_setting(v, f"{setting}[{k!r}]") for k, v in value.items()}
