"""Setting: one validated, documented field of an AlgorithmConfig, its fluent setter, and
value checks.

Each setting is declared once, as a `Setting` class attribute of a config class (its
default, section, check and doc). That one table drives everything else: the fluent
setters (`SectionSetter`: `config.training(lr=...)` takes exactly the settings of section
"training", with the keyword names and signature built from the table), the value checks
when a value is set (a bad value fails at the line that sets it, with the setting's name in
the message), the defaults (`AlgorithmConfig.defaults()`, which a subclass changes with
`setting_defaults`), `repr`, and `to_dict`/`from_dict`.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import types
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar, overload

import gymnasium as gym

from rlmod.algorithms.renamed import setting_hint
from rlmod.core.multi_rl_module import MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.utils.naming import did_you_mean

Check = Callable[[Any], Any]
_Config = TypeVar("_Config")


class NotProvided:
    """The default of every setter keyword: "not passed" (None is a meaningful value);
    RLlib's name for the same marker."""

    def __repr__(self) -> str:
        return "NotProvided"


NOT_PROVIDED: Any = NotProvided()


class Invalid(ValueError):
    """Raised by a check with what a valid value looks like; Setting adds name and value."""


class InvalidKind(TypeError):
    """Like Invalid, for a value of the wrong kind (becomes a TypeError)."""


class Setting:
    """A config field: its section (the setter that sets it), default, check and doc.

    Reading returns the instance's value, or `derive(config)` where that value is None and
    the setting is derived when unset (RLlib's properties such as
    `train_batch_size_per_learner`; `to_dict()` keeps the None the user left), or
    `view(config, value)` where reading always shows a computed value (RLlib's
    `rl_module_spec`: the user's spec merged into the default). Writing
    checks the value, refuses on a frozen config, and drops the cached per-module copies.
    """

    def __init__(
        self,
        default: Any,
        *,
        section: str,
        check: Check | None = None,
        doc: str = "",
        derive: Callable[[Any], Any] | None = None,
        view: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.default = default
        self.view = view
        self.section = section
        self.check = check
        self.doc = doc
        self.derive = derive
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.name]
        if self.view is not None:
            return self.view(obj, value)
        if value is None and self.derive is not None:
            return self.derive(obj)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        if obj.__dict__.get("_frozen", False):
            raise AttributeError(
                f"Cannot set attribute ({self.name}) of an already frozen AlgorithmConfig "
                "(RLlib's words): it belongs to a built Algorithm or is a per-module copy. "
                "Change a config.copy() instead."
            )
        obj.__dict__[self.name] = self.validate(value)
        obj.__dict__["_per_module_configs"] = {}

    def validate(self, value: Any) -> Any:
        if self.check is None or is_search_space(value):
            return value  # a Tune search space: each trial's value is checked in the trial
        try:
            return self.check(value)
        except InvalidKind as e:
            raise TypeError(f"{self.name}={value!r} is of the wrong kind: {e}") from None
        except Invalid as e:
            raise ValueError(f"{self.name}={value!r} is invalid: {e}") from None


def is_search_space(value: Any) -> bool:
    """Whether `value` is a Ray Tune search space (`tune.grid_search([...])`, a
    `tune.uniform(...)` etc. Domain): settings accept them, as RLlib's config does, for
    Tune to resolve per trial (decided without importing Ray)."""
    if isinstance(value, dict):
        return set(value) == {"grid_search"} and isinstance(value["grid_search"], list)
    return type(value).__module__.startswith("ray.tune.search")


def search_spaces(config: Any) -> list[str]:
    """The settings of `config` that hold a Tune search space."""
    return [n for n in type(config).settings() if is_search_space(config.__dict__[n])]


