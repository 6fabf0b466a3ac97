"""How AlgorithmConfig.to_dict / from_dict turn settings into JSON and back.

No pickle: functions and classes are stored by import path, spaces and specs as their own
JSON forms, so loading a config never runs stored bytes; import paths resolve only under
the trust model of `rlmod.utils.trust` (inside rlmod or a package the caller trusts, and of
the kind the setting expects).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym

from rlmod.core.multi_rl_module import MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.utils.naming import import_path
from rlmod.utils.spaces import space_from_dict, space_to_dict
from rlmod.utils.trust import check_env_id, resolve_import_path

IMPORT_KINDS: dict[str, str] = {
    "env": "env",
    "env_to_module_connector": "connector",
    "module_to_env_connector": "connector",
    "learner_connector": "connector",
    "env_runner_cls": "env_runner",
    "learner_class": "learner",
    "policy_mapping_fn": "policy_mapping_fn",
    "callbacks_class": "callbacks",
}
"""Setting -> the kind of object its import path must name (`rlmod.utils.trust`); any
other setting that holds a callable takes functions from trusted packages only."""

MUST_PASS = "__must_pass__"
"""Tag of a callable that had no import path when saved (a lambda, a closure): loading
asks the caller to pass it again."""

_TAGS = frozenset(
    {
        "__space__",
        "__rl_module_spec__",
        "__multi_rl_module_spec__",
        "__set__",
        "__import__",
        MUST_PASS,
    }
)
"""The keys `decode_setting` reads a one-key dict by."""


def encode_setting(value: Any, setting: str, *, allow_unnamed: bool = False) -> Any:
    """A setting's value as JSON: classes and functions by import path, spaces, specs and
    sets tagged so that `decode_setting` restores them; `setting` names it in errors.

    With `allow_unnamed` (checkpoints), a lambda or closure is stored as "must be passed at
    load" instead of raising.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    from rlmod.algorithms.settings import is_search_space

    if is_search_space(value):  # for Tune's param_space: Tune resolves it per trial
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
        if len(value) == 1 and next(iter(value)) in _TAGS:
            # read back, it would be taken for the tagged value (a set, an import, ...)
            raise ValueError(
                f"{setting} is a dict with the one key {next(iter(value))!r}, which settings "
                "stored as JSON reserve for their own tags; it cannot be stored."
            )
        return {
            str(k): encode_setting(v, f"{setting}[{k!r}]", allow_unnamed=allow_unnamed)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [encode_setting(v, setting, allow_unnamed=allow_unnamed) for v in value]
    if callable(value):
        try:
            return {"__import__": import_path(value, setting=setting)}
        except ValueError:
            if not allow_unnamed:
                raise
            return {MUST_PASS: repr(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_setting(dataclasses.asdict(value), setting)
    raise ValueError(f"{setting}={value!r} cannot be stored as JSON.")


def decode_setting(value: Any, setting: str, *, trusted_modules: Iterable[str] = ()) -> Any:
    """Inverse of `encode_setting`; import paths resolve under the trust model."""
    trusted = tuple(trusted_modules)
    if setting == "env" and isinstance(value, str):  # gymnasium's module:Env-v0 imports
        check_env_id(value, setting=setting, trusted_modules=trusted)
    if isinstance(value, list):
        return [decode_setting(v, setting, trusted_modules=trusted) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, inner),) = value.items()
        if key == "__space__":
            return space_from_dict(inner)
        if key == "__rl_module_spec__":
            return RLModuleSpec.from_dict(inner, trusted_modules=trusted)
        if key == "__multi_rl_module_spec__":
            return MultiRLModuleSpec.from_dict(inner, trusted_modules=trusted)
        if key == "__set__":
            return set(inner)
        if key == "__import__":
            kind = IMPORT_KINDS.get(setting.split("[")[0], "callable")
            return resolve_import_path(inner, setting=setting, kind=kind, trusted_modules=trusted)
        if key == MUST_PASS:
            raise ValueError(
                f"{setting} was {inner} when saved, which has no import path (a lambda or a "
                f"local function), so it was not stored; pass it again, e.g. "
                f"Algorithm.from_checkpoint(path, {setting.split('[')[0]}=...)."
            )
    return {
        k: decode_setting(v, f"{setting}[{k!r}]", trusted_modules=trusted) for k, v in value.items()
    }
