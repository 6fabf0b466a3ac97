"""The trust model: which import paths a config or checkpoint may name, and what they must be.

Used wherever stored text becomes a class or function: `AlgorithmConfig.from_dict`,
`rlmod train --config`, `Algorithm.from_checkpoint`, `RLModule.from_checkpoint`. In the
spirit of PyTorch's weights-only loading and `trust_remote_code`: a path resolves only
inside `rlmod` or inside a package the caller trusts explicitly (`trusted_modules=["mypkg"]`,
`rlmod train --trust mypkg`), and it is refused *before* anything is imported. After the
import, the object must be of the kind its field expects (an env class, an RLModule
subclass, a connector, ...), checked before anything calls it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

TRUSTED_BY_DEFAULT = ("rlmod",)
"""Top-level packages whose import paths always resolve."""

# Functions inside rlmod that may stand in each field. Classes are checked by their base
# class instead; a function has no such mark, so rlmod's own ones are listed here.
_RLMOD_FUNCTIONS: dict[str, frozenset[str]] = {
    "env": frozenset({"rlmod.env.wrappers:make_with_terminal_time_limit"}),
    "policy_mapping_fn": frozenset({
        "rlmod.algorithms.common_settings:default_policy_mapping_fn",
        # where it lived before; configs and checkpoints saved then name it so
        "rlmod.algorithms.algorithm_config:default_policy_mapping_fn"}),
}


class UntrustedImportError(ValueError):
    """A config or checkpoint names code outside rlmod and the packages the user trusts,
    or code of the wrong kind for its field."""


def _kind_checks() -> dict[str, tuple[str, Callable[[Any], bool]]]:
    """Field kind -> (what it must be, check). Imported lazily: this module sits below the
    classes it checks."""
    import gymnasium as gym

    from rlmod.connectors.pipeline import Connector
    from rlmod.core.rl_module import RLModule
    from rlmod.env.multi_agent_env import MultiAgentEnv

    def subclass(*bases: type) -> Callable[[Any], bool]:
        return lambda obj: isinstance(obj, type) and issubclass(obj, bases)

    def env_class(obj: Any) -> bool:
        if subclass(gym.Env, MultiAgentEnv)(obj):
            return True
        try:  # PettingZoo parallel envs go through rlmod's adapter
            from pettingzoo import ParallelEnv
        except ImportError:
            return False
        return subclass(ParallelEnv)(obj)

    def env_runner_class(obj: Any) -> bool:
        from rlmod.env.env_runner import EnvRunner

        return subclass(EnvRunner)(obj)

    def learner_class(obj: Any) -> bool:
        from rlmod.core.learner import Learner

        return subclass(Learner)(obj)

    def multi_rl_module_class(obj: Any) -> bool:
        from rlmod.core.multi_rl_module import MultiRLModule

        return subclass(MultiRLModule)(obj)

    def callbacks_class(obj: Any) -> bool:
        from rlmod.callbacks import RLlibCallback

        return subclass(RLlibCallback)(obj)

    def algorithm_class(obj: Any) -> bool:
        from rlmod.algorithms.algorithm import Algorithm

        return subclass(Algorithm)(obj)

    def config_class(obj: Any) -> bool:
        from rlmod.algorithms.algorithm_config import AlgorithmConfig

        return subclass(AlgorithmConfig)(obj)

    return {
        "env": ("a gymnasium.Env, MultiAgentEnv or PettingZoo ParallelEnv class, or an env "
                "creator", env_class),
        "rl_module": ("an rlmod RLModule subclass", subclass(RLModule)),
        "connector": ("an rlmod Connector subclass", subclass(Connector)),
        "policy_mapping_fn": ("a mapping function (agent_id, episode, **kwargs) -> module ID",
                              lambda obj: False),
        "env_runner": ("an rlmod EnvRunner subclass", env_runner_class),
        "learner": ("an rlmod Learner subclass", learner_class),
        "multi_rl_module": ("an rlmod MultiRLModule subclass", multi_rl_module_class),
        "algorithm": ("an rlmod Algorithm subclass", algorithm_class),
        "callbacks": ("an rlmod RLlibCallback subclass", callbacks_class),
        "config": ("an rlmod AlgorithmConfig subclass", config_class),
        "callable": ("a function", lambda obj: False),
    }


def resolve_import_path(path: Any, *, setting: str, kind: str,
                        trusted_modules: Iterable[str] = ()) -> Any:
    """The object named by `path` ('package.module:QualName'), if trusted and of `kind`.

    Args:
        path: The stored import path.
        setting: The field it came from, named in errors (e.g. "algorithm_config.json: env").
        kind: What the field expects; one of the keys of `_kind_checks()`.
        trusted_modules: Top-level packages (or dotted prefixes) the caller trusts besides
            rlmod. A function from a trusted package is accepted for any callable field:
            trusting a package is trusting its code.

    Raises:
        UntrustedImportError: before importing anything, if `path` is outside rlmod and the
            trusted packages; after importing, if the object is not of `kind`.
    """
    if not isinstance(path, str) or path.count(":") != 1:
        raise UntrustedImportError(
            f"{setting}: {path!r} is not an import path of the form 'package.module:Name'."
        )
    module_name, qualname = path.split(":")
    trusted = (*TRUSTED_BY_DEFAULT, *trusted_modules)
    user_trusted = any(_within(module_name, t) for t in trusted_modules)
    if not any(_within(module_name, t) for t in trusted):
        top = module_name.split(".")[0]
        raise UntrustedImportError(
            f"{setting}: refusing to import {path!r}. A config or checkpoint may only name "
            "classes and functions inside rlmod or inside packages you trust, since importing "
            "and calling them runs their code. If you trust it, pass "
            f"trusted_modules=[{top!r}] (CLI: --trust {top}), or pass the object itself "
            "(e.g. Algorithm.from_checkpoint(path, env=MyEnv))."
        )
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UntrustedImportError(
            f"{setting}: cannot import {path!r} ({e}). Was the class renamed or moved since "
            "the save? Pass the object itself instead."
        ) from e
    what, check = _kind_checks()[kind]
    if check(obj):
        return obj
    is_function = inspect.isfunction(obj) or inspect.ismethod(obj)
    if is_function and (user_trusted or path in _RLMOD_FUNCTIONS.get(kind, ())):
        return obj
    raise UntrustedImportError(
        f"{setting}: {path!r} is a {type(obj).__name__}, but this field takes {what}; refusing "
        "to use it."
        + ("" if user_trusted else " (Functions are accepted from packages you trust, "
           "trusted_modules=[...].)")
    )


def _within(module_name: str, package: str) -> bool:
    return module_name == package or module_name.startswith(package + ".")