class SectionSetter:
    """A fluent setter, `config.<name>(**settings) -> config`, built from the settings table.

    Its keywords are the settings whose `section` is this setter's, in the config's class
    (so `PPOConfig().training` takes PPO's settings and the common ones, with no
    per-algorithm method), plus `accepts` (settings of another section that RLlib's setter
    also takes) and `aliases` (keyword -> setting name, where RLlib's keyword differs from
    the stored name). `inspect.signature` and `help()` show those keywords; an unknown one
    raises TypeError with the closest valid name. `prepare(config, values)` may rewrite
    the values (by setting name) before they are set, for setters that merge or convert.
    """

    def __init__(
        self,
        section: str,
        *,
        doc: str,
        positional: Sequence[str] = (),
        accepts: Sequence[str] = (),
        aliases: Mapping[str, str] | None = None,
        prepare: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.section = section
        self.doc = doc
        self.positional = tuple(positional)
        self.accepts = tuple(accepts)
        self.aliases = dict(aliases or {})
        self.prepare = prepare
        self.name = section
        self._functions: dict[type, Callable[..., Any]] = {}

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Callable[..., Any]: ...
    @overload
    def __get__(self, obj: _Config, objtype: type | None = None) -> Callable[..., _Config]: ...

    def __get__(self, obj: Any, objtype: type | None = None) -> Callable[..., Any]:
        function = self._function_for(type(obj) if obj is not None else objtype or object)
        return function if obj is None else types.MethodType(function, obj)

    def keywords(self, cls: type) -> dict[str, str]:
        """Keyword -> setting name, for config class `cls` (whose `settings()` is the table)."""
        table: dict[str, Setting] = cls.settings()  # type: ignore[attr-defined]
        names = {n: n for n, st in table.items() if st.section == self.section}
        names.update((n, n) for n in self.accepts)
        for keyword, setting_name in self.aliases.items():
            names.pop(setting_name, None)
            names[keyword] = setting_name
        for name in reversed(self.positional):  # positional ones first, in their order
            names = {name: names[name], **names}
        return names

    def _function_for(self, cls: type) -> Callable[..., Any]:
        cached = self._functions.get(cls)
        if cached is not None:
            return cached
        keywords = self.keywords(cls)
        setter = self

        def function(config: Any, *args: Any, **kwargs: Any) -> Any:
            if len(args) > len(setter.positional):
                raise TypeError(
                    f".{setter.name}() takes {len(setter.positional)} positional argument(s) "
                    f"{list(setter.positional)}; pass settings by keyword."
                )
            for name, value in zip(setter.positional, args, strict=False):
                if name in kwargs:
                    raise TypeError(f".{setter.name}() got multiple values for {name!r}.")
                kwargs[name] = value
            for key in kwargs:
                if key not in keywords:
                    raise TypeError(
                        f".{setter.name}() got an unexpected keyword argument {key!r}."
                        f"{setting_hint(key) or did_you_mean(key, keywords)} "
                        f"Valid: {sorted(keywords)}."
                    )
            values = {keywords[k]: v for k, v in kwargs.items()}
            if setter.prepare is not None:
                values = setter.prepare(config, values)
            for name, value in values.items():
                setattr(config, name, value)
            return config

        table: dict[str, Setting] = cls.settings() if hasattr(cls, "settings") else {}
        kind = inspect.Parameter
        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                kind("self", kind.POSITIONAL_OR_KEYWORD),
                *(
                    kind(
                        k,
                        kind.POSITIONAL_OR_KEYWORD if k in self.positional else kind.KEYWORD_ONLY,
                        default=NOT_PROVIDED,
                    )
                    for k in keywords
                ),
            ]
        )
        lines = [
            f"    {k}: {table[n].doc}" for k, n in keywords.items() if n in table and table[n].doc
        ]
        function.__doc__ = self.doc + (
            "\n\n    Keywords (each a setting; see its check):\n" + "\n".join(lines)
            if lines
            else ""
        )
        function.__name__ = self.name
        function.__qualname__ = f"{cls.__name__}.{self.name}"
        function.__module__ = cls.__module__
        self._functions[cls] = function
        return function


def integer(*, min: int = 0, max: int | None = None) -> Check:  # noqa: A002 - reads like the math
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidKind(f"expected an int >= {min}.")
        if v < min or (max is not None and v > max):
            raise Invalid(f"must be an int >= {min}" + ("." if max is None else f" and <= {max}."))
        return v

    return check


