"""Migration hints: RLlib's old names (and its old-API-stack setters) and Stable-Baselines3's
names, and where their settings live in rlmod, for the errors an AlgorithmConfig raises on a
name it does not know.

Used by `rlmod.algorithms.algorithm_config` (attribute access, `update_from_dict`,
`overrides`) and `rlmod.algorithms.settings` (a setter's unknown keyword). The names are
RLlib's own deprecations (ray 2.60, `AlgorithmConfig.env_runners/resources/training`:
`deprecation_warning(old=..., new=...)`), so a script written for an older RLlib is told
the new name instead of "unknown setting".
"""

from __future__ import annotations

from typing import Any, NoReturn

RENAMED_SETTINGS: dict[str, tuple[str, str]] = {
    # old name: (new name, the setter that takes it)
    "num_rollout_workers": ("num_env_runners", "env_runners"),
    "num_workers": ("num_env_runners", "env_runners"),
    "num_envs_per_worker": ("num_envs_per_env_runner", "env_runners"),
    "num_cpus_per_worker": ("num_cpus_per_env_runner", "env_runners"),
    "create_env_on_driver": ("create_env_on_local_worker", "env_runners"),
    "num_learner_workers": ("num_learners", "learners"),
    "num_cpus_per_learner_worker": ("num_cpus_per_learner", "learners"),
    "num_gpus_per_learner_worker": ("num_gpus_per_learner", "learners"),
    "sgd_minibatch_size": ("minibatch_size", "training"),
    "num_sgd_iter": ("num_epochs", "training"),
    "evaluation_num_workers": ("evaluation_num_env_runners", "evaluation"),
    "recreate_failed_workers": ("restart_failed_env_runners", "fault_tolerance"),
    "recreate_failed_env_runners": ("restart_failed_env_runners", "fault_tolerance"),
    "ignore_worker_failures": ("ignore_env_runner_failures", "fault_tolerance"),
    "max_num_worker_restarts": ("max_num_env_runner_restarts", "fault_tolerance"),
    "min_time_s_per_reporting": ("min_time_s_per_iteration", "reporting"),
    "min_sample_timesteps_per_reporting": ("min_sample_timesteps_per_iteration", "reporting"),
    "min_train_timesteps_per_reporting": ("min_train_timesteps_per_iteration", "reporting"),
}
"""Settings RLlib renamed; rlmod has only the new name."""

MODEL_KEYS = frozenset(
    {
        "fcnet_hiddens",
        "fcnet_activation",
        "vf_share_layers",
        "head_fcnet_hiddens",
        "head_fcnet_activation",
        "free_log_std",
        "log_std_init",
        "conv_filters",
        "conv_activation",
        "conv_kernel_initializer",
        "conv_kernel_initializer_kwargs",
        "conv_bias_initializer",
        "conv_bias_initializer_kwargs",
    }
)
"""DefaultModelConfig's fields: on RLlib's new API stack they go in `.rl_module(model_config=
{...})`, not at the top level of the config nor in `.training(model={...})`."""

_GPUS = (
    ".learners(num_gpus_per_learner=1) (one Learner on one GPU; add num_learners=N for N "
    "GPU Learners)."
)

RENAMED_SETTERS: dict[str, str] = {
    "rollouts": (
        "RLlib renamed .rollouts() to .env_runners() (and num_rollout_workers to "
        "num_env_runners): use .env_runners(num_env_runners=..., ...)."
    ),
    "resources": (
        "RLlib's new API stack, which rlmod follows, has no .resources(): Learner resources "
        "go in .learners(num_learners=..., num_gpus_per_learner=..., num_cpus_per_learner="
        "...), EnvRunner CPUs in .env_runners(num_cpus_per_env_runner=...); num_gpus=1 "
        "becomes " + _GPUS
    ),
    "exploration": (
        "RLlib's new API stack has no .exploration(): use .env_runners(explore=True|False); "
        "how a module explores is its forward_exploration (e.g. DQN's epsilon in .training())."
    ),
}
"""Setters RLlib removed or renamed; reading them from a config gives this hint."""


