"""Env creation: rlmod's name registry and the one function that turns `config.env` into envs.

Used by EnvRunners (single- and multi-agent) and by the config when it infers spaces.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeAlias, TypeGuard

import gymnasium as gym

from rlmod.utils.naming import did_you_mean

EnvCreator: TypeAlias = Callable[[dict], object]
"""`env_creator(env_config) -> env`: a gymnasium Env or an rlmod MultiAgentEnv (the
EnvRunners check which)."""

_REGISTRY: dict[str, EnvCreator] = {}


def register_env(name: str, env_creator: EnvCreator) -> None:
    """Registers `env_creator(env_config) -> env` under `name` for `config.environment(name)`.

    Example:
        >>> import gymnasium as gym
        >>> from rlmod import register_env
        >>> register_env("my_cartpole", lambda cfg: gym.make("CartPole-v1", **cfg))
    """
    if not isinstance(name, str) or not callable(env_creator):
        raise TypeError("register_env(name: str, env_creator: callable(env_config) -> env).")
    _REGISTRY[name] = env_creator


_NAMESPACE_PACKAGES: dict[str, tuple[str, str]] = {
    "ALE": ("ale_py", "atari"),
    "MinAtar": ("minatar", "minatar"),
}
"""Gymnasium namespace -> (the package that registers its IDs, rlmod's extra installing it).
Registered on first use, so `config.environment("ALE/Pong-v5")` needs no import first."""


def register_namespace(env: str) -> None:
    """Registers the IDs of `env`'s namespace with gymnasium if rlmod knows its package
    (`ALE/...`: ale_py; `MinAtar/...`: minatar) and they are not registered yet.

    Raises a ValueError naming the extra to install when the package is missing.
    """
    namespace = env.partition("/")[0] if "/" in env and ":" not in env else None
    if namespace not in _NAMESPACE_PACKAGES or any(
        str(i).startswith(f"{namespace}/") for i in gym.registry
    ):
        return
    package, extra = _NAMESPACE_PACKAGES[namespace]
    try:
        if package == "ale_py":
            import ale_py

            gym.register_envs(ale_py)
        else:  # minatar registers its gymnasium IDs only when asked
            from minatar import gym as minatar_gym

            minatar_gym.register_envs()
    except ImportError as e:
        raise ValueError(
            f"env={env!r} needs the {package!r} package ({e}): pip install 'rlmod[{extra}]'."
        ) from None


def is_gym_id(env: object) -> TypeGuard[str]:
    if not isinstance(env, str) or env in _REGISTRY:
        return False
    register_namespace(env)
    return env in gym.registry


# Any: whatever the user's creator returns (a gymnasium Env or a MultiAgentEnv); callers
# check what they got.
def make_env(env: object, env_config: dict | None = None) -> Any:  # type: ignore[explicit-any]
    """One env instance from a registered name, a gymnasium ID or a callable."""
    env_config = dict(env_config or {})
    if env is None:
        raise ValueError(
            "No env is set: call config.environment(env=...) with a gymnasium ID, a name "
            "registered with rlmod.register_env, or a callable(env_config) -> env."
        )
    if isinstance(env, str):
        if env in _REGISTRY:
            return _REGISTRY[env](env_config)
        register_namespace(env)
        if env in gym.registry or ":" in env:  # module:Env-v0: gymnasium imports module
            return _gym_make(env, env_config)
        namespace = env.split("/")[0] if "/" in env else None
        hint = (
            f" No package registered the namespace {namespace!r}: import the one that does "
            "first (CLI: --gym-packages PACKAGE)."
            if namespace is not None
            and not any(str(i).startswith(f"{namespace}/") for i in gym.registry)
            else " If a package registers it, import that package first (CLI: "
            "--gym-packages PACKAGE, or --env PACKAGE:ID)."
        )
        raise ValueError(
            f"env={env!r} is neither registered with rlmod.register_env nor a gymnasium ID."
            f"{did_you_mean(env, [*_REGISTRY, *gym.registry])}{hint}"
        )
    if isinstance(env, gym.Env):
        raise TypeError(_instance_message(env))
    if callable(env):
        _check_takes_env_config(env)
        return env(env_config)
    raise TypeError(
        f"env={env!r} must be a gymnasium ID, a registered name or a callable(env_config)."
    )


def _gym_make(env: str, env_config: dict) -> Any:  # type: ignore[explicit-any]
    """`gym.make(env, **env_config)`, its lookup errors as one ValueError naming the fix."""
    try:
        return gym.make(env, **env_config)
    except ModuleNotFoundError as e:
        module = env.split(":")[0] if ":" in env else e.name
        raise ValueError(
            f"env={env!r}: gymnasium cannot import {module!r} to make it ({e}) Install it, or "
            "check the module name before the ':'."
        ) from None
    except gym.error.Error as e:  # NameNotFound, NamespaceNotFound, VersionNotFound, ...
        raise ValueError(f"env={env!r}: {e}") from None


def _instance_message(env: Any) -> str:  # type: ignore[explicit-any]
    """How to pass what `gym.make(...)` returned: its ID, or a creator."""
    spec_id = getattr(getattr(env, "spec", None), "id", None)
    by_id = f"its ID, env={spec_id!r}, or " if spec_id else ""
    return (
        f"env is an env instance ({type(env).__name__}, as gym.make(...) returns), but each "
        "EnvRunner makes its own envs, one per sub-env. Pass "
        f"{by_id}a creator: env=lambda env_config: gym.make(...)."
    )


def _check_takes_env_config(env: EnvCreator) -> None:
    """Raises a TypeError naming the fix if `env` cannot be called as `env(env_config)`
    (an env class whose __init__ takes no argument: gymnasium's convention, not RLlib's)."""
    try:
        signature = inspect.signature(env)
    except (ValueError, TypeError):  # no signature to read (a C type): let the call say
        return
    try:
        signature.bind({})
    except TypeError:
        name = getattr(env, "__name__", type(env).__name__)
        fix = (
            f"Give it one (def __init__(self, env_config=None)), or pass a creator: "
            f"env=lambda env_config: {name}(), or register it with gymnasium "
            f"(gymnasium.register(id='{name}-v0', entry_point='{getattr(env, '__module__', 'mymodule')}:{name}')) "
            f"and pass its ID (CLI: --env {getattr(env, '__module__', 'mymodule')}:{name}-v0)."
            if inspect.isclass(env)
            else "Give it that parameter: def make(env_config): ... or lambda env_config: ..."
        )
        raise TypeError(
            f"env={env!r} is called as {name}(env_config) to make each env (RLlib's "
            f"convention), but it takes no such argument. {fix}"
        ) from None


# Any: gymnasium's VectorEnv types its observations and arrays Any by default.
def make_vector_env(  # type: ignore[explicit-any]
    env: object,
    env_config: dict | None,
    num_envs: int,
    *,
    per_sub_env: bool = False,
    wrap: Callable[[gym.Env[object, object], int], gym.Env[object, object]] | None = None,
) -> gym.vector.VectorEnv:
    """A gymnasium vector env of `num_envs` sub-envs in next-step autoreset mode.

    A gymnasium ID with a native vectorized implementation of gymnasium's own (CartPole's
    `vector_entry_point`) uses it for two or more sub-envs: it steps all of them in one
    numpy call. Other packages' vector envs may observe something else than their single
    env does (ale_py's `AtariVectorEnv` gives 4 stacked 84x84 grayscale frames, channels
    first, where `gym.make("ALE/Pong-v5")` gives 210x160x3 colour frames), so they are not
    used: the EnvRunner's spaces come from a single env. Anything
    else, one sub-env (the native CartPole's numpy calls on arrays of one row took 31.5 us
    per step against 12.6 us for the plain env in a SyncVectorEnv, with the same
    observations, rewards and flags for one seed; what DQN and SAC step), and everything
    when `per_sub_env` (a guard must reach single sub-envs: restart one, reset one), is
    wrapped in a SyncVectorEnv, each sub-env `i` passed through `wrap(env, i)` if given.
    """
    env_config = dict(env_config or {})
    if (
        num_envs > 1
        and not per_sub_env
        and is_gym_id(env)
        and str(gym.registry[env].vector_entry_point).startswith("gymnasium.")
    ):
        return gym.make_vec(env, num_envs, vectorization_mode="vector_entry_point", **env_config)
    probe = make_env(env, env_config)
    if not isinstance(probe, gym.Env):
        raise TypeError(
            f"env={env!r} made a {type(probe).__name__}, not a gymnasium.Env. For multi-agent "
            "envs call config.multi_agent(policies=..., policy_mapping_fn=...)."
        )
    for name in ("observation_space", "action_space"):
        space = getattr(probe, name, None)
        if not isinstance(space, gym.Space):
            raise TypeError(
                f"env={env!r} made a {type(probe).__name__} whose {name} is a "
                f"{type(space).__name__}, not a gymnasium Space; set self.{name} in its "
                "__init__ (e.g. gymnasium.spaces.Box(...) or Discrete(n))."
            )

    def sub_env(i: int) -> Callable[[], gym.Env[object, object]]:
        def make() -> gym.Env[object, object]:
            made = probe if i == 0 else make_env(env, env_config)
            return made if wrap is None else wrap(made, i)

        return make

    # NEXT_STEP autoreset: after a done step, the next step() resets that sub-env and
    # ignores its action; EnvRunners drop that reset step's row.
    return gym.vector.SyncVectorEnv(
        [sub_env(i) for i in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
    )