def auto_or_integer(*, min: int = 1) -> Check:  # noqa: A002 - reads like the math
    """'auto' (the library derives the value) or an int >= min."""
    as_int = integer(min=min)

    def check(v: Any) -> Any:
        if isinstance(v, str) and v == "auto":
            return v
        try:
            return as_int(v)
        except InvalidKind:
            raise InvalidKind(f"expected 'auto' or an int >= {min}.") from None
        except Invalid:
            raise Invalid(f"must be 'auto' or an int >= {min}.") from None

    return check


def number(
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> Check:
    """A finite float in the given interval. NaN and +-inf are always refused: an infinite
    bound means "no bound", never "inf is a valid value" (`lr=inf` or `gamma=nan` would turn
    every weight into NaN after one update)."""
    lb, rb = "(" if low_open else "[", ")" if high_open else "]"
    expect = f"a number in {lb}{low}, {high}{rb}"

    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InvalidKind(f"expected {expect}.")
        v = float(v)
        if not math.isfinite(v):
            raise Invalid(f"must be finite ({expect}); NaN and infinity are refused.")
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
        if not ok:
            raise Invalid(f"must be {expect}.")
        return v

    return check


def optional(inner: Check) -> Check:
    def check(v: Any) -> Any:
        return None if v is None else inner(v)

    return check


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise InvalidKind("expected True or False.")
    return v


def one_of(*choices: Any) -> Check:
    def check(v: Any) -> Any:
        if v not in choices:
            raise Invalid(f"must be one of {list(choices)}.")
        return v

    return check


def callable_or_none(v: Any) -> Any:
    if v is not None and not callable(v):
        raise InvalidKind("expected a callable (function or class) or None.")
    return v


def callback_classes(v: Any) -> Any:
    """`callbacks_class`: a callable making a callbacks object (an RLlibCallback subclass),
    or a list of them; None reads as RLlibCallback (RLlib's default)."""
    if v is None:
        from rlmod.callbacks import RLlibCallback

        return RLlibCallback
    from rlmod.callback_checks import callbacks_class_problem

    items = v if isinstance(v, list | tuple) else [v]
    if not all(callable(c) for c in items):
        raise InvalidKind("expected an RLlibCallback subclass or a list of them.")
    for c in items:  # hook names and signatures now, not at the first train()
        problem = callbacks_class_problem(c)
        if problem:
            raise Invalid(problem)
    return list(v) if isinstance(v, list | tuple) else v


def settings_dict_or_none(v: Any) -> Any:
    """`evaluation_config`: a dict of settings (checked by the config's setter) or None."""
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise InvalidKind(
            "expected a dict of settings (e.g. PPOConfig.overrides(...)), an "
            "AlgorithmConfig, or None."
        )
    return dict(v)


def callables_or_none(v: Any) -> Any:
    """A per-hook callback: a callable, a list of callables, or None."""
    items = [] if v is None else (v if isinstance(v, list | tuple) else [v])
    if not all(callable(c) for c in items):
        raise InvalidKind("expected a callable, a list of callables, or None.")
    return list(v) if isinstance(v, list | tuple) else v


def hook_callables(hook: str) -> Check:
    """`callbacks_on_<hook>`: callables_or_none, each able to take the keyword arguments
    rlmod passes to `hook` (checked when set, not at the first call)."""

    def check(v: Any) -> Any:
        from rlmod.callback_checks import signature_problem

        v = callables_or_none(v)
        for fn in [] if v is None else (v if isinstance(v, list) else [v]):
            problem = signature_problem(fn, hook)
            if problem:
                name = getattr(fn, "__qualname__", repr(fn))
                raise Invalid(f"{name} cannot be called as {hook}: {problem}.")
        return v

    return check


def path_string(v: Any) -> str:
    """A filesystem path, stored as a string (so configs stay JSON)."""
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str) or not v:
        raise InvalidKind("expected a path (a non-empty str or os.PathLike).")
    return v


def offline_input(v: Any) -> Any:
    """`input_`: 'sampler', or a path / glob / list of them (stored as strings)."""
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if isinstance(v, str) and v:
        return v
    if isinstance(v, list | tuple) and v and all(isinstance(p, str | os.PathLike) for p in v):
        return [os.fspath(p) for p in v]
    raise InvalidKind("expected 'sampler', a path or glob, or a non-empty list of paths.")


