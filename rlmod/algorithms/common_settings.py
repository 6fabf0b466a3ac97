"""The settings every algorithm has: the table AlgorithmConfig's setters, checks, defaults
and JSON are built from (see rlmod.algorithms.settings).

One `Setting` per field, grouped by `section`, the fluent setter that sets it
(`config.training(lr=...)` sets the settings of section "training"). Algorithms add
theirs as class attributes of their config (PPOConfig's `clip_param`, ...) and change
common defaults with `setting_defaults`.
"""

from __future__ import annotations

from typing import Any

from rlmod.algorithms import settings as s
from rlmod.algorithms.settings import Setting
from rlmod.callbacks import RLlibCallback
from rlmod.core.columns import DEFAULT_MODULE_ID
from rlmod.core.multi_rl_module import ModuleID


def default_policy_mapping_fn(agent_id: Any, episode: Any = None, **kwargs: Any) -> ModuleID:
    """Maps every agent to the one module `default_policy`."""
    return DEFAULT_MODULE_ID


class CommonSettings:
    """The settings table shared by all algorithms (a base of AlgorithmConfig); holds
    declarations only: reading, checking and setting them is `Setting`'s job."""

    # --- environment ---
    env = Setting(
        None,
        section="environment",
        check=s.env_or_none,
        doc=(
            "A gymnasium ID, a name registered with rlmod.register_env, or a callable "
            "(env_config) -> env."
        ),
    )
    env_config = Setting(
        {},
        section="environment",
        check=s.mapping,
        doc="Keyword arguments for the env (gymnasium) or its creator.",
    )
    observation_space = Setting(
        None,
        section="environment",
        check=s.space_or_none,
        doc=("The env's observation space, for components with no env (offline training)."),
    )
    action_space = Setting(
        None,
        section="environment",
        check=s.space_or_none,
        doc="The env's action space, for components with no env.",
    )
    clip_rewards = Setting(
        None,
        section="environment",
        check=s.reward_clip,
        doc=(
            "Clip the rewards Learners train on (RLlib's setting and values): True to each "
            "reward's sign (-1, 0, +1, as for Atari), a bound c to [-c, c], a pair "
            "(low, high) to [low, high]; None or False: no clipping. The batches "
            "EnvRunnerGroup.sample() returns (so replay buffers and n-step returns too) "
            "hold the clipped rewards; episode returns in the metrics, callbacks' episodes "
            "and offline_data(output=...) files keep the env's, as on RLlib's old stack "
            "(RLlib's new stack accepts the setting but applies it nowhere; its None "
            "clipped Atari envs on the old stack only). Multi-agent: each agent's reward "
            "per row; a module's own value through algorithm_config_overrides_per_module. "
            "Offline algorithms refuse it (they train on recorded rewards)."
        ),
    )
    # --- env_runners ---
    num_env_runners = Setting(
        0,
        section="env_runners",
        check=s.integer(min=0),
        doc=(
            "Remote EnvRunner actors (needs Ray). 0 samples in-process, the fastest on one machine."
        ),
    )
    num_envs_per_env_runner = Setting(
        1,
        section="env_runners",
        check=s.integer(min=1),
        doc=(
            "Sub-envs each EnvRunner steps at once in one vector env; more sub-envs amortize "
            "the forward pass."
        ),
    )
    rollout_fragment_length = Setting(
        "auto",
        section="env_runners",
        check=s.auto_or_integer(min=1),
        doc=("Steps per sub-env per sample() call; 'auto' splits the train batch evenly."),
    )
    env_to_module_connector = Setting(
        None,
        section="env_runners",
        check=s.callable_or_none,
        doc=(
            "callable(env, spaces, device) -> Connector(s) (RLlib 2.41+), or callable(env), "
            "appended after the default flatten/one-hot pieces (env is None for components "
            "without one)."
        ),
    )
    module_to_env_connector = Setting(
        None,
        section="env_runners",
        check=s.callable_or_none,
        doc=("callable(env, spaces) or callable(env) -> Connector(s) run after sampling."),
    )
    explore = Setting(
        True,
        section="env_runners",
        check=s.boolean,
        doc="Sample actions (True) or take the distribution's mode (False).",
    )
    env_runner_cls = Setting(
        None,
        section="env_runners",
        check=s.callable_or_none,
        doc=(
            "EnvRunner class (RLlib's name); None picks SingleAgentEnvRunner, or for "
            "multi-agent configs ReferenceMultiAgentEnvRunner (plain, as fast for up to 10 "
            "agents x sub-envs) or MultiAgentEnvRunner (vectorized) by "
            "rlmod.env.env_runner_group.default_multi_agent_runner_cls."
        ),
    )
    on_non_finite_env_data = Setting(
        "raise",
        section="env_runners",
        check=s.one_of("raise", "truncate_episode"),
        doc=(
            "What an EnvRunner does when an env returns a NaN or infinite observation or "
            "reward: 'raise' an EnvError naming the env, sub-env, step and key (checked once "
            "per sample() call over the whole batch, before anything reaches a Learner), or "
            "'truncate_episode': end that sub-env's episode as truncated at that step (its "
            "last finite observation stands in for the final one, the reward counts as 0), "
            "reset it, and count it in `num_episodes_truncated_non_finite` (checked every step)."
        ),
    )
    create_env_on_local_worker = Setting(
        False,
        section="env_runners",
        check=s.boolean,
        doc=(
            "With num_env_runners > 0, also build an EnvRunner (and its env) in the driver "
            "process; it never samples, it only answers get_spaces() (RLlib's default: False, "
            "the spaces then come from the first healthy remote EnvRunner). With "
            "num_env_runners=0 the local EnvRunner is always built: it is the one that samples."
        ),
    )
    num_cpus_per_env_runner = Setting(
        1.0,
        section="env_runners",
        check=s.number(low=0.0),
        doc=(
            "CPUs Ray reserves for each remote EnvRunner actor (fractions allowed); Ray places "
            "no more actors on a node than its CPUs hold."
        ),
    )
    sample_timeout_s = Setting(
        60.0,
        section="env_runners",
        check=s.optional(s.number(low=0.0, low_open=True)),
        doc=(
            "Seconds to wait for each remote EnvRunner's sample(); one that takes longer is "
            "treated as failed (restarted or ignored per .fault_tolerance()). None waits "
            "forever."
        ),
    )
    check_agent_observations = Setting(
        True,
        section="env_runners",
        check=s.boolean,
        doc=(
            "Multi-agent: check every step that each agent's observation has the shape and "
            "dtype of its declared space, naming the agent where not (a torch error far from "
            "the cause otherwise). Turn off for speed once an env is known to be right."
        ),
    )
    # --- learners ---
    num_learners = Setting(
        0,
        section="learners",
        check=s.integer(min=0),
        doc=(
            "Remote Learner actors (needs Ray), trained data-parallel with torch.distributed "
            "(gloo): each trains on its share of the batch, gradients are averaged, all hold "
            "the same weights. 0 trains in-process."
        ),
    )
    num_cpus_per_learner = Setting(
        1.0,
        section="learners",
        check=s.number(low=0.0),
        doc=(
            "CPUs Ray reserves for each remote Learner actor (num_learners > 0). (RLlib's "
            "default 'auto' means 1 without a GPU and 0 with one; rlmod's default is 1.)"
        ),
    )
    num_gpus_per_learner = Setting(
        0.0,
        section="learners",
        check=s.number(low=0.0),
        doc=(
            "GPUs per Learner. 0 trains on the CPU. Above 0 the Learner's modules, optimizer "
            "states and batches live on a CUDA device: with num_learners=0 the driver's GPU "
            "local_gpu_idx; with num_learners > 0 each Learner actor reserves this many GPUs "
            "from Ray (fractions share one GPU) and the Learners all-reduce with NCCL instead "
            "of gloo. Weights still reach EnvRunners as CPU (numpy) arrays."
        ),
    )
    mixed_precision = Setting(
        None,
        section="learners",
        check=s.one_of(None, "bfloat16", "float16"),
        doc=(
            "Learners run each minibatch's forward passes and losses under torch.autocast in "
            "this dtype; weights and optimizer states stay float32. None: all float32. "
            "'bfloat16' on CPUs and GPUs; 'float16' only on CUDA GPUs (num_gpus_per_learner "
            "> 0), with GradScaler's dynamic loss scaling (rlmod/core/mixed_precision.py). "
            "RLlib has no such setting (autocast there needs a custom Learner)."
        ),
    )
    local_gpu_idx = Setting(
        0,
        section="learners",
        check=s.integer(min=0),
        doc=(
            "With num_gpus_per_learner > 0 and num_learners=0: which visible GPU (an index "
            "into CUDA_VISIBLE_DEVICES) the driver's Learner uses, as RLlib's."
        ),
    )
    num_threads_per_learner = Setting(
        None,
        section="learners",
        check=s.optional(s.integer(min=1)),
        doc=(
            "torch intra-op threads of in-process components, set once at build and never "
            "changed during a run. None: 1, since small networks run fastest on one thread "
            "and a synchronous algorithm leaves no idle core. A number: that many threads "
            "everywhere; 2 pays for large stacked groups on idle cores (1,000 modules, first "
            "4,000-step train(): 61 s against 114 s on one thread, 2-core Xeon), but "
            "beside other CPU-bound processes threads that wait for a busy core make every "
            "update several times slower (2-policy README example: 46-57 s against 11-12 s)."
        ),
    )
    max_consecutive_non_finite_updates = Setting(
        3,
        section="learners",
        check=s.integer(min=1),
        doc=(
            "A minibatch whose loss or gradient is NaN/inf is skipped for that module (its "
            "weights and optimizer state stay as they were; counted in "
            "`num_non_finite_updates`); after this many in a row for one module the Learner "
            "raises, naming the module and its loss terms."
        ),
    )
    learner_config_dict = Setting(
        {},
        section="learners",
        check=s.mapping,
        doc=(
            "Free settings a custom Learner reads as self.config.learner_config_dict (RLlib's); "
            "each call of .learners()/.training() updates it, as RLlib does."
        ),
    )
    # --- training ---
    gamma = Setting(
        0.99,
        section="training",
        check=s.number(low=0.0, high=1.0),
        doc="Discount factor of future rewards.",
    )
    lr = Setting(
        5e-5,
        section="training",
        check=s.schedule_or_number(),
        doc=("Learning rate, or a piecewise-linear schedule [[env_step, lr], ...]."),
    )
    train_batch_size = Setting(
        4000,
        section="training",
        check=s.integer(min=1),
        doc=(
            "Env steps per training iteration over all Learners; used when "
            "train_batch_size_per_learner is None."
        ),
    )
    train_batch_size_per_learner = Setting(
        None,
        section="training",
        check=s.optional(s.integer(min=1)),
        derive=lambda c: c.train_batch_size // max(1, c.num_learners),
        doc=(
            "Env steps each Learner trains on per iteration. Left None, it reads as "
            "train_batch_size // max(1, num_learners) (rule 5, RLlib's property) while "
            "to_dict() keeps None."
        ),
    )
    minibatch_size = Setting(
        128,
        section="training",
        check=s.optional(s.integer(min=1)),
        doc="Rows per SGD step; None trains on the whole batch at once.",
    )
    num_epochs = Setting(
        1, section="training", check=s.integer(min=1), doc="Passes over each train batch."
    )
    grad_clip = Setting(
        None,
        section="training",
        check=s.optional(s.number(low=0.0, low_open=True)),
        doc="Clip each module's global gradient norm to this value.",
    )
    grad_clip_by = Setting(
        "global_norm",
        section="training",
        check=s.one_of("global_norm", "norm", "value"),
        doc=(
            "How grad_clip clips (RLlib's setting and values): 'global_norm' scales all of a "
            "module's gradients by grad_clip / their global norm, 'norm' each tensor by its "
            "own norm, 'value' clamps every element to [-grad_clip, grad_clip]. Modules "
            "clipped by 'norm' or 'value' are trained alone, not stacked."
        ),
    )
    learner_class = Setting(
        None,
        section="training",
        check=s.learner_class_or_none,
        derive=lambda c: c.get_default_learner_class(),
        doc=(
            "The Learner class LearnerGroup builds, e.g. a subclass of PPOLearner with an extra "
            "loss term. Left None it reads as the algorithm's default (RLlib's property)."
        ),
    )
    learner_connector = Setting(
        None,
        section="training",
        check=s.learner_connector_factory,
        doc=(
            "callable(observation_space, action_space) -> piece(s), run before the "
            "algorithm's own learner pieces (e.g. GAE): rlmod LearnerConnectors, or "
            "ConnectorV2 pieces written as RLlib's (called with rl_module, batch, episodes, "
            "...; the episodes are the batch's sequences). Pieces rlmod cannot run there "
            "are refused when set."
        ),
    )
    # --- rl_module ---
    rl_module_spec = Setting(
        None,
        section="rl_module",
        check=s.spec_or_none,
        view=lambda c, user: c.merged_rl_module_spec(user),
        doc=(
            "An RLModuleSpec for the default module, or a MultiRLModuleSpec (several modules, "
            "learner-only ones included); unset fields come from the algorithm's default. "
            "Reading it gives that merge, as RLlib's property (the algorithm's default spec "
            "when unset); to_dict() keeps what was set."
        ),
    )
    model_config = Setting(
        {},
        section="rl_module",
        check=s.model_config,
        doc=("Model settings for every module (a sub-spec's own model_config wins)."),
    )
    algorithm_config_overrides_per_module = Setting(
        {},
        section="rl_module",
        check=s.overrides_per_module,
        doc=("{module_id: {setting: value}}: the config a Learner uses for that module."),
    )
    # --- multi_agent ---
    policies = Setting(
        None,
        section="multi_agent",
        check=s.policies,
        doc=("Module IDs (a set) or {module_id: RLModuleSpec | None}; None means one module."),
    )
    policy_mapping_fn = Setting(
        default_policy_mapping_fn,
        section="multi_agent",
        check=lambda v: s.callable_or_none(v) or default_policy_mapping_fn,
        doc=(
            "callable(agent_id, episode, **kwargs) -> module ID, called once per agent per "
            "episode; `episode` is an EpisodeInfo (id_, env_index, worker_index), at set-up "
            "(module spaces from the env's possible_agents) the one with id_=-1, never None."
        ),
    )
    policies_to_train = Setting(
        None,
        section="multi_agent",
        check=s.collection_or_callable,
        doc="Module IDs to train, or callable(module_id, batch) -> bool; None trains all.",
    )
    stack_modules = Setting(
        True,
        section="multi_agent",
        check=s.boolean,
        doc=(
            "rlmod's own setting (not RLlib's): modules of one architecture (class that "
            "supports stacking, e.g. DefaultPPORLModule; same spaces and model_config after "
            "per-module overrides) run as one stacked module: one forward per group on "
            "EnvRunners, one loss, backward and optimizer step per group on Learners, where "
            "a group has at least 3 modules (rlmod.core.stacked.MIN_STACK_SIZE: fewer run as "
            "fast alone). Results, "
            "checkpoints and the per-module API are the same either way; False runs every "
            "module alone (to compare, or for a custom Learner that reads per-module state)."
        ),
    )
    # --- fault_tolerance ---
    restart_failed_sub_environments = Setting(
        False,
        section="fault_tolerance",
        check=s.boolean,
        doc=(
            "When a sub-env raises in step() or reset(), recreate it in place, drop its "
            "unfinished episode and go on sampling (RLlib's name). Off: the EnvRunner raises an "
            "EnvError naming the env, sub-env and step, and the next sample() starts every "
            "sub-env afresh, so the Algorithm stays usable."
        ),
    )
    max_consecutive_sub_environment_failures = Setting(
        10,
        section="fault_tolerance",
        check=s.integer(min=1),
        doc=(
            "rlmod's own bound for restart_failed_sub_environments=True (RLlib has none: a "
            "sub-env that always raises is recreated forever there). When one sub-env has "
            "raised this many times with none of its steps kept for training in between (an env "
            "that fails at every step, or always before its episodes give usable rows), the "
            "EnvRunner stops with an EnvError naming the env, the sub-env and the last "
            "exception, instead of sampling nothing. Counted per sub-env; an episode of it that "
            "ends, or a step of it that reaches a batch, starts its count afresh. RLlib's num_consecutive_env_runner_"
            "failures_tolerance (default 100) is the like bound for whole EnvRunners."
        ),
    )
    restart_failed_env_runners = Setting(
        True,
        section="fault_tolerance",
        check=s.boolean,
        doc=(
            "Remote EnvRunners: replace one whose actor died or whose sample() raised (or took "
            "longer than sample_timeout_s) by a new actor with the same worker_index, the "
            "current weights and connector states; the episodes it was sampling are dropped "
            "(RLlib's name and default)."
        ),
    )
    max_num_env_runner_restarts = Setting(
        1000,
        section="fault_tolerance",
        check=s.integer(min=0),
        doc=(
            "Restarts allowed over the whole run, all remote EnvRunners together; past it a "
            "failure is handled as with restart_failed_env_runners=False (RLlib's default)."
        ),
    )
    ignore_env_runner_failures = Setting(
        False,
        section="fault_tolerance",
        check=s.boolean,
        doc=(
            "When a remote EnvRunner fails and is not restarted, go on sampling with the "
            "healthy ones (False: raise an EnvRunnerError naming the runner and the original "
            "exception). Training stops with an error once no healthy EnvRunner is left."
        ),
    )
    # --- evaluation ---
    evaluation_interval = Setting(
        None,
        section="evaluation",
        check=s.optional(s.integer(min=0)),
        doc=("Evaluate every this many train() calls; None or 0 never (RLlib's)."),
    )
    evaluation_duration = Setting(
        10,
        section="evaluation",
        check=s.integer(min=1),
        doc=(
            "Episodes or timesteps per evaluation, over all evaluation EnvRunners (RLlib's "
            "default 10). RLlib's 'auto' is not offered: rlmod evaluates a fixed amount."
        ),
    )
    evaluation_duration_unit = Setting(
        "episodes",
        section="evaluation",
        check=s.one_of("episodes", "timesteps"),
        doc="Unit of evaluation_duration.",
    )
    evaluation_num_env_runners = Setting(
        0,
        section="evaluation",
        check=s.integer(min=0),
        doc=(
            "Remote evaluation EnvRunners (needs Ray); 0 evaluates on one in-process EnvRunner "
            "of its own (RLlib's)."
        ),
    )
    evaluation_config = Setting(
        None,
        section="evaluation",
        check=s.settings_dict_or_none,
        doc=(
            "Settings the evaluation EnvRunners use instead of the main config's, e.g. "
            "PPOConfig.overrides(explore=False) (RLlib's); an AlgorithmConfig is taken whole, "
            "as its to_dict()."
        ),
    )
    evaluation_parallel_to_training = Setting(
        False,
        section="evaluation",
        check=s.boolean,
        doc=(
            "Evaluate in a thread while the iteration's training step runs, with the weights "
            "from before that step (RLlib's); the result is the same iteration's."
        ),
    )
    evaluation_explore = Setting(
        None,
        section="evaluation",
        check=s.optional(s.boolean),
        doc=(
            "rlmod's shortcut for evaluation_config={'explore': ...}; None (default) leaves "
            "explore to evaluation_config, else the main config's explore, as RLlib does."
        ),
    )
    in_evaluation = Setting(
        False,
        section="evaluation",
        check=s.boolean,
        doc=(
            "True on the config of evaluation EnvRunners (RLlib's flag; set by the Algorithm, "
            "read by callbacks)."
        ),
    )
    # --- callbacks ---
    callbacks_class = Setting(
        RLlibCallback,
        section="callbacks",
        check=s.callback_classes,
        doc=(
            "An RLlibCallback subclass or a list of them, built once per Algorithm and per "
            "EnvRunner (RLlib's callbacks_class; None reads as RLlibCallback, which does nothing)."
        ),
    )
    callbacks_on_algorithm_init = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_algorithm_init"),
        doc="Callable(s) called after callbacks_class's on_algorithm_init.",
    )
    callbacks_on_train_result = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_train_result"),
        doc="Callable(s) called after callbacks_class's on_train_result.",
    )
    callbacks_on_evaluate_start = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_evaluate_start"),
        doc="Callable(s) called after callbacks_class's on_evaluate_start.",
    )
    callbacks_on_evaluate_end = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_evaluate_end"),
        doc="Callable(s) called after callbacks_class's on_evaluate_end.",
    )
    callbacks_on_checkpoint_loaded = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_checkpoint_loaded"),
        doc="Callable(s) called after callbacks_class's on_checkpoint_loaded.",
    )
    callbacks_on_environment_created = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_environment_created"),
        doc="Callable(s) called after callbacks_class's on_environment_created.",
    )
    callbacks_on_episode_created = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_episode_created"),
        doc="Callable(s) called after callbacks_class's on_episode_created.",
    )
    callbacks_on_episode_start = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_episode_start"),
        doc="Callable(s) called after callbacks_class's on_episode_start.",
    )
    callbacks_on_episode_step = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_episode_step"),
        doc="Callable(s) called after callbacks_class's on_episode_step.",
    )
    callbacks_on_episode_end = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_episode_end"),
        doc="Callable(s) called after callbacks_class's on_episode_end.",
    )
    callbacks_on_sample_end = Setting(
        None,
        section="callbacks",
        check=s.hook_callables("on_sample_end"),
        doc="Callable(s) called after callbacks_class's on_sample_end.",
    )
    # --- reporting ---
    metrics_num_episodes_for_smoothing = Setting(
        100,
        section="reporting",
        check=s.integer(min=1),
        doc=("Episodes in the window of episode_return_mean and friends."),
    )
    min_time_s_per_iteration = Setting(
        None,
        section="reporting",
        check=s.optional(s.number(low=0.0)),
        doc=(
            "One train() call repeats training_step() until at least this many seconds "
            "passed (and the two step minimums below are met); None or 0: no minimum "
            "(RLlib's name and meaning; RLlib's SAC: 1)."
        ),
    )
    min_sample_timesteps_per_iteration = Setting(
        0,
        section="reporting",
        check=s.integer(min=0),
        doc=(
            "One train() call repeats training_step() until at least this many env steps were "
            "sampled (RLlib's name and meaning; RLlib's DQN: 1000, SAC: 100), so an iteration, "
            "its result, its evaluation and its log line cover that much sampling. 0: one "
            "training_step() is enough. Needs EnvRunners: offline algorithms sample nothing."
        ),
    )
    min_train_timesteps_per_iteration = Setting(
        0,
        section="reporting",
        check=s.integer(min=0),
        doc=(
            "One train() call repeats training_step() until at least this many rows were "
            "trained on (summed over modules and epochs: env steps single-agent, agent steps "
            "multi-agent; RLlib's name and meaning). 0: no minimum."
        ),
    )
    # --- offline_data ---
    input_ = Setting(
        "sampler",
        section="offline_data",
        check=s.offline_input,
        doc=(
            "'sampler' (train on what EnvRunners sample), or recorded episodes to train on "
            "offline: a Parquet file, a directory of them, a glob, or a list of these."
        ),
    )
    output = Setting(
        None,
        section="offline_data",
        check=s.optional(s.path_string),
        doc=(
            "Directory EnvRunners write every finished episode to, as Parquet (see "
            "rlmod.offline); None writes nothing."
        ),
    )
    output_max_rows_per_file = Setting(
        100_000,
        section="offline_data",
        check=s.integer(min=1),
        doc="Rows per Parquet file before a new one starts.",
    )
    shuffle_buffer_size = Setting(
        10_000,
        section="offline_data",
        check=s.integer(min=0),
        doc=(
            "Rows held for shuffling offline data; batches are drawn at random from it (RLlib "
            "defaults to 0 and leaves shuffling to Ray Data; rlmod reads files itself)."
        ),
    )
    input_read_method = Setting(
        None,
        section="offline_data",
        check=s.one_of(None, "read_parquet"),
        doc=(
            "None (rlmod's default): offline algorithms read the Parquet files in-process with "
            "pyarrow, no Ray needed. 'read_parquet': Ray Data tasks read the same files (whole "
            "files, so episodes stay whole) and stream equal shards to the Learners, each "
            "drawing its own batches (num_learners > 0: one shard per Learner). RLlib always "
            "reads with Ray Data (its default is 'read_parquet'); rlmod does when asked."
        ),
    )
    map_batches_kwargs = Setting(
        {},
        section="offline_data",
        check=s.mapping,
        doc=(
            "With input_read_method='read_parquet': keyword arguments of Ray Data's "
            "Dataset.map_batches that runs the reading (RLlib's name), over rlmod's defaults "
            "{'num_cpus': 0}: reading reserves no CPU, so Learners that hold every CPU of a "
            "small cluster cannot starve it."
        ),
    )
    iter_batches_kwargs = Setting(
        {},
        section="offline_data",
        check=s.mapping,
        doc=(
            "With input_read_method='read_parquet': keyword arguments of Ray Data's "
            "iter_batches by which each Learner draws its batches (RLlib's name), e.g. "
            "{'prefetch_batches': 2}; batch size, format and shuffling are rlmod's."
        ),
    )
    dataset_num_iters_per_learner = Setting(
        None,
        section="offline_data",
        check=s.optional(s.integer(min=1)),
        doc=(
            "Updates each Learner runs per train() of an offline algorithm, each on its own "
            "batch of train_batch_size_per_learner rows (RLlib's setting; BC and MARWIL "
            "default to 1, as RLlib's). RLlib's None (a whole pass over each Learner's "
            "data) is not offered: give a number."
        ),
    )
    output_write_episodes = Setting(
        True,
        section="offline_data",
        check=s.boolean,
        doc=(
            "RLlib's choice between whole episodes (True) and columnar rows (False) in "
            "offline_data(output=...). rlmod writes one format that is both: columnar "
            "Parquet rows with episode IDs, each episode whole and in time order "
            "(rlmod.offline), so either value gives the same files."
        ),
    )
    # --- checkpointing ---
    checkpoint_frequency = Setting(
        0,
        section="checkpointing",
        check=s.integer(min=0),
        doc=(
            "Save a checkpoint into checkpoint_dir every this many train() calls; 0 never. "
            "The path is in result['checkpoint_path']."
        ),
    )
    checkpoint_dir = Setting(
        None,
        section="checkpointing",
        check=s.optional(s.path_string),
        doc=("Directory of the periodic checkpoints (checkpoint_<iteration> inside it)."),
    )
    keep_last_n = Setting(
        None,
        section="checkpointing",
        check=s.optional(s.integer(min=1)),
        doc="Delete all but the newest n complete checkpoints; None keeps all.",
    )
    # --- debugging ---
    seed = Setting(
        None,
        section="debugging",
        check=s.optional(s.integer(min=0, max=2**64 - 1)),
        doc=(
            "Seeds torch, numpy and the envs; one seed gives the same run twice. At most "
            "2**64 - 1, the largest seed torch takes."
        ),
    )
    plain_paths = Setting(
        False,
        section="debugging",
        check=s.boolean,
        doc=(
            "rlmod's own setting: True runs every plain path instead of rlmod's fast paths "
            "(stacked modules, deferred diagnostics, deferred init, gc pauses; the table is "
            "in rlmod/fast_paths.py), for the whole process, to compare or to read. The "
            "environment variable RLMOD_PLAIN_PATHS=1 does the same."
        ),
    )