SB3_NAMES: dict[str, str] = {
    "learning_rate": ".training(lr=...)",
    "n_steps": (
        ".env_runners(rollout_fragment_length=...) per env (PPO's batch is train_batch_size "
        "= n_steps * n_envs)"
    ),
    "batch_size": (
        ".training(minibatch_size=...) for PPO; for DQN/SAC SB3's batch_size is "
        ".training(train_batch_size=...), the replayed batch"
    ),
    "n_epochs": ".training(num_epochs=...)",
    "gae_lambda": ".training(lambda_=...)",
    "clip_range": ".training(clip_param=...)",
    "ent_coef": ".training(entropy_coeff=...) for PPO; for SAC .training(initial_alpha=...)",
    "vf_coef": ".training(vf_loss_coeff=...)",
    "max_grad_norm": ".training(grad_clip=...) (grad_clip_by='global_norm', the default)",
    "target_kl": ".training(kl_early_stop=1.5 * target_kl) (SB3 stops at 1.5x its target_kl)",
    "n_envs": ".env_runners(num_envs_per_env_runner=...)",
    "policy_kwargs": (
        ".rl_module(model_config={...}); SB3's net_arch=[64, 64] is "
        "model_config={'fcnet_hiddens': [64, 64]}"
    ),
    "net_arch": ".rl_module(model_config={'fcnet_hiddens': [...]})",
    "buffer_size": ".training(replay_buffer_config={'capacity': ...})",
    "learning_starts": ".training(num_steps_sampled_before_learning_starts=...)",
    "target_update_interval": ".training(target_network_update_freq=...)",
    "exploration_fraction": (
        ".training(epsilon=[[0, 1.0], [steps, final_eps]]), a schedule of env steps"
    ),
    "exploration_final_eps": ".training(epsilon=[[0, 1.0], [steps, final_eps]])",
    "train_freq": ".training(training_intensity=...) (replayed steps per sampled step)",
    "gradient_steps": ".training(training_intensity=...) (replayed steps per sampled step)",
    "total_timesteps": "a stop criterion: rlmod train --stop-timesteps N, or a loop over train()",
}
"""Stable-Baselines3 (and rl-baselines3-zoo hyperparameter) names and rlmod's setting."""


def setting_hint(name: str) -> str:
    """' <hint>' for a setting name RLlib used to have or Stable-Baselines3 uses, or ''
    when `name` is neither."""
    if name in SB3_NAMES:
        return f" {name} is Stable-Baselines3's name: use {SB3_NAMES[name]}."
    if name in RENAMED_SETTINGS:
        new, setter = RENAMED_SETTINGS[name]
        return f" RLlib renamed {name} to {new}: use .{setter}({new}=...)."
    if name in MODEL_KEYS:
        return (
            f" {name} is a model setting: use .rl_module(model_config={{{name!r}: ...}}), "
            f'in JSON {{"model_config": {{"{name}": ...}}}} (RLlib\'s new API stack moved it '
            "out of .training(model=...))."
        )
    if name == "model":
        return (
            " RLlib's new API stack moved the model dict: use .rl_module(model_config={...}) "
            "with DefaultModelConfig's keys, e.g. model_config={'fcnet_hiddens': [64, 64]}."
        )
    if name == "num_gpus":
        return (
            " num_gpus is RLlib's old-API-stack setting; on the new stack the Learners hold "
            "the GPUs: use " + _GPUS
        )
    return ""


class RemovedSetter:
    """A config class attribute in place of a setter RLlib removed (`.rollouts()`):
    reading it raises AttributeError with the hint, so `hasattr` is False and a call
    says where the settings went instead of "no attribute"."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> NoReturn:
        owner = (objtype or type(obj)).__name__
        raise AttributeError(f"{owner} has no .{self.name}(). {RENAMED_SETTERS[self.name]}")