def env_or_none(v: Any) -> Any:
    """`env`: a gymnasium ID or registered name, a callable(env_config) -> env (an env class
    or a creator function), or None. An env instance is refused: each EnvRunner makes its
    own envs, one per sub-env."""
    if v is None or isinstance(v, str) or callable(v):
        return v
    if isinstance(v, gym.Env):
        from rlmod.env.registry import _instance_message

        raise InvalidKind(_instance_message(v))
    raise InvalidKind(
        "expected a gymnasium ID, a name registered with rlmod.register_env, or a "
        "callable(env_config) -> env such as an env class."
    )


def space_or_none(v: Any) -> Any:
    if v is not None and not isinstance(v, gym.Space):
        raise InvalidKind("expected a gymnasium.spaces.Space or None.")
    return v


def mapping(v: Any) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise InvalidKind("expected a dict.")
    return dict(v)


def schedule_or_number(*, low: float = 0.0) -> Check:
    """A float > low, or a piecewise-linear schedule [[timestep, value], ...] of values >= low.

    A schedule may reach `low` (a learning rate decayed linearly to 0); a constant may not.
    """
    as_number = number(low=low, low_open=True)
    as_point = number(low=low)

    def check(v: Any) -> Any:
        if isinstance(v, list | tuple):
            points = [list(p) for p in v]
            if not points or any(len(p) != 2 for p in points):
                raise Invalid("a schedule must be a non-empty list of [timestep, value] pairs.")
            steps = [p[0] for p in points]
            if not all(
                isinstance(t, int | float)
                and not isinstance(t, bool)
                and math.isfinite(t)
                and t == int(t)
                for t in steps
            ):
                raise Invalid("a schedule's timesteps must be finite whole numbers.")
            if steps[0] != 0 or steps != sorted(steps):
                raise Invalid("a schedule's timesteps must start at 0 and increase.")
            return [[int(t), as_point(x)] for t, x in points]
        return as_number(v)

    return check


def collection_or_callable(v: Any) -> Any:
    if v is None or callable(v):
        return v
    if isinstance(v, Collection) and not isinstance(v, str):
        return set(v)
    raise InvalidKind("expected a collection of module IDs, a callable(module_id, batch), or None.")


def learner_class_or_none(v: Any) -> Any:
    """`learner_class`: a Learner subclass (e.g. PPOLearner with a custom loss) or None."""
    from rlmod.core.learner import Learner

    if v is not None and not (isinstance(v, type) and issubclass(v, Learner)):
        raise InvalidKind(
            "expected a subclass of rlmod.core.Learner (or None for the algorithm's default)."
        )
    return v


def learner_connector_factory(v: Any) -> Any:
    """`learner_connector`: a callable; what it returns is checked now where it can be
    made without spaces (RLlib's factories mostly ignore them), so a piece rlmod cannot
    run on a Learner is refused here rather than at the first update."""
    callable_or_none(v)
    if v is None:
        return v
    try:
        made = v(None, None)
    except Exception:  # needs the real spaces: checked when the Learner builds it
        return v
    from rlmod.algorithms.algorithm_config import learner_pieces

    try:
        learner_pieces(made)
    except TypeError as e:
        raise InvalidKind(str(e)) from None
    return v


def spec_or_none(v: Any) -> Any:
    """`rl_module_spec`: an RLModuleSpec, a MultiRLModuleSpec or None."""
    if v is not None and not isinstance(v, RLModuleSpec | MultiRLModuleSpec):
        raise InvalidKind("expected an RLModuleSpec, a MultiRLModuleSpec or None.")
    return v


