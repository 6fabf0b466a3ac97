"""Module specs and spaces from a config: which modules exist, with which spaces.

The job of rule 2 ("every module spec is derived from the config"), kept out of
AlgorithmConfig, which calls these from `get_rl_module_spec`, `get_multi_rl_module_spec`,
`env_spaces_by_module`, `mapping_error_message` and `learner_only_module_ids`. Spaces come
from (in this order) `spaces=` passed in, the env (through the env-to-module connectors),
the user's RLModuleSpec, or `config.environment(observation_space=..., action_space=...)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.multi_rl_module import ModuleID, MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.env.episodes import SETUP_EPISODE
from rlmod.errors import UnknownModuleIDError
from rlmod.utils.naming import did_you_mean

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig


def module_spaces_from_env_spaces(
    config: AlgorithmConfig, obs_space: gym.Space, act_space: gym.Space
) -> tuple[gym.Space, gym.Space]:
    pipeline = config.build_env_to_module_connector(None, obs_space, act_space)
    assert pipeline.observation_space is not None and pipeline.action_space is not None
    return pipeline.observation_space, pipeline.action_space


def single_agent_env_spaces(env: Any) -> tuple[gym.Space, gym.Space] | None:
    if env is None:
        return None
    obs = getattr(env, "single_observation_space", None) or env.observation_space
    act = getattr(env, "single_action_space", None) or env.action_space
    return obs, act


def rl_module_spec(
    config: AlgorithmConfig,
    env: Any = None,
    spaces: Mapping[str, tuple] | None = None,
    inference_only: bool | None = None,
) -> RLModuleSpec:
    """The complete spec of the default module (single-module case, rule 2).

    Spaces come from `spaces[DEFAULT_MODULE_ID]`, else `env` (through the env-to-module
    connectors), else the user's spec, else `.environment(observation_space=...,
    action_space=...)` (through the connectors). `inference_only=None` keeps the spec's.
    """
    user = config.user_rl_module_spec
    if isinstance(user, MultiRLModuleSpec):
        acting = {m: sp for m, sp in user.rl_module_specs.items() if not sp.learner_only}
        if DEFAULT_MODULE_ID in acting:
            user = acting[DEFAULT_MODULE_ID]
        elif len(acting) == 1:
            user = next(iter(acting.values()))
        else:
            raise ValueError(
                "get_rl_module_spec() is the single-module case, but rl_module_spec holds "
                f"modules {sorted(acting)} besides the learner-only ones; use "
                "get_multi_rl_module_spec() or name one module 'default_policy'."
            )
    spec = config.get_default_rl_module_spec()
    if user is not None:
        spec = spec._merged_with(user)
    obs, act = resolve_spaces(
        config,
        DEFAULT_MODULE_ID,
        spec,
        env=env,
        spaces=spaces,
        env_spaces=single_agent_env_spaces(env),
    )
    model_config = {
        **plain_model_config(config.model_config),
        **plain_model_config(spec.model_config),
    }
    return RLModuleSpec(
        module_class=spec.module_class,
        observation_space=obs,
        action_space=act,
        inference_only=spec.inference_only if inference_only is None else inference_only,
        learner_only=spec.learner_only,
        model_config=model_config,
    )


def multi_rl_module_spec(
    config: AlgorithmConfig,
    *,
    env: Any = None,
    spaces: Mapping[str, tuple] | None = None,
    inference_only: bool = False,
) -> MultiRLModuleSpec:
    """One complete sub-spec per module (rule 2); learner-only ones dropped if
    `inference_only`.

    Each module's spaces come from `spaces[module_id]`, else from the env's agents
    mapped to it (through the env-to-module connectors), else from its own sub-spec;
    in the single-agent case a module without any of these sees what the default
    module sees.
    """
    user = config.user_rl_module_spec
    sub_specs = dict(user.rl_module_specs) if isinstance(user, MultiRLModuleSpec) else {}
    base = config.get_default_rl_module_spec()
    if isinstance(user, RLModuleSpec):
        base = base._merged_with(user)
    for mid, pspec in (config.policies or {}).items():
        if pspec is not None:
            sub_specs[mid] = sub_specs[mid]._merged_with(pspec) if mid in sub_specs else pspec
    agent_spaces = spaces_by_module_from_env(config, env) if config.is_multi_agent else {}
    single_env_spaces = None if config.is_multi_agent else single_agent_env_spaces(env)
    global_mc = plain_model_config(config.model_config)
    base_mc = {**global_mc, **plain_model_config(base.model_config)}
    specs: dict[ModuleID, RLModuleSpec] = {}
    default_spaces: tuple | None = None
    for mid in config.module_ids:
        own = sub_specs.get(mid)
        if own is not None and inference_only and own.learner_only:
            continue
        spec = base if own is None else base._merged_with(own)
        env_spaces = agent_spaces.get(mid) if config.is_multi_agent else single_env_spaces
        try:
            obs, act = resolve_spaces(
                config, mid, spec, env=env, spaces=spaces, env_spaces=env_spaces, module_spaces=True
            )
        except ValueError:
            if default_spaces is None or config.is_multi_agent:
                raise
            obs, act = default_spaces  # single-agent: extra modules see what the env shows
        if mid == DEFAULT_MODULE_ID:
            default_spaces = (obs, act)
        mc = (
            base_mc
            if own is None or not own.model_config
            else {**base_mc, **plain_model_config(own.model_config)}
        )
        specs[mid] = RLModuleSpec(
            module_class=spec.module_class,
            observation_space=obs,
            action_space=act,
            inference_only=inference_only or spec.inference_only,
            learner_only=spec.learner_only,
            model_config=mc,
        )
    if isinstance(user, MultiRLModuleSpec):  # keep its class and shared parts (RLlib's)
        return MultiRLModuleSpec(
            multi_rl_module_class=user.multi_rl_module_class,
            observation_space=user.observation_space,
            action_space=user.action_space,
            model_config=user.model_config,
            rl_module_specs=specs,
        )
    return MultiRLModuleSpec(rl_module_specs=specs)


def resolve_spaces(
    config: AlgorithmConfig,
    module_id: ModuleID,
    spec: RLModuleSpec,
    *,
    env: Any,
    spaces: Mapping[str, tuple] | None,
    env_spaces: tuple | None,
    module_spaces: bool = False,
) -> tuple[gym.Space, gym.Space]:
    if spaces is not None and module_id in spaces:
        return spaces[module_id]
    if env_spaces is not None:
        return (
            env_spaces
            if module_spaces and config.is_multi_agent
            else module_spaces_from_env_spaces(config, *env_spaces)
        )
    if spec.observation_space is not None and spec.action_space is not None:
        return spec.observation_space, spec.action_space
    if config.observation_space is not None and config.action_space is not None:
        return module_spaces_from_env_spaces(config, config.observation_space, config.action_space)
    raise ValueError(
        f"Cannot infer the observation and action spaces of module {module_id!r}: no "
        "spaces=..., no env, none on its RLModuleSpec and none in the config. Pass "
        "get_*_spec(spaces=env_runner_group.get_spaces()) or env=..., set "
        "RLModuleSpec(observation_space=..., action_space=...), or call "
        "config.environment(observation_space=..., action_space=...)."
    )


def spaces_by_module_from_env(config: AlgorithmConfig, env: Any) -> dict[ModuleID, tuple]:
    """Module spaces by reverse-mapping the env's agents through policy_mapping_fn."""
    found = env_spaces_by_module(config, env)
    converted: dict[tuple[int, int], tuple[gym.Space, gym.Space]] = {}
    for _, obs, act in found.values():
        key = (id(obs), id(act))
        if key not in converted:
            converted[key] = module_spaces_from_env_spaces(config, obs, act)
    return {mid: converted[(id(o), id(a))] for mid, (_, o, a) in found.items()}


def env_spaces_by_module(
    config: AlgorithmConfig, env: Any
) -> dict[ModuleID, tuple[Any, gym.Space, gym.Space]]:
    """{module_id: (first agent mapped to it, its raw obs space, its raw action space)}.

    Reverse-maps `env.possible_agents` through `policy_mapping_fn(agent_id,
    SETUP_EPISODE)` (an EpisodeInfo with `id_=-1`, see rlmod.env.episodes);
    raises if an agent maps to an unknown or a learner-only module, or if two agents
    with different spaces map to one module.
    """
    if env is None:
        return {}
    found: dict[ModuleID, tuple[Any, gym.Space, gym.Space]] = {}
    known = set(config.module_ids) - learner_only_module_ids(config)
    for agent_id in env.possible_agents:
        mid = config.policy_mapping_fn(agent_id, SETUP_EPISODE)
        if mid not in known:
            raise UnknownModuleIDError(mapping_error_message(config, agent_id, mid))
        obs, act = env.get_observation_space(agent_id), env.get_action_space(agent_id)
        if mid in found:
            other, o_obs, o_act = found[mid]
            if (o_obs is not obs and o_obs != obs) or (o_act is not act and o_act != act):
                raise ValueError(
                    f"Agents {other!r} and {agent_id!r} are both mapped to module {mid!r} "
                    f"but see different spaces: {other!r} has ({o_obs}, {o_act}), "
                    f"{agent_id!r} has ({obs}, {act}). Map them to different modules."
                )
            continue
        found[mid] = (agent_id, obs, act)
    return found


def mapping_error_message(config: AlgorithmConfig, agent_id: Any, module_id: Any) -> str:
    """What is wrong when policy_mapping_fn maps `agent_id` to `module_id`."""
    acting = [m for m in config.module_ids if m not in learner_only_module_ids(config)]
    if module_id in learner_only_module_ids(config):
        return (
            f"policy_mapping_fn mapped agent {agent_id!r} to module {module_id!r}, which is "
            "learner-only (RLModuleSpec(learner_only=True)): it is built on Learners only "
            f"and cannot act. Map agents to one of the acting modules {acting[:10]}."
        )
    return (
        f"policy_mapping_fn mapped agent {agent_id!r} to module {module_id!r}, which is not "
        f"among the modules {acting[:10]}.{did_you_mean(str(module_id), acting)} "
        "Add it to config.multi_agent(policies=...) or fix the mapping."
    )


def learner_only_module_ids(config: AlgorithmConfig) -> set[ModuleID]:
    """Modules whose spec says `learner_only=True` (in rl_module_spec or policies)."""
    user = config.user_rl_module_spec
    specs = dict(user.rl_module_specs) if isinstance(user, MultiRLModuleSpec) else {}
    for mid, pspec in (config.policies or {}).items():
        if pspec is not None:
            specs[mid] = pspec  # _merged_with takes the flags from this one
    return {mid for mid, spec in specs.items() if spec.learner_only}


def plain_model_config(model_config: Any) -> dict[str, Any]:
    if model_config is None:
        return {}
    if isinstance(model_config, Mapping):
        return dict(model_config)
    return dataclasses.asdict(model_config)


def multi_rl_module_spec_from_policies(
    config: AlgorithmConfig,
    *,
    policy_dict: Mapping[ModuleID, Any] | None,
    single_spec: RLModuleSpec | None,
    inference_only: bool,
) -> MultiRLModuleSpec:
    """RLlib's `get_multi_rl_module_spec(policy_dict=..., single_agent_rl_module_spec=...)`.

    One spec per module of `policy_dict` (PolicySpecs or RLlib's 4-tuples; default:
    `policies`) and of a configured MultiRLModuleSpec. A module the configured
    MultiRLModuleSpec names keeps its own spec; the others take `single_spec`, else the
    configured RLModuleSpec, else the default one. Missing module classes come from the
    default spec, missing spaces from the module's PolicySpec, and model configs are
    `model_config` updated by the spec's own.
    """
    from rlmod.algorithms.policy_spec import PolicySpec

    policies: dict[ModuleID, Any] = dict(
        policy_dict if policy_dict is not None else (config.policies or {DEFAULT_MODULE_ID: None})
    )
    for mid, value in policies.items():
        if isinstance(value, tuple):
            policies[mid] = PolicySpec(*value)
    default = config.get_default_rl_module_spec()
    user = config.user_rl_module_spec
    current = user if user is not None else default
    multi_class: Any = None
    shared_mc = None
    if isinstance(current, RLModuleSpec):
        fallback = single_spec or current
        specs = {mid: fallback for mid in policies}
    else:
        multi_class, shared_mc = current.multi_rl_module_class, current.model_config
        if isinstance(default, RLModuleSpec):
            fallback = single_spec or default
            ids = list(policies) + [m for m in current.rl_module_specs if m not in policies]
            specs = {mid: current.rl_module_specs.get(mid, fallback) for mid in ids}
        elif single_spec is None:
            raise ValueError(
                f"The configured MultiRLModuleSpec ({current}) names no RLModuleSpec to build "
                "the modules from; pass get_multi_rl_module_spec(policy_dict=..., "
                "single_agent_rl_module_spec=...)."
            )
        else:
            specs = {mid: single_spec for mid in policies}
    global_mc = plain_model_config(config.model_config)
    out: dict[ModuleID, RLModuleSpec] = {}
    for mid, spec in specs.items():
        if inference_only and spec.learner_only:
            continue
        module_class = spec.module_class
        if module_class is None:
            if isinstance(default, RLModuleSpec):
                module_class = default.module_class
            elif mid in default.rl_module_specs:
                module_class = default.rl_module_specs[mid].module_class
            else:
                raise ValueError(
                    f"Module class for module {mid!r} cannot be inferred: neither the given "
                    "spec nor the algorithm's default spec names one."
                )
        obs, act = spec.observation_space, spec.action_space
        pspec = policies.get(mid, policies.get(DEFAULT_MODULE_ID))
        if pspec is not None:
            obs = obs if obs is not None else getattr(pspec, "observation_space", None)
            act = act if act is not None else getattr(pspec, "action_space", None)
        out[mid] = dataclasses.replace(
            spec,
            module_class=module_class,
            observation_space=obs,
            action_space=act,
            inference_only=inference_only,
            model_config={**global_mc, **plain_model_config(spec.model_config)},
        )
    if multi_class is None:
        return MultiRLModuleSpec(rl_module_specs=out)
    return MultiRLModuleSpec(
        multi_rl_module_class=multi_class, model_config=shared_mc, rl_module_specs=out
    )
