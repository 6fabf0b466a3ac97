"""AlgorithmConfig: the single source of truth from which every module spec is derived.

Used by users (fluent setters), EnvRunners and Learners (`get_rl_module_spec`,
`get_multi_rl_module_spec`, `get_config_for_module`) and Algorithm (`build_algo`).
The settings themselves are declared once, in `rlmod.algorithms.common_settings` (and in
each algorithm's config class); spec and space resolution live in
`rlmod.algorithms.module_specs`.
"""

from __future__ import annotations

import copy
import inspect
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import torch

from rlmod.algorithms import module_specs
from rlmod.algorithms import settings as s
from rlmod.algorithms.common_settings import CommonSettings, default_policy_mapping_fn
from rlmod.algorithms.config_json import decode_setting, encode_setting
from rlmod.algorithms.experimental import check_experimental
from rlmod.algorithms.renamed import RemovedSetter, setting_hint
from rlmod.algorithms.settings import NOT_PROVIDED, SectionSetter, Setting
from rlmod.callbacks import HOOKS
from rlmod.connectors.env_to_module import default_env_to_module
from rlmod.connectors.module_to_env import default_module_to_env
from rlmod.connectors.pipeline import Connector, ConnectorPipeline, as_connector_list
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.multi_rl_module import ModuleID, MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.errors import UnknownModuleIDError
from rlmod.utils.naming import did_you_mean

if TYPE_CHECKING:
    from typing import Self

    from rlmod.algorithms.algorithm import Algorithm

logger = logging.getLogger(__name__)

__all__ = ["AlgorithmConfig", "call_connector_factory", "default_policy_mapping_fn", "dict_key"]

_DICT_KEYS = {"train_batch_size_per_learner": "_train_batch_size_per_learner"}
"""Settings `to_dict()` stores under RLlib's key (its raw field), not the setting's name."""
_FROM_DICT_KEYS = {v: k for k, v in _DICT_KEYS.items()}


def dict_key(name: str) -> str:
    """The key under which `AlgorithmConfig.to_dict()` stores setting `name`."""
    return _DICT_KEYS.get(name, name)


_UNSET: Any = NOT_PROVIDED
"""Marks an argument the caller did not pass (None is a meaningful value)."""


def _merge_learner_config_dict(config: AlgorithmConfig, values: dict[str, Any]) -> dict[str, Any]:
    """`learner_config_dict` updates the current dict, as RLlib's setters do."""
    if "learner_config_dict" in values:
        values["learner_config_dict"] = {
            **config.learner_config_dict,
            **s.mapping(values["learner_config_dict"]),
        }
    return values


def _evaluation_values(config: AlgorithmConfig, values: dict[str, Any]) -> dict[str, Any]:
    """An AlgorithmConfig as `evaluation_config` is taken whole (its settings as a dict, as
    RLlib's `get_evaluation_config_object` takes one); a dict updates the one set before
    (RLlib deep-updates it; rlmod merges top-level settings), its keys checked now."""
    given = values.get("evaluation_config")
    if isinstance(given, AlgorithmConfig):
        values["evaluation_config"] = {
            n: given.__dict__[n]
            for n in given.settings()
            if n not in ("evaluation_config", "evaluation_interval")
        }
    elif isinstance(given, Mapping):
        values["evaluation_config"] = {
            **(config.evaluation_config or {}),
            **type(config).overrides(**given),
        }
    if values.get("evaluation_duration") == "auto":
        raise ValueError(
            "evaluation_duration='auto' (RLlib: evaluate as long as the parallel training "
            "step runs) is not offered; give a number of episodes or timesteps."
        )
    return values


