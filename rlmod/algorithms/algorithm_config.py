"""AlgorithmConfig: the single source of truth from which every module spec is derived.

Used by users (fluent setters), EnvRunners and Learners (`get_rl_module_spec`,
`get_multi_rl_module_spec`, `get_config_for_module`) and Algorithm (`build_algo`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import torch

from rlmod.algorithms import settings as s
from rlmod.algorithms.config_json import decode_setting, encode_setting
from rlmod.algorithms.settings import Setting
from rlmod.callbacks import HOOKS, RLlibCallback
from rlmod.connectors.env_to_module import default_env_to_module
from rlmod.connectors.module_to_env import default_module_to_env
from rlmod.connectors.pipeline import Connector, ConnectorPipeline, as_connector_list
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.multi_rl_module import ModuleID, MultiRLModuleSpec
from rlmod.core.rl_module import RLModuleSpec
from rlmod.env.multi_agent_rows import SETUP_EPISODE
from rlmod.errors import UnknownModuleIDError
from rlmod.utils.naming import did_you_mean

if TYPE_CHECKING:
    from typing import Self

    from rlmod.algorithms.algorithm import Algorithm

logger = logging.getLogger(__name__)

_UNSET: Any = object()
"""Marks a setter argument the caller did not pass (None is a meaningful value)."""


def default_policy_mapping_fn(agent_id: Any, episode: Any = None, **kwargs: Any) -> ModuleID:
    """Maps every agent to the one module `default_policy`."""
    return DEFAULT_MODULE_ID


class AlgorithmConfig:
    """Settings of an algorithm, grouped by the fluent setter that sets them.

    Every setter takes keyword arguments only and returns the config, so calls chain.
    Values are checked when set (ValueError/TypeError naming the setting), cross-field
    rules in `validate()`, which `build_algo()` always runs.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> config = (PPOConfig().environment("CartPole-v1")
        ...           .env_runners(num_envs_per_env_runner=8).training(lr=3e-4))
        >>> config.total_train_batch_size
        4000
    """

    algo_class: ClassVar[type[Algorithm] | None] = None

    # --- environment ---
    env = Setting(None, section="environment", doc=(
        "A gymnasium ID, a name registered with rlmod.register_env, or a callable "
        "(env_config) -> env."))
    env_config = Setting({}, section="environment", check=s.mapping,
                         doc="Keyword arguments for the env (gymnasium) or its creator.")
    observation_space = Setting(None, section="environment", check=s.space_or_none, doc=(
        "The env's observation space, for components with no env (offline training)."))
    action_space = Setting(None, section="environment", check=s.space_or_none,
                           doc="The env's action space, for components with no env.")
    # --- env_runners ---
    num_env_runners = Setting(0, section="env_runners", check=s.integer(min=0), doc=(
        "Remote EnvRunner actors (needs Ray). 0 samples in-process, the fastest on one "
        "machine."))
    num_envs_per_env_runner = Setting(1, section="env_runners", check=s.integer(min=1), doc=(
        "Sub-envs each EnvRunner steps at once in one vector env; more sub-envs amortize "
        "the forward pass."))
    rollout_fragment_length = Setting("auto", section="env_runners",
                                      check=s.auto_or_integer(min=1), doc=(
        "Steps per sub-env per sample() call; 'auto' splits the train batch evenly."))
    env_to_module_connector = Setting(None, section="env_runners", check=s.callable_or_none,
                                      doc=(
        "callable(env, spaces, device) -> Connector(s) (RLlib 2.41+), or callable(env), "
        "appended after the default flatten/one-hot pieces (env is None for components "
        "without one)."))
    module_to_env_connector = Setting(None, section="env_runners", check=s.callable_or_none,
                                      doc=(
        "callable(env, spaces) or callable(env) -> Connector(s) run after sampling."))
    explore = Setting(True, section="env_runners", check=s.boolean,
                      doc="Sample actions (True) or take the distribution's mode (False).")
    env_runner_cls = Setting(None, section="env_runners", check=s.callable_or_none, doc=(
        "EnvRunner class; None picks the single- or multi-agent one."))
    on_non_finite_env_data = Setting("raise", section="env_runners",
                                     check=s.one_of("raise", "truncate_episode"), doc=(
        "What an EnvRunner does when an env returns a NaN or infinite observation or "
        "reward: 'raise' an EnvError naming the env, sub-env, step and key (checked once "
        "per sample() call over the whole batch, before anything reaches a Learner), or "
        "'truncate_episode': end that sub-env's episode as truncated at that step (its "
        "last finite observation stands in for the final one, the reward counts as 0), "
        "reset it, and count it in `num_episodes_truncated_non_finite` (checked every step)."))
    create_env_on_local_worker = Setting(False, section="env_runners", check=s.boolean, doc=(
        "With num_env_runners > 0, also build an EnvRunner (and its env) in the driver "
        "process; it never samples, it only answers get_spaces() (RLlib's default: False, "
        "the spaces then come from the first healthy remote EnvRunner). With "
        "num_env_runners=0 the local EnvRunner is always built: it is the one that samples."))
    num_cpus_per_env_runner = Setting(1.0, section="env_runners",
                                      check=s.number(low=0.0), doc=(
        "CPUs Ray reserves for each remote EnvRunner actor (fractions allowed); Ray places "
        "no more actors on a node than its CPUs hold."))
    sample_timeout_s = Setting(60.0, section="env_runners",
                               check=s.optional(s.number(low=0.0, low_open=True)), doc=(
        "Seconds to wait for each remote EnvRunner's sample(); one that takes longer is "
        "treated as failed (restarted or ignored per .fault_tolerance()). None waits "
        "forever."))
    check_agent_observations = Setting(True, section="env_runners", check=s.boolean, doc=(
        "Multi-agent: check every step that each agent's observation has the shape and "
        "dtype of its declared space, naming the agent where not (a torch error far from "
        "the cause otherwise). Turn off for speed once an env is known to be right."))
    # --- learners ---
    num_learners = Setting(0, section="learners", check=s.integer(min=0), doc=(
        "Remote Learner actors (needs Ray), trained data-parallel with torch.distributed "
        "(gloo): each trains on its share of the batch, gradients are averaged, all hold "
        "the same weights. 0 trains in-process."))
    num_cpus_per_learner = Setting(1.0, section="learners", check=s.number(low=0.0), doc=(
        "CPUs Ray reserves for each remote Learner actor (num_learners > 0). (RLlib's "
        "default 'auto' means 1 without a GPU and 0 with one; rlmod's default is 1.)"))
    num_gpus_per_learner = Setting(0.0, section="learners", check=s.number(low=0.0), doc=(
        "GPUs per Learner. 0 trains on the CPU. Above 0 the Learner's modules, optimizer "
        "states and batches live on a CUDA device: with num_learners=0 the driver's GPU "
        "local_gpu_idx; with num_learners > 0 each Learner actor reserves this many GPUs "
        "from Ray (fractions share one GPU) and the Learners all-reduce with NCCL instead "
        "of gloo. Weights still reach EnvRunners as CPU (numpy) arrays."))
    local_gpu_idx = Setting(0, section="learners", check=s.integer(min=0), doc=(
        "With num_gpus_per_learner > 0 and num_learners=0: which visible GPU (an index "
        "into CUDA_VISIBLE_DEVICES) the driver's Learner uses, as RLlib's."))
    num_threads_per_learner = Setting(1, section="learners", check=s.integer(min=1), doc=(
        "torch intra-op threads of in-process components. Small networks run fastest "
        "on one thread: more threads cost more in synchronization than they save."))
    max_consecutive_non_finite_updates = Setting(3, section="learners",
                                                 check=s.integer(min=1), doc=(
        "A minibatch whose loss or gradient is NaN/inf is skipped for that module (its "
        "weights and optimizer state stay as they were; counted in "
        "`num_non_finite_updates`); after this many in a row for one module the Learner "
        "raises, naming the module and its loss terms."))
    learner_config_dict = Setting({}, section="learners", check=s.mapping, doc=(
        "Free settings a custom Learner reads as self.config.learner_config_dict (RLlib's); "
        "each call of .learners()/.training() updates it, as RLlib does."))
    # --- training ---
    gamma = Setting(0.99, section="training", check=s.number(low=0.0, high=1.0),
                    doc="Discount factor of future rewards.")
    lr = Setting(5e-5, section="training", check=s.schedule_or_number(), doc=(
        "Learning rate, or a piecewise-linear schedule [[env_step, lr], ...]."))
    train_batch_size = Setting(4000, section="training", check=s.integer(min=1), doc=(
        "Env steps per training iteration over all Learners; used when "
        "train_batch_size_per_learner is None."))
    train_batch_size_per_learner = Setting(
        None, section="training", check=s.optional(s.integer(min=1)),
        derive=lambda c: c.train_batch_size // max(1, c.num_learners), doc=(
            "Env steps each Learner trains on per iteration. Left None, it reads as "
            "train_batch_size // max(1, num_learners) (rule 5, RLlib's property) while "
            "to_dict() keeps None."))
    minibatch_size = Setting(128, section="training", check=s.optional(s.integer(min=1)),
                             doc="Rows per SGD step; None trains on the whole batch at once.")
    num_epochs = Setting(1, section="training", check=s.integer(min=1),
                         doc="Passes over each train batch.")
    grad_clip = Setting(None, section="training",
                        check=s.optional(s.number(low=0.0, low_open=True)),
                        doc="Clip each module's global gradient norm to this value.")
    learner_class = Setting(None, section="training", check=s.learner_class_or_none,
                            derive=lambda c: c.get_default_learner_class(), doc=(
        "The Learner class LearnerGroup builds, e.g. a subclass of PPOLearner with an extra "
        "loss term. Left None it reads as the algorithm's default (RLlib's property)."))
    learner_connector = Setting(None, section="training", check=s.callable_or_none, doc=(
        "callable(observation_space, action_space) -> LearnerConnector(s), run before the "
        "algorithm's own learner pieces (e.g. GAE)."))
    # --- rl_module ---
    rl_module_spec = Setting(None, section="rl_module", check=s.spec_or_none, doc=(
        "An RLModuleSpec for the default module, or a MultiRLModuleSpec (several modules, "
        "learner-only ones included); unset fields come from the algorithm's default."))
    model_config = Setting({}, section="rl_module", check=s.model_config, doc=(
        "Model settings for every module (a sub-spec's own model_config wins)."))
    algorithm_config_overrides_per_module = Setting({}, section="rl_module", check=s.overrides_per_module,
                                                    doc=(
        "{module_id: {setting: value}}: the config a Learner uses for that module."))
    # --- multi_agent ---
    policies = Setting(None, section="multi_agent", check=s.policies, doc=(
        "Module IDs (a set) or {module_id: RLModuleSpec | None}; None means one module."))
    policy_mapping_fn = Setting(default_policy_mapping_fn, section="multi_agent",
                                check=lambda v: s.callable_or_none(v) or
                                default_policy_mapping_fn,
                                doc=(
        "callable(agent_id, episode, **kwargs) -> module ID, called once per agent per "
        "episode; `episode` is an EpisodeInfo (id_, env_index, worker_index), at set-up "
        "(module spaces from the env's possible_agents) the one with id_=-1, never None."))
    policies_to_train = Setting(None, section="multi_agent", check=s.collection_or_callable,
                                doc="Module IDs to train, or callable(module_id, batch) -> bool; "
                                "None trains all.")
    stack_modules = Setting(True, section="multi_agent", check=s.boolean, doc=(
        "rlmod's own setting (not RLlib's): modules of one architecture (class that "
        "supports stacking, e.g. DefaultPPORLModule; same spaces and model_config after "
        "per-module overrides) run as one stacked module: one forward per group on "
        "EnvRunners, one loss, backward and optimizer step per group on Learners. Results, "
        "checkpoints and the per-module API are the same either way; False runs every "
        "module alone (to compare, or for a custom Learner that reads per-module state)."))
    # --- fault_tolerance ---
    restart_failed_sub_environments = Setting(False, section="fault_tolerance",
                                              check=s.boolean, doc=(
        "When a sub-env raises in step() or reset(), recreate it in place, drop its "
        "unfinished episode and go on sampling (RLlib's name). Off: the EnvRunner raises an "
        "EnvError naming the env, sub-env and step, and the next sample() starts every "
        "sub-env afresh, so the Algorithm stays usable."))
    restart_failed_env_runners = Setting(True, section="fault_tolerance", check=s.boolean,
                                         doc=(
        "Remote EnvRunners: replace one whose actor died or whose sample() raised (or took "
        "longer than sample_timeout_s) by a new actor with the same worker_index, the "
        "current weights and connector states; the episodes it was sampling are dropped "
        "(RLlib's name and default)."))
    max_num_env_runner_restarts = Setting(1000, section="fault_tolerance",
                                          check=s.integer(min=0), doc=(
        "Restarts allowed over the whole run, all remote EnvRunners together; past it a "
        "failure is handled as with restart_failed_env_runners=False (RLlib's default)."))
    ignore_env_runner_failures = Setting(False, section="fault_tolerance", check=s.boolean,
                                         doc=(
        "When a remote EnvRunner fails and is not restarted, go on sampling with the "
        "healthy ones (False: raise an EnvRunnerError naming the runner and the original "
        "exception). Training stops with an error once no healthy EnvRunner is left."))
    # --- evaluation ---
    evaluation_interval = Setting(None, section="evaluation",
                                  check=s.optional(s.integer(min=0)), doc=(
        "Evaluate every this many train() calls; None or 0 never (RLlib's)."))
    evaluation_duration = Setting(10, section="evaluation", check=s.integer(min=1), doc=(
        "Episodes or timesteps per evaluation, over all evaluation EnvRunners (RLlib's "
        "default 10). RLlib's 'auto' is not offered: rlmod evaluates a fixed amount."))
    evaluation_duration_unit = Setting("episodes", section="evaluation",
                                       check=s.one_of("episodes", "timesteps"),
                                       doc="Unit of evaluation_duration.")
    evaluation_num_env_runners = Setting(0, section="evaluation", check=s.integer(min=0), doc=(
        "Remote evaluation EnvRunners (needs Ray); 0 evaluates on one in-process EnvRunner "
        "of its own (RLlib's)."))
    evaluation_config = Setting(None, section="evaluation", check=s.settings_dict_or_none,
                                doc=(
        "Settings the evaluation EnvRunners use instead of the main config's, e.g. "
        "PPOConfig.overrides(explore=False) (RLlib's); an AlgorithmConfig is taken whole, "
        "as its to_dict()."))
    evaluation_parallel_to_training = Setting(False, section="evaluation", check=s.boolean,
                                              doc=(
        "Evaluate in a thread while the iteration's training step runs, with the weights "
        "from before that step (RLlib's); the result is the same iteration's."))
    evaluation_explore = Setting(None, section="evaluation", check=s.optional(s.boolean), doc=(
        "rlmod's shortcut for evaluation_config={'explore': ...}; None (default) leaves "
        "explore to evaluation_config, else the main config's explore, as RLlib does."))
    in_evaluation = Setting(False, section="evaluation", check=s.boolean, doc=(
        "True on the config of evaluation EnvRunners (RLlib's flag; set by the Algorithm, "
        "read by callbacks)."))
    # --- callbacks ---
    callbacks_class = Setting(RLlibCallback, section="callbacks", check=s.callback_classes, doc=(
        "An RLlibCallback subclass or a list of them, built once per Algorithm and per "
        "EnvRunner (RLlib's callbacks_class; None reads as RLlibCallback, which does nothing)."))
    callbacks_on_algorithm_init = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_algorithm_init.")
    callbacks_on_train_result = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_train_result.")
    callbacks_on_evaluate_start = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_evaluate_start.")
    callbacks_on_evaluate_end = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_evaluate_end.")
    callbacks_on_checkpoint_loaded = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_checkpoint_loaded.")
    callbacks_on_environment_created = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_environment_created.")
    callbacks_on_episode_created = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_episode_created.")
    callbacks_on_episode_start = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_episode_start.")
    callbacks_on_episode_step = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_episode_step.")
    callbacks_on_episode_end = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_episode_end.")
    callbacks_on_sample_end = Setting(None, section="callbacks", check=s.callables_or_none,
                            doc="Callable(s) called after callbacks_class's on_sample_end.")
    # --- reporting ---
    metrics_num_episodes_for_smoothing = Setting(100, section="reporting",
                                                 check=s.integer(min=1), doc=(
        "Episodes in the window of episode_return_mean and friends."))
    # --- offline_data ---
    input_ = Setting("sampler", section="offline_data", check=s.offline_input, doc=(
        "'sampler' (train on what EnvRunners sample), or recorded episodes to train on "
        "offline: a Parquet file, a directory of them, a glob, or a list of these."))
    output = Setting(None, section="offline_data", check=s.optional(s.path_string), doc=(
        "Directory EnvRunners write every finished episode to, as Parquet (see "
        "rlmod.offline); None writes nothing."))
    output_max_rows_per_file = Setting(100_000, section="offline_data",
                                       check=s.integer(min=1),
                                       doc="Rows per Parquet file before a new one starts.")
    shuffle_buffer_size = Setting(10_000, section="offline_data", check=s.integer(min=0), doc=(
        "Rows held for shuffling offline data; batches are drawn at random from it (RLlib "
        "defaults to 0 and leaves shuffling to Ray Data; rlmod reads files itself)."))
    input_read_method = Setting(None, section="offline_data",
                                check=s.one_of(None, "read_parquet"), doc=(
        "None (rlmod's default): offline algorithms read the Parquet files in-process with "
        "pyarrow, no Ray needed. 'read_parquet': Ray Data tasks read the same files (whole "
        "files, so episodes stay whole) and stream equal shards to the Learners, each "
        "drawing its own batches (num_learners > 0: one shard per Learner). RLlib always "
        "reads with Ray Data (its default is 'read_parquet'); rlmod does when asked."))
    map_batches_kwargs = Setting({}, section="offline_data", check=s.mapping, doc=(
        "With input_read_method='read_parquet': keyword arguments of Ray Data's "
        "Dataset.map_batches that runs the reading (RLlib's name), over rlmod's defaults "
        "{'num_cpus': 0}: reading reserves no CPU, so Learners that hold every CPU of a "
        "small cluster cannot starve it."))
    # --- checkpointing ---
    checkpoint_frequency = Setting(0, section="checkpointing", check=s.integer(min=0), doc=(
        "Save a checkpoint into checkpoint_dir every this many train() calls; 0 never. "
        "The path is in result['checkpoint_path']."))
    checkpoint_dir = Setting(None, section="checkpointing",
                             check=s.optional(s.path_string), doc=(
        "Directory of the periodic checkpoints (checkpoint_<iteration> inside it)."))
    keep_last_n = Setting(None, section="checkpointing", check=s.optional(s.integer(min=1)),
                          doc="Delete all but the newest n complete checkpoints; None keeps all.")
    # --- debugging ---
    seed = Setting(None, section="debugging", check=s.optional(s.integer(min=0)), doc=(
        "Seeds torch, numpy and the envs; one seed gives the same run twice."))

    def __init__(self) -> None:
        self.__dict__["_frozen"] = False
        self.__dict__["_per_module_configs"] = {}
        for name, setting in self.settings().items():
            self.__dict__[name] = copy.copy(setting.default)

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

    def _set_section(self, section: str, values: dict[str, Any]) -> Self:
        values = dict(values)
        values.pop("self", None)
        values.pop("__class__", None)
        unknown = values.pop("unknown", {}) or {}
        valid = [n for n, st in self.settings().items() if st.section == section]
        for name in unknown:
            raise TypeError(
                f".{section}() got an unexpected keyword argument {name!r}."
                f"{did_you_mean(name, valid)} Valid: {sorted(valid)}."
            )
        for name, value in values.items():
            if value is not _UNSET:
                setattr(self, name, value)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.settings() and not name.startswith("_"):
            raise AttributeError(
                f"{type(self).__name__} has no setting {name!r}."
                f"{did_you_mean(name, self.settings())}"
            )
        super().__setattr__(name, value)

    # ------------------------------------------------------------------ fluent setters
    def environment(self, env: Any = _UNSET, *, env_config: dict | None = _UNSET,
                    observation_space: gym.Space | None = _UNSET,
                    action_space: gym.Space | None = _UNSET, **unknown: Any) -> Self:
        """Sets the env and its config, or the spaces for env-less training."""
        return self._set_section("environment", locals())

    def env_runners(self, *, num_env_runners: int = _UNSET, num_envs_per_env_runner: int = _UNSET,
                    rollout_fragment_length: int | str = _UNSET,
                    env_to_module_connector: Callable | None = _UNSET,
                    module_to_env_connector: Callable | None = _UNSET, explore: bool = _UNSET,
                    env_runner_cls: type | None = _UNSET,
                    on_non_finite_env_data: str = _UNSET,
                    check_agent_observations: bool = _UNSET,
                    create_env_on_local_worker: bool = _UNSET,
                    num_cpus_per_env_runner: float = _UNSET,
                    sample_timeout_s: float | None = _UNSET, **unknown: Any) -> Self:
        """Sets how EnvRunners sample."""
        return self._set_section("env_runners", locals())

    def learners(self, *, num_learners: int = _UNSET, num_cpus_per_learner: float = _UNSET,
                 num_gpus_per_learner: float = _UNSET, local_gpu_idx: int = _UNSET,
                 num_threads_per_learner: int = _UNSET,
                 max_consecutive_non_finite_updates: int = _UNSET,
                 learner_config_dict: dict | None = _UNSET, **unknown: Any) -> Self:
        """Sets how many Learners train, what they do with a NaN/inf update, and free
        settings for a custom Learner (`learner_config_dict` updates the current dict, as
        RLlib's does)."""
        if learner_config_dict is not _UNSET:
            learner_config_dict = {**self.learner_config_dict, **s.mapping(learner_config_dict)}
        return self._set_section("learners", locals())

    def training(self, *, gamma: float = _UNSET, lr: float | list = _UNSET,
                 train_batch_size: int = _UNSET, train_batch_size_per_learner: int | None = _UNSET,
                 minibatch_size: int | None = _UNSET, num_epochs: int = _UNSET,
                 grad_clip: float | None = _UNSET, learner_connector: Callable | None = _UNSET,
                 learner_class: type | None = _UNSET, learner_config_dict: dict | None = _UNSET,
                 **unknown: Any) -> Self:
        """Sets the training settings common to all algorithms (subclasses add theirs).

        `learner_config_dict` is also accepted here, as RLlib still accepts it in
        `.training()` (its home is `.learners()`).
        """
        if learner_config_dict is not _UNSET:
            self.learners(learner_config_dict=learner_config_dict)
        values = dict(locals())
        values.pop("learner_config_dict")
        return self._set_section("training", values)

    def rl_module(self, *, rl_module_spec: RLModuleSpec | MultiRLModuleSpec | None = _UNSET,
                  model_config: dict | Any = _UNSET,
                  algorithm_config_overrides_per_module: dict | None = _UNSET,
                  **unknown: Any) -> Self:
        """Sets the module specs, model config and per-module config overrides."""
        return self._set_section("rl_module", locals())

    def multi_agent(self, *, policies: Any = _UNSET, policy_mapping_fn: Callable = _UNSET,
                    policies_to_train: Any = _UNSET,
                    algorithm_config_overrides_per_module: dict | None = _UNSET,
                    stack_modules: bool = _UNSET, **unknown: Any) -> Self:
        """Sets what only matters with several agents: modules and the agent mapping, and
        (rlmod's `stack_modules`) whether modules of one architecture run stacked.

        `algorithm_config_overrides_per_module` is also accepted here, as RLlib still
        accepts it in `.multi_agent()` (its home is `.rl_module()`, rule 6).
        """
        return self._set_section("multi_agent", locals())

    def fault_tolerance(self, *, restart_failed_sub_environments: bool = _UNSET,
                        restart_failed_env_runners: bool = _UNSET,
                        max_num_env_runner_restarts: int = _UNSET,
                        ignore_env_runner_failures: bool = _UNSET,
                        **unknown: Any) -> Self:
        """Sets how EnvRunners survive failing envs and dying actors (RLlib's names):
        sub-envs recreated in place, remote EnvRunners restarted or ignored."""
        return self._set_section("fault_tolerance", locals())

    def evaluation(self, *, evaluation_interval: int | None = _UNSET,
                   evaluation_duration: int = _UNSET, evaluation_duration_unit: str = _UNSET,
                   evaluation_num_env_runners: int = _UNSET,
                   evaluation_config: dict | AlgorithmConfig | None = _UNSET,
                   evaluation_parallel_to_training: bool = _UNSET,
                   evaluation_explore: bool | None = _UNSET, **unknown: Any) -> Self:
        """Sets when, where, how long and with which settings to evaluate (RLlib's
        `.evaluation()` names and defaults; its offline-evaluation, timeout and
        custom-function options are not offered).

        A dict `evaluation_config` updates the one set before (RLlib deep-updates it;
        rlmod merges top-level settings), an AlgorithmConfig replaces it whole (as
        RLlib's `get_evaluation_config_object` takes one). Keys are checked against this
        config's settings now, so a misspelled key fails here, not at the first evaluation.
        """
        if isinstance(evaluation_config, AlgorithmConfig):  # taken whole, as RLlib does
            evaluation_config = {n: evaluation_config.__dict__[n]
                                 for n in evaluation_config.settings()
                                 if n not in ("evaluation_config", "evaluation_interval")}
        elif isinstance(evaluation_config, Mapping):  # updates, not replaces (RLlib's)
            evaluation_config = {**(self.evaluation_config or {}),
                                 **type(self).overrides(**evaluation_config)}
        if evaluation_duration == "auto":
            raise ValueError(
                "evaluation_duration='auto' (RLlib: evaluate as long as the parallel training "
                "step runs) is not offered; give a number of episodes or timesteps.")
        return self._set_section("evaluation", locals())

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

    def callbacks(self, callbacks_class: type | list[type] | None = _UNSET, *,
                  on_algorithm_init: Callable | list[Callable] | None = _UNSET,
                  on_train_result: Callable | list[Callable] | None = _UNSET,
                  on_evaluate_start: Callable | list[Callable] | None = _UNSET,
                  on_evaluate_end: Callable | list[Callable] | None = _UNSET,
                  on_checkpoint_loaded: Callable | list[Callable] | None = _UNSET,
                  on_environment_created: Callable | list[Callable] | None = _UNSET,
                  on_episode_created: Callable | list[Callable] | None = _UNSET,
                  on_episode_start: Callable | list[Callable] | None = _UNSET,
                  on_episode_step: Callable | list[Callable] | None = _UNSET,
                  on_episode_end: Callable | list[Callable] | None = _UNSET,
                  on_sample_end: Callable | list[Callable] | None = _UNSET,
                  **unknown: Any) -> Self:
        """Sets the callbacks (RLlib's `.callbacks()`): an RLlibCallback subclass or a list
        of them (None: RLlibCallback, which does nothing), and per hook a callable or a
        list of callables, called after the classes' methods, in order."""
        values = dict(locals())
        if callbacks_class is None:
            values["callbacks_class"] = RLlibCallback
        for hook in HOOKS:
            values[f"callbacks_{hook}"] = values.pop(hook)
        return self._set_section("callbacks", values)

    def reporting(self, *, metrics_num_episodes_for_smoothing: int = _UNSET,
                  **unknown: Any) -> Self:
        """Sets how metrics are smoothed."""
        return self._set_section("reporting", locals())

    def offline_data(self, *, input_: Any = _UNSET, output: str | None = _UNSET,
                     output_max_rows_per_file: int = _UNSET, shuffle_buffer_size: int = _UNSET,
                     input_read_method: str | None = _UNSET,
                     map_batches_kwargs: dict = _UNSET, **unknown: Any) -> Self:
        """Sets where offline algorithms read episodes and where EnvRunners write them."""
        return self._set_section("offline_data", locals())

    def checkpointing(self, *, checkpoint_frequency: int = _UNSET,
                      checkpoint_dir: str | None = _UNSET, keep_last_n: int | None = _UNSET,
                      **unknown: Any) -> Self:
        """Sets when `train()` saves checkpoints, where, and how many it keeps."""
        return self._set_section("checkpointing", locals())

    def debugging(self, *, seed: int | None = _UNSET, **unknown: Any) -> Self:
        """Sets the seed."""
        return self._set_section("debugging", locals())

    # ------------------------------------------------------------------ RLlib compatibility
    def framework(self, framework: str = _UNSET, **unknown: Any) -> Self:
        """Accepts RLlib's `.framework("torch")`; rlmod is PyTorch only, so anything else
        (and RLlib's tf/torch.compile options) is refused."""
        if unknown:
            raise TypeError(
                f".framework() got {sorted(unknown)}: rlmod has no tf or torch.compile "
                "settings; only .framework('torch') is accepted (rlmod is PyTorch only).")
        if framework is not _UNSET and framework != "torch":
            raise ValueError(
                f"framework={framework!r}: rlmod is PyTorch only; use .framework('torch') "
                "or drop the call.")
        return self

    def api_stack(self, enable_rl_module_and_learner: bool = _UNSET,
                  enable_env_runner_and_connector_v2: bool = _UNSET) -> Self:
        """Accepts RLlib's switch to its new API stack, the only stack rlmod has; turning
        either flag off is refused."""
        for name, value in (("enable_rl_module_and_learner", enable_rl_module_and_learner),
                            ("enable_env_runner_and_connector_v2",
                             enable_env_runner_and_connector_v2)):
            if value is not _UNSET and value is not True:
                raise ValueError(
                    f"api_stack({name}={value!r}): rlmod has only RLlib's new API stack "
                    "(RLModule, Learner, EnvRunner, ConnectorV2); there is no old stack to "
                    "switch to. Drop the argument or pass True.")
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
                    f"{did_you_mean(key, table)}")
            out[name] = table[name].validate(value)
        return out

    def update_from_dict(self, config_dict: Mapping[str, Any], *,
                         trusted_modules: Iterable[str] = ()) -> Self:
        """Sets every setting in `config_dict` (RLlib's name), e.g. another config's
        `to_dict()`; JSON forms (import paths, spaces, specs) are decoded under the trust
        model. RLlib's `framework` and `enable_*` API-stack keys are accepted if they name
        what rlmod is; unknown keys are an error."""
        rllib_only = {"framework": lambda v: self.framework(v),
                      "enable_rl_module_and_learner":
                          lambda v: self.api_stack(enable_rl_module_and_learner=v),
                      "enable_env_runner_and_connector_v2":
                          lambda v: self.api_stack(enable_env_runner_and_connector_v2=v)}
        for key, value in config_dict.items():
            if key in rllib_only:
                rllib_only[key](value)
                continue
            name = "lambda_" if key == "lambda" and "lambda_" in self.settings() else key
            if name not in self.settings():
                raise ValueError(
                    f"{type(self).__name__}.update_from_dict: unknown setting {key!r}."
                    f"{did_you_mean(key, self.settings())}")
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

    def get_rollout_fragment_length(self) -> int:
        """Steps per sub-env per sample() call ('auto': the train batch split evenly)."""
        if self.rollout_fragment_length != "auto":
            return int(self.rollout_fragment_length)
        per_call = max(1, self.num_env_runners) * self.num_envs_per_env_runner
        return max(1, -(-self.total_train_batch_size // per_call))

    @property
    def module_ids(self) -> list[ModuleID]:
        """All module IDs: `policies` (or the default one) plus extra sub-specs."""
        ids = list(self.policies or {DEFAULT_MODULE_ID: None})
        if isinstance(self.rl_module_spec, MultiRLModuleSpec):
            seen = set(ids)
            ids += [m for m in self.rl_module_spec.rl_module_specs if m not in seen]
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

    def build_learner_connector(self, observation_space: gym.Space | None = None,
                                action_space: gym.Space | None = None) -> ConnectorPipeline:
        """The user's learner connectors; subclasses append their own (GAE for PPO)."""
        pieces: list[Connector] = []
        if self.learner_connector is not None:
            pieces = as_connector_list(self.learner_connector(observation_space, action_space),
                                       setting="learner_connector")
        return ConnectorPipeline(pieces)

    def build_env_to_module_connector(self, env: Any, observation_space: gym.Space,
                                      action_space: gym.Space) -> ConnectorPipeline:
        """The user's pieces, then the defaults (flatten, one-hot) for what they output.

        As RLlib prepends user pieces to its default pipeline, a user's piece sees the
        env's raw observations (e.g. a Dict) and the defaults only flatten what is left.
        """
        pieces: list[Any] = []
        if self.env_to_module_connector is not None:
            made = call_connector_factory(self.env_to_module_connector, env,
                                          _env_spaces(env, observation_space, action_space),
                                          torch.device("cpu"))
            pieces = as_connector_list(made, setting="env_to_module_connector")
        user = ConnectorPipeline(pieces, input_observation_space=observation_space,
                                 input_action_space=action_space)
        assert user.observation_space is not None
        pieces += default_env_to_module(user.observation_space)
        return ConnectorPipeline(pieces, input_observation_space=observation_space,
                                 input_action_space=action_space)

    def build_module_to_env_connector(self, env: Any, observation_space: gym.Space,
                                      action_space: gym.Space) -> ConnectorPipeline:
        """The user's pieces, then the defaults (sample actions, unsquash/clip)."""
        pieces: list[Any] = []
        if self.module_to_env_connector is not None:
            made = call_connector_factory(self.module_to_env_connector, env,
                                          _env_spaces(env, observation_space, action_space))
            pieces += as_connector_list(made, setting="module_to_env_connector")
        pieces += default_module_to_env(action_space)
        return ConnectorPipeline(pieces, input_observation_space=observation_space,
                                 input_action_space=action_space)

    # ------------------------------------------------------------------ specs (rule 2)
    def _module_spaces_from_env_spaces(self, obs_space: gym.Space,
                                       act_space: gym.Space) -> tuple[gym.Space, gym.Space]:
        pipeline = self.build_env_to_module_connector(None, obs_space, act_space)
        assert pipeline.observation_space is not None and pipeline.action_space is not None
        return pipeline.observation_space, pipeline.action_space

    def _single_agent_env_spaces(self, env: Any) -> tuple[gym.Space, gym.Space] | None:
        if env is None:
            return None
        obs = getattr(env, "single_observation_space", None) or env.observation_space
        act = getattr(env, "single_action_space", None) or env.action_space
        return obs, act

    def get_rl_module_spec(self, env: Any = None, spaces: Mapping[str, tuple] | None = None,
                           inference_only: bool | None = None) -> RLModuleSpec:
        """The complete spec of the default module (single-module case, rule 2).

        Spaces come from `spaces[DEFAULT_MODULE_ID]`, else `env` (through the env-to-module
        connectors), else the user's spec, else `.environment(observation_space=...,
        action_space=...)` (through the connectors). `inference_only=None` keeps the spec's.
        """
        user = self.rl_module_spec
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
        spec = self.get_default_rl_module_spec()
        if user is not None:
            spec = spec._merged_with(user)
        obs, act = self._resolve_spaces(DEFAULT_MODULE_ID, spec, env=env, spaces=spaces,
                                        env_spaces=self._single_agent_env_spaces(env))
        model_config = {**_plain(self.model_config), **_plain(spec.model_config)}
        return RLModuleSpec(
            module_class=spec.module_class, observation_space=obs, action_space=act,
            inference_only=spec.inference_only if inference_only is None else inference_only,
            learner_only=spec.learner_only, model_config=model_config)

    def get_multi_rl_module_spec(self, *, env: Any = None,
                                 spaces: Mapping[str, tuple] | None = None,
                                 inference_only: bool = False) -> MultiRLModuleSpec:
        """One complete sub-spec per module (rule 2); learner-only ones dropped if
        `inference_only`.

        Each module's spaces come from `spaces[module_id]`, else from the env's agents
        mapped to it (through the env-to-module connectors), else from its own sub-spec;
        in the single-agent case a module without any of these sees what the default
        module sees.
        """
        user = self.rl_module_spec
        sub_specs = dict(user.rl_module_specs) if isinstance(user, MultiRLModuleSpec) else {}
        base = self.get_default_rl_module_spec()
        if isinstance(user, RLModuleSpec):
            base = base._merged_with(user)
        for mid, pspec in (self.policies or {}).items():
            if pspec is not None:
                sub_specs[mid] = sub_specs[mid]._merged_with(pspec) if mid in sub_specs else pspec
        agent_spaces = self._spaces_by_module_from_env(env) if self.is_multi_agent else {}
        single_env_spaces = None if self.is_multi_agent else self._single_agent_env_spaces(env)
        global_mc = _plain(self.model_config)
        base_mc = {**global_mc, **_plain(base.model_config)}
        specs: dict[ModuleID, RLModuleSpec] = {}
        default_spaces: tuple | None = None
        for mid in self.module_ids:
            own = sub_specs.get(mid)
            if own is not None and inference_only and own.learner_only:
                continue
            spec = base if own is None else base._merged_with(own)
            env_spaces = agent_spaces.get(mid) if self.is_multi_agent else single_env_spaces
            try:
                obs, act = self._resolve_spaces(mid, spec, env=env, spaces=spaces,
                                                env_spaces=env_spaces, module_spaces=True)
            except ValueError:
                if default_spaces is None or self.is_multi_agent:
                    raise
                obs, act = default_spaces  # single-agent: extra modules see what the env shows
            if mid == DEFAULT_MODULE_ID:
                default_spaces = (obs, act)
            mc = base_mc if own is None or not own.model_config else {
                **base_mc, **_plain(own.model_config)}
            specs[mid] = RLModuleSpec(
                module_class=spec.module_class, observation_space=obs, action_space=act,
                inference_only=inference_only or spec.inference_only,
                learner_only=spec.learner_only, model_config=mc)
        if isinstance(user, MultiRLModuleSpec):  # keep its class and shared parts (RLlib's)
            return MultiRLModuleSpec(
                multi_rl_module_class=user.multi_rl_module_class,
                observation_space=user.observation_space, action_space=user.action_space,
                model_config=user.model_config, rl_module_specs=specs)
        return MultiRLModuleSpec(rl_module_specs=specs)

    def _resolve_spaces(self, module_id: ModuleID, spec: RLModuleSpec, *, env: Any,
                        spaces: Mapping[str, tuple] | None, env_spaces: tuple | None,
                        module_spaces: bool = False) -> tuple[gym.Space, gym.Space]:
        if spaces is not None and module_id in spaces:
            return spaces[module_id]
        if env_spaces is not None:
            return (env_spaces if module_spaces and self.is_multi_agent
                    else self._module_spaces_from_env_spaces(*env_spaces))
        if spec.observation_space is not None and spec.action_space is not None:
            return spec.observation_space, spec.action_space
        if self.observation_space is not None and self.action_space is not None:
            return self._module_spaces_from_env_spaces(self.observation_space, self.action_space)
        raise ValueError(
            f"Cannot infer the observation and action spaces of module {module_id!r}: no "
            "spaces=..., no env, none on its RLModuleSpec and none in the config. Pass "
            "get_*_spec(spaces=env_runner_group.get_spaces()) or env=..., set "
            "RLModuleSpec(observation_space=..., action_space=...), or call "
            "config.environment(observation_space=..., action_space=...)."
        )

    def _spaces_by_module_from_env(self, env: Any) -> dict[ModuleID, tuple]:
        """Module spaces by reverse-mapping the env's agents through policy_mapping_fn."""
        found = self.env_spaces_by_module(env)
        converted: dict[tuple[int, int], tuple[gym.Space, gym.Space]] = {}
        for _, obs, act in found.values():
            key = (id(obs), id(act))
            if key not in converted:
                converted[key] = self._module_spaces_from_env_spaces(obs, act)
        return {mid: converted[(id(o), id(a))] for mid, (_, o, a) in found.items()}

    def env_spaces_by_module(self, env: Any) -> dict[ModuleID, tuple[Any, gym.Space, gym.Space]]:
        """{module_id: (first agent mapped to it, its raw obs space, its raw action space)}.

        Reverse-maps `env.possible_agents` through `policy_mapping_fn(agent_id,
        SETUP_EPISODE)` (an EpisodeInfo with `id_=-1`, see rlmod.env.multi_agent_rows);
        raises if an agent maps to an unknown or a learner-only module, or if two agents
        with different spaces map to one module.
        """
        if env is None:
            return {}
        found: dict[ModuleID, tuple[Any, gym.Space, gym.Space]] = {}
        known = set(self.module_ids) - self.learner_only_module_ids
        for agent_id in env.possible_agents:
            mid = self.policy_mapping_fn(agent_id, SETUP_EPISODE)
            if mid not in known:
                raise UnknownModuleIDError(self.mapping_error_message(agent_id, mid))
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

    def mapping_error_message(self, agent_id: Any, module_id: Any) -> str:
        """What is wrong when policy_mapping_fn maps `agent_id` to `module_id`."""
        acting = [m for m in self.module_ids if m not in self.learner_only_module_ids]
        if module_id in self.learner_only_module_ids:
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

    @property
    def learner_only_module_ids(self) -> set[ModuleID]:
        """Modules whose spec says `learner_only=True` (in rl_module_spec or policies)."""
        user = self.rl_module_spec
        specs = dict(user.rl_module_specs) if isinstance(user, MultiRLModuleSpec) else {}
        for mid, pspec in (self.policies or {}).items():
            if pspec is not None:
                specs[mid] = pspec  # _merged_with takes the flags from this one
        return {mid for mid, spec in specs.items() if spec.learner_only}

    # ------------------------------------------------------------------ per-module (rule 4)
    def get_config_for_module(self, module_id: ModuleID) -> AlgorithmConfig:
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
        if self.input_ != "sampler" and not self.reads_offline_data:
            raise ValueError(
                f"offline_data(input_={self.input_!r}) is read by offline algorithms (BC, "
                f"MARWIL); {type(self).__name__} trains on what its EnvRunners sample. Use "
                "BCConfig or MARWILConfig, or leave input_ at 'sampler'.")
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
            raise TypeError(f"{type(self).__name__} has no algo_class to build.")
        return self.algo_class(config=self)

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
        """All settings as JSON-able values (classes and functions by import path).

        A lambda or closure has no import path: an error, unless `allow_unnamed`
        (checkpoints), where it is stored as "must be passed at load".
        """
        return {name: encode_setting(self.__dict__[name], name, allow_unnamed=allow_unnamed)
                for name in self.settings()}  # as set: derived settings stay None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *,
                  trusted_modules: Iterable[str] = ()) -> Self:
        """Inverse of `to_dict`; unknown keys are an error.

        Import paths resolve only inside rlmod and the `trusted_modules` packages, and
        must name an object of the kind their setting takes (rlmod.utils.trust): loading a
        config from a stranger imports and runs nothing else.
        """
        config = cls()
        for name, value in data.items():
            if name not in cls.settings():
                raise ValueError(
                    f"{cls.__name__}.from_dict: unknown setting {name!r}."
                    f"{did_you_mean(name, cls.settings())}"
                )
            setattr(config, name, decode_setting(value, name, trusted_modules=trusted_modules))
        return config

    def __repr__(self) -> str:
        changed = {n: self.__dict__[n] for n, st in self.settings().items()
                   if self.__dict__[n] != st.default}
        return f"{type(self).__name__}({changed})"


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


def _env_spaces(env: Any, observation_space: gym.Space,
                action_space: gym.Space) -> dict[str, tuple[gym.Space, gym.Space]]:
    """The `spaces` a connector factory gets, keyed as RLlib's (and as
    `EnvRunner.get_spaces()`): `__env_single__` (one sub-env's spaces) and, with an env,
    `__env__` (the env's own, vectorized ones)."""
    spaces = {"__env_single__": (observation_space, action_space)}
    if env is not None and hasattr(env, "observation_space"):
        spaces["__env__"] = (env.observation_space, env.action_space)
    return spaces


def _plain(model_config: Any) -> dict[str, Any]:
    if model_config is None:
        return {}
    if isinstance(model_config, Mapping):
        return dict(model_config)
    return dataclasses.asdict(model_config)
