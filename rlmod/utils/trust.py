"""The trust model: which import paths a config or checkpoint may name, and what they must be.

Used wherever stored text becomes a class or function: `AlgorithmConfig.from_dict`,
`rlmod train --config`, `Algorithm.from_checkpoint`, `RLModule.from_checkpoint`. In the
spirit of PyTorch's weights-only loading and `trust_remote_code`: a path resolves only
inside `rlmod` or inside a package the caller trusts explicitly (`trusted_modules=["mypkg"]`,
`rlmod train --trust mypkg`), and it is refused *before* anything is imported. Trust follows
where code is *defined*, not the text of the path: every step of the walk after the `:`
must be defined in a trusted module (`mypkg.envs:os.environ.update` names `os`'s code
that `mypkg.envs` merely imports, and is refused), and what cannot be traced to a trusted
module (a bound built-in method, a `functools.partial`) is refused too. After the import,
the object must be of the kind its field expects (an env class, an RLModule subclass, a
connector, ...), checked before anything calls it. Errors name paths and modules, never
the repr of an object (a bound method's repr prints the object it is bound to, e.g. the
whole process environment).
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

TRUSTED_BY_DEFAULT = ("rlmod",)
"""Top-level packages whose import paths always resolve."""

# Functions inside rlmod that may stand in each field. Classes are checked by their base
# class instead; a function has no such mark, so rlmod's own ones are listed here.
_RLMOD_FUNCTIONS: dict[str, frozenset[str]] = {
    "env": frozenset(
        {
            "rlmod.env.wrappers:make_with_terminal_time_limit",
            "rlmod.env.wrappers.atari_wrappers:make_atari_env",
        }
    ),
    "policy_mapping_fn": frozenset(
        {
            "rlmod.algorithms.common_settings:default_policy_mapping_fn",
            # where it lived before; configs and checkpoints saved then name it so
            "rlmod.algorithms.algorithm_config:default_policy_mapping_fn",
        }
    ),
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
        "env": (
            "a gymnasium.Env, MultiAgentEnv or PettingZoo ParallelEnv class, or an env creator",
            env_class,
        ),
        "rl_module": ("an rlmod RLModule subclass", subclass(RLModule)),
        "connector": ("an rlmod Connector subclass", subclass(Connector)),
        "policy_mapping_fn": (
            "a mapping function (agent_id, episode, **kwargs) -> module ID",
            lambda obj: False,
        ),
        "env_runner": ("an rlmod EnvRunner subclass", env_runner_class),
        "learner": ("an rlmod Learner subclass", learner_class),
        "multi_rl_module": ("an rlmod MultiRLModule subclass", multi_rl_module_class),
        "algorithm": ("an rlmod Algorithm subclass", algorithm_class),
        "callbacks": ("an rlmod RLlibCallback subclass", callbacks_class),
        "config": ("an rlmod AlgorithmConfig subclass", config_class),
        "callable": (
            "a function defined in a package you trust (of rlmod's own functions, "
            "only those a field lists)",
            lambda obj: False,
        ),
    }


def resolve_import_path(
    path: Any, *, setting: str, kind: str, trusted_modules: Iterable[str] = ()
) -> Any:
    """The object named by `path` ('package.module:QualName'), if trusted and of `kind`.

    Args:
        path: The stored import path.
        setting: The field it came from, named in errors (e.g. "algorithm_config.json: env").
        kind: What the field expects; one of the keys of `_kind_checks()`.
        trusted_modules: Top-level packages (or dotted prefixes) the caller trusts besides
            rlmod. A function defined in a trusted package is accepted for any callable
            field: trusting a package is trusting its code (not the code it imports).

    Raises:
        TypeError, ValueError: if `trusted_modules` is not a list of dotted module names.
        UntrustedImportError: before importing anything, if `path` is outside rlmod and the
            trusted packages; while walking the name after the `:`, at the first step
            defined outside them; after it, if the object is not of `kind`.
    """
    user_packages = _check_trusted_modules(trusted_modules)
    trusted = (*TRUSTED_BY_DEFAULT, *user_packages)
    if (
        not isinstance(path, str)
        or path.count(":") != 1
        or not all(map(_is_dotted_name, path.split(":")))
    ):
        raise UntrustedImportError(
            f"{setting}: {path!r} is not an import path of the form 'package.module:Name' "
            "(dotted Python names, none of them a dunder name such as __globals__)."
        )
    module_name, qualname = path.split(":")
    if not any(_within(module_name, t) for t in trusted):
        top = module_name.split(".")[0]
        raise UntrustedImportError(
            f"{setting}: refusing to import {path!r}. A config or checkpoint may only name "
            "classes and functions inside rlmod or inside packages you trust, since importing "
            "and calling them runs their code. If you trust it, pass "
            f"trusted_modules=[{top!r}] (CLI: --trust {top}), or pass the object itself "
            "(e.g. Algorithm.from_checkpoint(path, env=MyEnv))."
        )
    obj = _walk(path, setting=setting, trusted=trusted)
    what, check = _kind_checks()[kind]
    if check(obj):
        return obj
    is_function = inspect.isfunction(obj) or inspect.ismethod(obj)
    # Whose function it is goes by where it is defined: a user-trusted package that imports
    # an rlmod function does not widen what that function may stand in for.
    user_trusted = all(
        origin is not None and any(_within(origin, t) for t in user_packages)
        for origin in _origins(obj)
    )
    if is_function and (user_trusted or path in _RLMOD_FUNCTIONS.get(kind, ())):
        return obj
    raise UntrustedImportError(
        f"{setting}: {path!r} is a {type(obj).__name__}, but this field takes {what}; refusing "
        "to use it."
        + (
            ""
            if user_trusted
            else " (Functions are accepted from packages you trust, trusted_modules=[...].)"
        )
    )


def check_env_id(env: str, *, setting: str, trusted_modules: Iterable[str] = ()) -> None:
    """Refuses gymnasium's `module:Env-v0` form of an env ID unless `module` is inside
    rlmod or a trusted package: `gym.make` imports `module` when the env is made, which
    runs its code. IDs without a colon are looked up in the registries and import nothing.

    Raises:
        UntrustedImportError: naming the module and how to trust it.
    """
    if ":" not in env:
        return
    module_name = env.split(":")[0]
    trusted = (*TRUSTED_BY_DEFAULT, *_check_trusted_modules(trusted_modules))
    if _is_dotted_name(module_name) and any(_within(module_name, t) for t in trusted):
        return
    top = module_name.split(".")[0]
    raise UntrustedImportError(
        f"{setting}: refusing the env ID {env!r}: gymnasium would import {module_name!r} to "
        "make it, which runs its code, and a config or checkpoint may only import rlmod and "
        f"packages you trust. If you trust it, pass trusted_modules=[{top!r}] (CLI: --trust "
        f"{top})."
    )


def _walk(path: str, *, setting: str, trusted: tuple[str, ...]) -> Any:
    """Imports the module of `path` and follows the name after the `:` one attribute at a
    time, refusing at the first step not defined in a `trusted` module (before any
    attribute of it is read, which could run its code)."""
    module_name, qualname = path.split(":")
    parts = qualname.split(".")
    obj: Any = None
    for i in range(len(parts) + 1):
        try:
            obj = importlib.import_module(module_name) if i == 0 else getattr(obj, parts[i - 1])
        except (ImportError, AttributeError) as e:
            raise UntrustedImportError(
                f"{setting}: cannot import {path!r} ({e}). Was the class renamed or moved "
                "since the save? Pass the object itself instead."
            ) from e
        untrusted = [
            o for o in _origins(obj) if o is None or not any(_within(o, t) for t in trusted)
        ]
        if untrusted:
            name = ":".join([module_name, ".".join(parts[:i])]) if i else module_name
            raise UntrustedImportError(
                f"{setting}: refusing to use {path!r}: {_where(name, obj, untrusted[0])}, "
                f"outside rlmod and the packages you trust ({', '.join(trusted)}). Trust "
                "goes by where code is defined, not by the module that imports it: name a "
                "class or function by the module that defines it, trust that package only if "
                "you trust its code, or pass the object itself."
            )
    return obj


def _where(name: str, obj: object, origin: str | None) -> str:
    """Where the step `name` of an import path leads, for errors (never `repr(obj)`)."""
    if origin is None:
        return (
            f"{name!r} is a {type(obj).__name__} whose defining module cannot be told "
            "(e.g. a method of a built-in object)"
        )
    if isinstance(obj, types.ModuleType):
        return f"{name!r} is the module {origin!r}"
    if isinstance(obj, type | types.FunctionType | types.MethodType | types.BuiltinFunctionType):
        return f"{name!r} is defined in {origin!r}"
    return f"{name!r} is a {type(obj).__name__} object, of a class defined in {origin!r}"


def _origins(obj: object) -> list[str | None]:
    """The modules that define `obj` (None where that cannot be told); trusted only if all
    of them are. A module is its own origin; a class or function, its `__module__`; a
    bound method, its function's and the object's it is bound to; any other object, its
    class's (an instance of a trusted class may be walked through; the kind checks refuse
    instances as the final object)."""
    if isinstance(obj, types.ModuleType):
        return [obj.__name__]
    if isinstance(obj, types.MethodType):
        return [*_origins(obj.__func__), *_origins(obj.__self__)]
    if isinstance(obj, types.BuiltinFunctionType):
        # A C function: its module's, if `__self__` is that module (or None); bound to any
        # other object (dict.update of some dict), it cannot be told.
        bound = obj.__self__
        if bound is not None and not isinstance(bound, types.ModuleType):
            return [None]
        module = getattr(obj, "__module__", None)
        return [module if isinstance(module, str) else None]
    if isinstance(obj, type | types.FunctionType):
        module = getattr(obj, "__module__", None)
        return [module if isinstance(module, str) else None]
    return [getattr(type(obj), "__module__", None)]


def _check_trusted_modules(trusted_modules: Iterable[str]) -> tuple[str, ...]:
    """`trusted_modules` as a tuple, each a dotted module name (a lone string is refused:
    it would trust each of its letters as a package)."""
    if isinstance(trusted_modules, str | bytes):
        raise TypeError(
            f"trusted_modules must be a list of package names, e.g. [{trusted_modules!r}], "
            "not a string."
        )
    packages = tuple(trusted_modules)
    for package in packages:
        if not isinstance(package, str) or not _is_dotted_name(package):
            raise ValueError(
                f"trusted_modules must be a list of package names such as 'mypkg' or "
                f"'mypkg.envs'; {package!r} is not one."
            )
    return packages


def _is_dotted_name(name: str) -> bool:
    """'a.b.c' of Python identifiers, none of them a dunder name such as '__globals__'."""
    return bool(name) and all(
        part.isidentifier() and not (part.startswith("__") and part.endswith("__"))
        for part in name.split(".")
    )


def _within(module_name: str, package: str) -> bool:
    return module_name == package or module_name.startswith(package + ".")
