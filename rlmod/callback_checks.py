"""Checks of user callbacks when they are set (`config.callbacks(...)`), not at the first
`train()`: a misspelled hook, a hook rlmod never calls, or a hook whose signature cannot
take the keyword arguments rlmod passes.

Used by the `callbacks_class` and `callbacks_on_<hook>` settings' checks
(`rlmod.algorithms.settings`); the hooks and their keywords are `rlmod.callbacks`'s.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rlmod.callbacks import HOOKS, RLlibCallback
from rlmod.utils.naming import did_you_mean

NOT_CALLED = {
    "on_env_runners_recreated": "rlmod restarts EnvRunners without this hook",
    "on_offline_eval_runners_recreated": "rlmod has no offline evaluation",
    "on_create_policy": "RLlib's old API stack (rlmod has no Policy classes)",
    "on_postprocess_trajectory": "RLlib's old API stack; use a learner connector",
    "on_learn_on_batch": "RLlib's old API stack; use a learner connector or a custom Learner",
    "on_sub_environment_created": "RLlib's old API stack; use on_environment_created",
    "on_workers_recreated": "RLlib's old API stack",
}
"""RLlib hooks a callbacks class may define that rlmod never calls, and why."""


def passed_keywords(hook: str) -> list[str]:
    """The keyword arguments rlmod passes to `hook`: those of RLlibCallback's method."""
    params = inspect.signature(getattr(RLlibCallback, hook)).parameters
    return [p.name for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]


def signature_problem(fn: Callable[..., Any], hook: str, *, skip_first: bool = False) -> str:
    """Why `fn` cannot be called as rlmod calls `hook` (keywords only), or ''."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return ""
    params = params[1:] if skip_first else params
    passed = passed_keywords(hook)
    kind = inspect.Parameter
    has_kwargs = any(p.kind is kind.VAR_KEYWORD for p in params)
    for p in params:
        if p.default is not kind.empty or p.kind in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD):
            continue
        if p.kind is kind.POSITIONAL_ONLY or p.name not in passed:
            return (
                f"it needs the argument {p.name!r}, but rlmod calls {hook} with keywords "
                f"only: {', '.join(passed)}"
            )
    missing = [] if has_kwargs else [k for k in passed if k not in {p.name for p in params}]
    if missing:
        return (
            f"it does not take the keyword(s) {', '.join(missing)} that rlmod passes; end its "
            "parameters with **kwargs"
        )
    return ""


def callbacks_class_problem(cls: Any) -> str:
    """What is wrong with a callbacks class's hooks, or '' (non-classes are not read)."""
    if not isinstance(cls, type):
        return ""
    own = {
        name
        for klass in cls.__mro__
        if klass not in (RLlibCallback, object)
        for name in vars(klass)
        if name.startswith("on_")
    }
    for name in sorted(own):
        if name in NOT_CALLED:
            return f"{cls.__name__}.{name} would never be called: {NOT_CALLED[name]}."
        if name not in HOOKS:
            hint = did_you_mean(name, HOOKS)
            if hint:
                return f"{cls.__name__}.{name} is not a hook, so it would never be called.{hint}"
    for hook in HOOKS:
        if hook not in own:
            continue
        raw = inspect.getattr_static(cls, hook)
        fn = raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw
        bound = isinstance(raw, classmethod) or inspect.isfunction(raw)  # self or cls first
        problem = signature_problem(fn, hook, skip_first=bound)
        if problem:
            return f"{cls.__name__}.{hook}: {problem}."
    return ""