class AlgorithmConfig(CommonSettings):
    """Settings of an algorithm, grouped by the fluent setter that sets them.

    Every setter takes keyword arguments only (the env and the callbacks class may come
    first, as in RLlib) and returns the config, so calls chain. Its keywords are the
    settings of its section in this class's table (see `SectionSetter`). Values are
    checked when set (ValueError/TypeError naming the setting), cross-field rules in
    `validate()`, which `build_algo()` always runs.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> config = (PPOConfig().environment("CartPole-v1")
        ...           .env_runners(num_envs_per_env_runner=8).training(lr=3e-4))
        >>> config.total_train_batch_size
        4000
    """

    algo_class: ClassVar[type[Algorithm] | None] = None

    setting_defaults: ClassVar[dict[str, Any]] = {}
    """Setting name -> this algorithm's default, where it differs from the declared one
    (PPO's `num_epochs=30`); `defaults()` merges them along the class hierarchy."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in cls.__dict__.get("setting_defaults", {}).items():
            if name not in cls.settings():
                raise TypeError(
                    f"{cls.__name__}.setting_defaults names {name!r}, which is "
                    f"not a setting.{did_you_mean(name, cls.settings())}"
                )
            cls.settings()[name].validate(value)

    def __init__(self, algo_class: type[Algorithm] | None = None) -> None:
        """`algo_class` (RLlib's argument): the Algorithm `build_algo()` builds, e.g.
        `AlgorithmConfig(algo_class=PPO)`; the Algorithm then takes this config's settings
        into its own config class (PPOConfig), as RLlib's does."""
        if algo_class is not None:
            self.__dict__["algo_class"] = algo_class
        if "ray.tune" in sys.modules:  # Tune loaded: a config is Tune's param_space
            _register_with_tune(self.algo_class)
        self.__dict__["_frozen"] = False
        self.__dict__["_per_module_configs"] = {}
        for name, value in self.defaults().items():
            self.__dict__[name] = copy.deepcopy(value)

    # ------------------------------------------------------------------ settings table
    @classmethod
    def settings(cls) -> dict[str, Setting]:
        """All settings of this config class by name (the class attribute table)."""
        table: dict[str, Setting] | None = cls.__dict__.get("_settings_table")
        if table is None:
            table = {}
            for klass in reversed(cls.__mro__):
                for name, value in vars(klass).items():
                    if isinstance(value, Setting):
                        table[name] = value
            type.__setattr__(cls, "_settings_table", table)
        return table

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every setting's default for this class: the declared one, or the nearest
        class's `setting_defaults` entry."""
        found: dict[str, Any] | None = cls.__dict__.get("_defaults_table")
        if found is None:
            found = {name: st.default for name, st in cls.settings().items()}
            for klass in reversed(cls.__mro__):
                found.update(vars(klass).get("setting_defaults", {}))
            type.__setattr__(cls, "_defaults_table", found)
        return found

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.settings() and not name.startswith("_"):
            raise AttributeError(
                f"{type(self).__name__} has no setting {name!r}."
                f"{setting_hint(name) or did_you_mean(name, self.settings())}"
            )
        super().__setattr__(name, value)

    # ------------------------------------------------------------------ fluent setters
    # Each takes the settings of its section (RLlib's setter and keyword names); see
    # SectionSetter. What a setter does beyond setting is in its `prepare`.
    environment = SectionSetter(
        "environment",
        positional=("env",),
        doc=("Sets the env and its config, or the spaces for env-less training."),
    )
    env_runners = SectionSetter("env_runners", doc="Sets how EnvRunners sample.")
    learners = SectionSetter(
        "learners",
        prepare=_merge_learner_config_dict,
        doc=(
            "Sets how many Learners train, what they do with a NaN/inf update, and free "
            "settings for a custom Learner (`learner_config_dict` updates the current dict, as "
            "RLlib's does)."
        ),
    )
    training = SectionSetter(
        "training",
        accepts=("learner_config_dict",),
        prepare=_merge_learner_config_dict,
        doc=(
            "Sets the training settings: those common to all algorithms and the "
            "algorithm's own. `learner_config_dict` is also accepted here, as RLlib still "
            "accepts it in `.training()` (its home is `.learners()`)."
        ),
    )
    rl_module = SectionSetter(
        "rl_module", doc=("Sets the module specs, model config and per-module config overrides.")
    )
    multi_agent = SectionSetter(
        "multi_agent",
        accepts=("algorithm_config_overrides_per_module",),
        prepare=s.policy_overrides,
        doc=(
            "Sets what only matters with several agents: modules and the agent mapping. "
            "`algorithm_config_overrides_per_module` is also accepted here, as RLlib still "
            "accepts it in `.multi_agent()` (its home is `.rl_module()`, rule 6)."
        ),
    )
    fault_tolerance = SectionSetter(
        "fault_tolerance",
        doc=(
            "Sets how EnvRunners survive failing envs and dying actors (RLlib's names): "
            "sub-envs recreated in place, remote EnvRunners restarted or ignored."
        ),
    )
    evaluation = SectionSetter(
        "evaluation",
        prepare=_evaluation_values,
        doc=(
            "Sets when, where, how long and with which settings to evaluate (RLlib's "
            "`.evaluation()` names and defaults; its offline-evaluation, timeout and "
            "custom-function options are not offered). A dict `evaluation_config` updates the "
            "one set before, an AlgorithmConfig replaces it whole; keys are checked now, so a "
            "misspelled key fails here, not at the first evaluation."
        ),
    )
    callbacks = SectionSetter(
        "callbacks",
        positional=("callbacks_class",),
        aliases={hook: f"callbacks_{hook}" for hook in HOOKS},
        doc=(
            "Sets the callbacks (RLlib's `.callbacks()`): an RLlibCallback subclass or a "
            "list of them (None: RLlibCallback, which does nothing), and per hook a "
            "callable or a list of callables, called after the classes' methods, in order."
        ),
    )
    reporting = SectionSetter(
        "reporting", doc="Sets how metrics are smoothed and how much work one train() call does."
    )
    offline_data = SectionSetter(
        "offline_data",
        doc=("Sets where offline algorithms read episodes and where EnvRunners write them."),
    )
    checkpointing = SectionSetter(
        "checkpointing",
        doc=("Sets when `train()` saves checkpoints, where, and how many it keeps."),
    )
    debugging = SectionSetter("debugging", doc="Sets the seed.")
    # RLlib's removed setters: reading one raises an AttributeError saying where it went.
    rollouts = RemovedSetter()
    resources = RemovedSetter()
    exploration = RemovedSetter()

    def get_evaluation_config_object(self) -> Self:
        """The config of the evaluation EnvRunners (RLlib's name): this config with
        `evaluation_config` applied, `num_env_runners=evaluation_num_env_runners`,
        `in_evaluation=True`, and `evaluation_explore` if set."""
        eval_config = self.copy()
        for name, value in (self.evaluation_config or {}).items():
            setattr(eval_config, name, copy.deepcopy(value))
        eval_config.evaluation_config = None
        eval_config.evaluation_interval = None
        eval_config.num_env_runners = self.evaluation_num_env_runners
        eval_config.in_evaluation = True
        if self.evaluation_explore is not None:
            eval_config.explore = self.evaluation_explore
        return eval_config

    # ------------------------------------------------------------------ RLlib compatibility
    def framework(self, framework: str = _UNSET, **unknown: Any) -> Self:
        """Accepts RLlib's `.framework("torch")`; rlmod is PyTorch only, so anything else
        (and RLlib's tf/torch.compile options) is refused."""
        if unknown:
            raise TypeError(
                f".framework() got {sorted(unknown)}: rlmod has no tf or torch.compile "
                "settings; only .framework('torch') is accepted (rlmod is PyTorch only)."
            )
        if framework is not _UNSET and framework != "torch":
            raise ValueError(
                f"framework={framework!r}: rlmod is PyTorch only; use .framework('torch') "
                "or drop the call."
            )
        return self

    def api_stack(
        self,
        enable_rl_module_and_learner: bool = _UNSET,
        enable_env_runner_and_connector_v2: bool = _UNSET,
    ) -> Self:
        """Accepts RLlib's switch to its new API stack, the only stack rlmod has; turning
        either flag off is refused."""
        for name, value in (
            ("enable_rl_module_and_learner", enable_rl_module_and_learner),
            ("enable_env_runner_and_connector_v2", enable_env_runner_and_connector_v2),
        ):
            if value is not _UNSET and value is not True:
                raise ValueError(
                    f"api_stack({name}={value!r}): rlmod has only RLlib's new API stack "
                    "(RLModule, Learner, EnvRunner, ConnectorV2); there is no old stack to "
                    "switch to. Drop the argument or pass True."
                )
        return self

    def experimental(self, **options: Any) -> Self:
        """Accepts RLlib's `.experimental()` options where rlmod honours them (nothing is
        stored; see `rlmod.algorithms.experimental`): `_use_msgpack_checkpoints` (either
        value: rlmod's checkpoints never hold pickle), `_validate_config=True`,
        `_torch_grad_scaler_class=None`, `_torch_lr_scheduler_classes=None`, and any bool
        for the old-stack flags RLlib's new stack never reads
        (`_tf_policy_handles_more_than_one_loss`, `_disable_preprocessor_api`,
        `_disable_action_flattening`, `_disable_initialize_loss_from_dummy_batch`). Turning
        validation off, a scaler class or LR-scheduler classes are refused with rlmod's
        alternative; an unknown option is a TypeError naming the closest one."""
        check_experimental(options)
        return self

    @classmethod
    def overrides(cls, **kwargs: Any) -> dict[str, Any]:
        """A dict of checked settings to apply over a main config (RLlib's classmethod),
        e.g. `algorithm_config_overrides_per_module={"p1": PPOConfig.overrides(lr=1e-3)}`.

        Unknown names raise KeyError, as RLlib's do (with the closest valid name);
        values are checked as a setter checks them. `lambda` is read as `lambda_`.
        """
        table = cls.settings()
        out: dict[str, Any] = {}
        for key, value in kwargs.items():
            name = "lambda_" if key == "lambda" and "lambda_" in table else key
            if name not in table:
                raise KeyError(
                    f"Invalid property name {key!r} for config class {cls.__name__}."
                    f"{setting_hint(key) or did_you_mean(key, table)}"
                )
            out[name] = table[name].validate(value)
        return out

    def update_from_dict(
        self, config_dict: Mapping[str, Any], *, trusted_modules: Iterable[str] = ()
    ) -> Self:
        """Sets every setting in `config_dict` (RLlib's name), e.g. another config's
        `to_dict()`; JSON forms (import paths, spaces, specs) are decoded under the trust
        model. RLlib's `framework` and `enable_*` API-stack keys are accepted if they name
        what rlmod is; unknown keys are an error."""
        rllib_only = {
            "framework": lambda v: self.framework(v),
            "enable_rl_module_and_learner": lambda v: self.api_stack(
                enable_rl_module_and_learner=v
            ),
            "enable_env_runner_and_connector_v2": lambda v: self.api_stack(
                enable_env_runner_and_connector_v2=v
            ),
        }
        for key, value in config_dict.items():
            if key in rllib_only:
                rllib_only[key](value)
                continue
            name = "lambda_" if key == "lambda" and "lambda_" in self.settings() else key
            name = _FROM_DICT_KEYS.get(name, name)
            if name not in self.settings():
                raise ValueError(
                    f"{type(self).__name__}.update_from_dict: unknown setting {key!r}."
                    f"{setting_hint(key) or did_you_mean(key, self.settings())}"
                )
            setattr(self, name, decode_setting(value, name, trusted_modules=trusted_modules))
        return self

    # ------------------------------------------------------------------ derived values
    @property
    def is_multi_agent(self) -> bool:
        """True with `.multi_agent(policies=...)` or a MultiAgentEnv class as env."""
        from rlmod.env.multi_agent_env import MultiAgentEnv

        env_is_ma = isinstance(self.env, type) and issubclass(self.env, MultiAgentEnv)
        return self.policies is not None or env_is_ma

    @property
    def total_train_batch_size(self) -> int:
        """Env steps trained on per iteration, over all Learners."""
        return self.train_batch_size_per_learner * max(1, self.num_learners)

    def get_rollout_fragment_length(self, worker_index: int = 0) -> int:
        """Steps per sub-env per sample() call of EnvRunner `worker_index` (RLlib's method
        and arithmetic): 'auto' splits the train batch over all sub-envs of all EnvRunners;
        where it does not divide evenly, the first EnvRunners take one step more, so the
        sampled steps add up to the batch (or exceed it by less than one per sub-env),
        and never fewer than 1."""
        if self.rollout_fragment_length != "auto":
            return int(self.rollout_fragment_length)
        envs = self.num_envs_per_env_runner
        sub_envs = envs * max(1, self.num_env_runners)
        total = self.total_train_batch_size
        base = total // sub_envs
        if base * sub_envs == total:
            return max(1, base)
        remainder = total - base * sub_envs
        return base + 1 if (worker_index - 1) * envs < remainder else max(1, base)

    @property
    def is_atari(self) -> bool:
        """Whether `env` names an Atari env (RLlib's property): a gymnasium id of the ALE
        (`"ale_py:ALE/Pong-v5"`, `"ALE/Breakout-v5"`). Callables and classes are never
        detected, as in RLlib; rlmod decides from the name without making the env."""
        return isinstance(self.env, str) and self.env.split(":")[-1].startswith("ALE/")

    @property
    def user_rl_module_spec(self) -> RLModuleSpec | MultiRLModuleSpec | None:
        """The `rl_module_spec` as set (None if never), before the merge that reading
        `rl_module_spec` shows."""
        spec: RLModuleSpec | MultiRLModuleSpec | None = self.__dict__["rl_module_spec"]
        return spec

    def merged_rl_module_spec(
        self, user: RLModuleSpec | MultiRLModuleSpec | None
    ) -> RLModuleSpec | MultiRLModuleSpec | None:
        """What reading `rl_module_spec` gives (RLlib's property): the algorithm's default
        spec, with the fields `user` sets taken from `user`; a MultiRLModuleSpec keeps its
        modules, each filled in from the default. None where there is neither (a plain
        AlgorithmConfig without a spec)."""
        try:
            default = self.get_default_rl_module_spec()
        except NotImplementedError:
            return user
        if user is None:
            return default
        if isinstance(user, RLModuleSpec):
            if isinstance(default, MultiRLModuleSpec):
                raise ValueError("Cannot merge MultiRLModuleSpec with RLModuleSpec!")
            return default._merged_with(user)
        merged = copy.deepcopy(user)
        if isinstance(default, RLModuleSpec):
            merged.rl_module_specs = {
                mid: default._merged_with(sp) for mid, sp in user.rl_module_specs.items()
            }
        return merged

    @property
    def _per_module_overrides(self) -> dict[ModuleID, Any]:
        """The per-module configs made so far by `get_config_for_module` (RLlib's cache)."""
        cache: dict[ModuleID, Any] = self.__dict__["_per_module_configs"]
        return cache

    @property
    def module_ids(self) -> list[ModuleID]:
        """All module IDs: `policies` (or the default one) plus extra sub-specs."""
        ids = list(self.policies or {DEFAULT_MODULE_ID: None})
        user = self.user_rl_module_spec
        if isinstance(user, MultiRLModuleSpec):
            seen = set(ids)
            ids += [m for m in user.rl_module_specs if m not in seen]
        return ids

    def is_module_trainable(self, module_id: ModuleID, batch: Any = None) -> bool:
        """Whether Learners update `module_id` (`policies_to_train`)."""
        ptt = self.policies_to_train
        if ptt is None:
            return True
        return bool(ptt(module_id, batch)) if callable(ptt) else module_id in ptt

    # ------------------------------------------------------------------ algorithm hooks
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        """The algorithm's default module (class and model config); subclasses override."""
        raise NotImplementedError(f"{type(self).__name__} has no default RLModule.")

    def get_default_learner_class(self) -> type:
        raise NotImplementedError(f"{type(self).__name__} has no Learner class.")

    def build_learner_connector(
        self, observation_space: gym.Space | None = None, action_space: gym.Space | None = None
    ) -> ConnectorPipeline:
        """The user's learner connectors; subclasses append their own (GAE for PPO)."""
        pieces: list[Connector] = []
        if self.learner_connector is not None:
            pieces = learner_pieces(self.learner_connector(observation_space, action_space))
        return ConnectorPipeline(pieces)

    def build_env_to_module_connector(
        self, env: Any, observation_space: gym.Space, action_space: gym.Space
    ) -> ConnectorPipeline:
        """The user's pieces, then the defaults (flatten, one-hot) for what they output.

        As RLlib prepends user pieces to its default pipeline, a user's piece sees the
        env's raw observations (e.g. a Dict) and the defaults only flatten what is left.
        """
        pieces: list[Any] = []
        if self.env_to_module_connector is not None:
            made = call_connector_factory(
                self.env_to_module_connector,
                env,
                _env_spaces(env, observation_space, action_space),
                torch.device("cpu"),
            )
            pieces = as_connector_list(made, setting="env_to_module_connector")
        user = ConnectorPipeline(
            pieces, input_observation_space=observation_space, input_action_space=action_space
        )
        assert user.observation_space is not None
        pieces += default_env_to_module(user.observation_space)
        return ConnectorPipeline(
            pieces, input_observation_space=observation_space, input_action_space=action_space
        )

    def build_module_to_env_connector(
        self, env: Any, observation_space: gym.Space, action_space: gym.Space
    ) -> ConnectorPipeline:
        """The user's pieces, then the defaults (sample actions, unsquash/clip)."""
        pieces: list[Any] = []
        if self.module_to_env_connector is not None:
            made = call_connector_factory(
                self.module_to_env_connector, env, _env_spaces(env, observation_space, action_space)
            )
            pieces += as_connector_list(made, setting="module_to_env_connector")
        pieces += default_module_to_env(action_space)
        return ConnectorPipeline(
            pieces, input_observation_space=observation_space, input_action_space=action_space
        )

    # ------------------------------------------------------------------ specs (rule 2)
    def get_rl_module_spec(
        self,
        env: Any = None,
        spaces: Mapping[str, tuple] | None = None,
        inference_only: bool | None = None,
    ) -> RLModuleSpec:
        """The complete spec of the default module (single-module case, rule 2).

        Spaces come from `spaces[DEFAULT_MODULE_ID]`, else `env` (through the env-to-module
        connectors), else the user's spec, else `.environment(observation_space=...,
        action_space=...)` (through the connectors). `inference_only=None` keeps the spec's.
        """
        return module_specs.rl_module_spec(self, env, spaces, inference_only)

    def get_multi_rl_module_spec(
        self,
        *,
        env: Any = None,
        spaces: Mapping[str, tuple] | None = None,
        inference_only: bool = False,
        policy_dict: Mapping[ModuleID, Any] | None = None,
        single_agent_rl_module_spec: RLModuleSpec | None = None,
    ) -> MultiRLModuleSpec:
        """One complete sub-spec per module (rule 2); learner-only ones dropped if
        `inference_only` (see `rlmod.algorithms.module_specs.multi_rl_module_spec`).

        `policy_dict` ({module_id: PolicySpec}) and `single_agent_rl_module_spec` are
        RLlib's: with them the specs are compiled from those PolicySpecs' spaces, the
        given spec filling modules the configured spec does not name (see
        `module_specs.multi_rl_module_spec_from_policies`)."""
        if policy_dict is not None or single_agent_rl_module_spec is not None:
            return module_specs.multi_rl_module_spec_from_policies(
                self,
                policy_dict=policy_dict,
                single_spec=single_agent_rl_module_spec,
                inference_only=inference_only,
            )
        return module_specs.multi_rl_module_spec(
            self, env=env, spaces=spaces, inference_only=inference_only
        )

    def env_spaces_by_module(self, env: Any) -> dict[ModuleID, tuple[Any, gym.Space, gym.Space]]:
        """{module_id: (first agent mapped to it, its raw obs space, its raw action space)}
        (see `rlmod.algorithms.module_specs.env_spaces_by_module`)."""
        return module_specs.env_spaces_by_module(self, env)

    def mapping_error_message(self, agent_id: Any, module_id: Any) -> str:
        """What is wrong when policy_mapping_fn maps `agent_id` to `module_id`."""
        return module_specs.mapping_error_message(self, agent_id, module_id)

    @property
    def learner_only_module_ids(self) -> set[ModuleID]:
        """Modules whose spec says `learner_only=True` (in rl_module_spec or policies)."""
        return module_specs.learner_only_module_ids(self)

    # ------------------------------------------------------------------ per-module (rule 4)
    def get_config_for_module(self, module_id: ModuleID) -> Self:
        """The config a Learner uses for `module_id` (rule 4).

        Without overrides that is this very config object; with overrides a frozen copy,
        made once and cached, so thousands of modules cost nothing extra.
        """
        overrides = self.algorithm_config_overrides_per_module.get(module_id)
        if not overrides:
            return self
        cache = self.__dict__["_per_module_configs"]
        cfg = cache.get(module_id)
        if cfg is None:
            cfg = object.__new__(type(self))
            cfg.__dict__.update(self.__dict__)
            cfg.__dict__["_frozen"] = False
            cfg.__dict__["_per_module_configs"] = {}
            for name, value in overrides.items():
                if name not in self.settings():
                    raise ValueError(self._unknown_override_message(module_id, name))
                setattr(cfg, name, value)
            cfg.__dict__["algorithm_config_overrides_per_module"] = {}
            cfg.__dict__["_frozen"] = True
            cache[module_id] = cfg
        return cfg

    def _unknown_override_message(self, module_id: ModuleID, name: str) -> str:
        return (
            f"algorithm_config_overrides_per_module[{module_id!r}] names {name!r}, which is "
            f"not a setting of {type(self).__name__}.{did_you_mean(name, self.settings())}"
        )

    # ------------------------------------------------------------------ validate / build
    reads_offline_data: bool = False
    """True for algorithms that train on `offline_data(input_=...)` (BC, MARWIL); the others
    refuse an input_ other than "sampler" instead of ignoring it."""

    def validate(self) -> None:
        """Checks the rules that span several settings; raises ValueError naming them."""
        unresolved = s.search_spaces(self)
        if unresolved:
            raise ValueError(
                f"Settings {unresolved} hold Ray Tune search spaces, which Tune resolves per "
                "trial: pass this config to tune.Tuner(config.algo_class.as_trainable(), "
                "param_space=config) instead of building it."
            )
        if self.input_ != "sampler" and not self.reads_offline_data:
            raise ValueError(
                f"offline_data(input_={self.input_!r}) is read by offline algorithms (BC, "
                f"MARWIL); {type(self).__name__} trains on what its EnvRunners sample. Use "
                "BCConfig or MARWILConfig, or leave input_ at 'sampler'."
            )
        if self.reads_offline_data and self.clip_rewards not in (None, False):
            raise ValueError(
                f"clip_rewards={self.clip_rewards!r} clips what EnvRunners sample, and "
                f"{type(self).__name__} trains on recorded episodes as they were written "
                "(with the env's rewards, also where the recording run clipped); clip the "
                "rewards in the recorded data, or drop the setting."
            )
        if self.reads_offline_data and self.min_sample_timesteps_per_iteration:
            raise ValueError(
                f"min_sample_timesteps_per_iteration={self.min_sample_timesteps_per_iteration}: "
                f"{type(self).__name__} trains offline and samples no env steps, so train() "
                "would never return; set it to 0 and size iterations with "
                "min_train_timesteps_per_iteration or min_time_s_per_iteration."
            )
        per_learner = self.train_batch_size_per_learner
        if per_learner < 1:
            raise ValueError(
                f"train_batch_size ({self.train_batch_size}) // num_learners "
                f"({self.num_learners}) is 0; raise train_batch_size or set "
                "train_batch_size_per_learner."
            )
        if self.minibatch_size is not None and self.minibatch_size > per_learner:
            raise ValueError(
                f"minibatch_size ({self.minibatch_size}) is larger than "
                f"train_batch_size_per_learner ({per_learner}); lower minibatch_size or "
                "raise the batch."
            )
        if self.checkpoint_frequency and self.checkpoint_dir is None:
            raise ValueError(
                f"checkpoint_frequency={self.checkpoint_frequency} needs a checkpoint_dir: "
                "call config.checkpointing(checkpoint_dir=...), or set "
                "checkpoint_frequency=0 and save with algo.save_to_path(path)."
            )
        for mid, overrides in self.algorithm_config_overrides_per_module.items():
            for name in overrides:
                if name not in self.settings():
                    raise ValueError(self._unknown_override_message(mid, name))
                self.settings()[name].validate(overrides[name])
        if self.is_multi_agent and self.on_non_finite_env_data == "truncate_episode":
            raise ValueError(
                "on_non_finite_env_data='truncate_episode' is built for single-agent "
                "EnvRunners only; a multi-agent EnvRunner raises an EnvError naming the env, "
                "agent and step. Use on_non_finite_env_data='raise' (the default)."
            )
        ptt = self.policies_to_train
        if ptt is not None and not callable(ptt):
            unknown = sorted(set(ptt) - set(self.module_ids))
            if unknown:
                raise UnknownModuleIDError(
                    f"policies_to_train names {unknown[0]!r}, which is not a module: modules "
                    f"are {sorted(self.module_ids)[:10]}."
                    f"{did_you_mean(unknown[0], self.module_ids)}"
                )

    def build_algo(self) -> Algorithm:
        """Validates this config and builds its Algorithm (on a frozen copy)."""
        if self.algo_class is None:
            raise TypeError(
                f"{type(self).__name__} has no algo_class to build; use an algorithm's "
                "config (PPOConfig, ...) or AlgorithmConfig(algo_class=PPO)."
            )
        return self.algo_class(config=self)

    def build(self) -> Algorithm:
        """`build_algo()` (RLlib's older name, which RLlib still accepts)."""
        return self.build_algo()

    def freeze(self) -> None:
        """Makes every setting read-only (a built Algorithm's config cannot change)."""
        self.__dict__["_frozen"] = True

    @property
    def is_frozen(self) -> bool:
        return bool(self.__dict__["_frozen"])

    def copy(self, *, copy_frozen: bool = False) -> Self:
        """A deep copy; unfrozen unless `copy_frozen`."""
        new = object.__new__(type(self))
        state = {k: v for k, v in self.__dict__.items() if k != "_per_module_configs"}
        new.__dict__.update(copy.deepcopy(state))
        new.__dict__["_per_module_configs"] = {}
        new.__dict__["_frozen"] = self.is_frozen and copy_frozen
        return new

    # ------------------------------------------------------------------ JSON
    def to_dict(self, *, allow_unnamed: bool = False) -> dict[str, Any]:
        """All settings as JSON-able values (classes and functions by import path), as set
        (derived ones stay None). `train_batch_size_per_learner` is stored under RLlib's
        key `_train_batch_size_per_learner`, the raw field RLlib's `to_dict()` holds.

        A lambda or closure has no import path: an error, unless `allow_unnamed`
        (checkpoints), where it is stored as "must be passed at load".
        """
        return {
            dict_key(name): encode_setting(self.__dict__[name], name, allow_unnamed=allow_unnamed)
            for name in self.settings()
        }  # as set: derived settings stay None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, trusted_modules: Iterable[str] = ()) -> Self:
        """Inverse of `to_dict`; unknown keys are an error.

        Import paths resolve only inside rlmod and the `trusted_modules` packages, and
        must name an object of the kind their setting takes (rlmod.utils.trust): loading a
        config from a stranger imports and runs nothing else.
        """
        config = cls()
        for key, value in data.items():
            name = _FROM_DICT_KEYS.get(key, key)
            if name not in cls.settings():
                raise ValueError(
                    f"{cls.__name__}.from_dict: unknown setting {name!r}."
                    f"{did_you_mean(name, cls.settings())}"
                )
            setattr(config, name, decode_setting(value, name, trusted_modules=trusted_modules))
        return config

    def __repr__(self) -> str:
        defaults = self.defaults()
        changed = {n: self.__dict__[n] for n in self.settings() if self.__dict__[n] != defaults[n]}
        return f"{type(self).__name__}({changed})"


def _register_with_tune(algo_class: type[Algorithm] | None = None) -> None:
    """Makes AlgorithmConfig a (virtual) subclass of Ray Tune's config base, so
    `tune.Tuner(..., param_space=config)` takes it through `to_dict()`, as it takes RLlib's
    AlgorithmConfig (which subclasses that base), and registers `algo_class` under its name
    (`tune.Tuner("PPO", ...)`). Called once Ray Tune is imported; starts nothing."""
    try:
        from ray.tune.tune import _Config
    except ImportError:  # another Ray version: param_space=config.to_dict() still works
        return
    if not issubclass(AlgorithmConfig, _Config):
        _Config.register(AlgorithmConfig)
    if algo_class is not None:
        from rlmod.utils.ray_utils import register_tune_name

        register_tune_name(algo_class)


def learner_pieces(made: Any) -> list[Connector]:
    """What a `learner_connector` factory returned, as learner pipeline pieces: rlmod's
    LearnerConnectors as they are, RLlib-style ConnectorV2 pieces run through
    ConnectorV2LearnerPiece (RLlib's keyword call on episodes of the batch). A piece
    rlmod cannot run there (an env-to-module or module-to-env piece) is refused with what
    to use instead."""
    from rlmod.connectors.connector_v2 import ConnectorV2, SingleAgentObservationPreprocessor
    from rlmod.connectors.env_to_module import EnvToModule
    from rlmod.connectors.learner import LearnerConnector
    from rlmod.connectors.learner_v2 import ConnectorV2LearnerPiece
    from rlmod.connectors.module_to_env import ModuleToEnv

    out: list[Connector] = []
    for piece in as_connector_list(made, setting="learner_connector"):
        if isinstance(piece, SingleAgentObservationPreprocessor | EnvToModule | ModuleToEnv):
            raise TypeError(
                f"the learner_connector factory returned {type(piece).__name__}, an "
                "env-to-module/module-to-env piece, which rlmod "
                "cannot run on a Learner's batch. Pass it to env_runners(env_to_module_"
                "connector=...) (Learners train on the observations the module saw), or "
                "write a ConnectorV2 whose __call__ works on the episodes."
            )
        if isinstance(piece, ConnectorV2):
            out.append(ConnectorV2LearnerPiece(piece))
        elif isinstance(piece, LearnerConnector):
            out.append(piece)
        else:
            raise TypeError(
                f"the learner_connector factory returned {piece!r}, which is neither a "
                "ConnectorV2 nor an rlmod LearnerConnector."
            )
    return out


def call_connector_factory(factory: Callable, env: Any, *args: Any) -> Any:
    """Calls a connector factory with RLlib 2.41+'s arguments (`env, spaces, device` for
    env-to-module, `env, spaces` for module-to-env) if its signature takes them, else with
    `env` alone (the older one-argument form). Decided from the signature, not by catching
    a TypeError, which would hide one raised inside the user's function."""
    try:
        inspect.signature(factory).bind(env, *args)
    except TypeError:
        return factory(env)
    except ValueError:  # no signature (some builtins): the full form
        pass
    return factory(env, *args)


def _env_spaces(
    env: Any, observation_space: gym.Space, action_space: gym.Space
) -> dict[str, tuple[gym.Space, gym.Space]]:
    """The `spaces` a connector factory gets, keyed as RLlib's (and as
    `EnvRunner.get_spaces()`): `__env_single__` (one sub-env's spaces) and, with an env,
    `__env__` (the env's own, vectorized ones)."""
    spaces = {"__env_single__": (observation_space, action_space)}
    if env is not None and hasattr(env, "observation_space"):
        spaces["__env__"] = (env.observation_space, env.action_space)
    return spaces