def policies(v: Any) -> dict[str, RLModuleSpec | None] | None:
    """`policies`: module IDs (a collection) or module ID -> RLModuleSpec (or None), as a
    dict. A PolicySpec or RLlib's 4-tuple gives its spaces; its config is taken by the
    `multi_agent()` setter (`policy_overrides`)."""
    if v is None:
        return None
    if isinstance(v, Mapping):
        from rlmod.algorithms.policy_spec import policy_entry

        items = {}
        for mid, value in v.items():
            spec, _ = policy_entry(mid, value)  # PolicySpec / 4-tuple: its spaces
            if spec is not None and not isinstance(spec, RLModuleSpec):
                raise InvalidKind(
                    f"policies[{mid!r}] must be an RLModuleSpec, a PolicySpec, RLlib's "
                    "4-tuple or None."
                )
            items[mid] = spec
    elif isinstance(v, set | frozenset):
        # A set has no order of its own (its iteration order depends on PYTHONHASHSEED):
        # sorted, so module order, and with it every seeded result, is the same each run.
        try:
            items = dict.fromkeys(sorted(v))
        except TypeError:
            raise InvalidKind("module IDs must be strings.") from None
    elif isinstance(v, list | tuple):
        items = dict.fromkeys(v)
    else:
        raise InvalidKind("expected a set of module IDs or a dict of module ID -> RLModuleSpec.")
    bad = [m for m in items if not isinstance(m, str)]
    if bad:
        raise InvalidKind(f"module IDs must be strings, got {bad[0]!r}.")
    if not items:
        raise Invalid("needs at least one module ID.")
    return items


def policy_overrides(config: Any, values: dict[str, Any]) -> dict[str, Any]:
    """`multi_agent(policies=...)`: the config of each PolicySpec / 4-tuple becomes that
    module's `algorithm_config_overrides_per_module` entry (given overrides win)."""
    given = values.get("policies")
    if not isinstance(given, Mapping):
        return values
    from rlmod.algorithms.policy_spec import policy_entry

    found = {}
    for mid, value in given.items():
        _, overrides = policy_entry(mid, value)
        if overrides:
            found[mid] = type(config).overrides(**overrides)
    if found:
        current = values.get(
            "algorithm_config_overrides_per_module", config.algorithm_config_overrides_per_module
        )
        merged = {mid: dict(over) for mid, over in found.items()}
        for mid, over in mapping(current).items():
            merged[mid] = {**merged.get(mid, {}), **over}
        values["algorithm_config_overrides_per_module"] = merged
    return values


def overrides_per_module(v: Any) -> dict[str, dict[str, Any]]:
    """`algorithm_config_overrides_per_module`: module ID -> dict of settings."""
    v = mapping(v)
    for mid, over in v.items():
        if not isinstance(over, Mapping):
            raise InvalidKind(f"the overrides of module {mid!r} must be a dict of settings.")
    return {mid: dict(over) for mid, over in v.items()}


def model_config(v: Any) -> Any:
    """`model_config`: a dict of model settings or a dataclass instance (e.g. the
    algorithm's DefaultModelConfig); None means {}."""
    if v is None:
        return {}
    if isinstance(v, Mapping):
        return dict(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return v
    raise InvalidKind(
        f"expected a dict of model settings or a dataclass instance, got a "
        f"{type(v).__name__}; e.g. model_config={{'fcnet_hiddens': [64, 64]}}."
    )


def reward_clip(v: Any) -> Any:
    """`clip_rewards`: None or False (off), True (each reward's sign), a bound c > 0 (clip
    to [-c, c]) or a pair (low, high) with low < high (a list from JSON becomes the pair)."""
    if v is None or isinstance(v, bool):
        return v
    expect = "expected None/False (off), True (sign), a bound c > 0 or a pair (low, high)"
    if isinstance(v, list | tuple):
        if len(v) != 2:
            raise InvalidKind(f"{expect}; a pair has two numbers.")
        low, high = (number()(b) for b in v)  # finite numbers, not bools
        if not low < high:
            raise Invalid(f"the pair (low, high) needs low < high, got ({low}, {high}).")
        return (low, high)
    if not isinstance(v, int | float):
        raise InvalidKind(f"{expect}.")
    c = number()(v)
    if c <= 0:
        raise Invalid(
            "the bound c clips rewards to [-c, c], so it must be > 0 (clip_rewards=1.0 "
            "for [-1, 1]); None or False turns clipping off."
        )
    return c
