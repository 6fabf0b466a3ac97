"""PPOConfig and PPO: the PPO settings and its training step.

`PPOConfig().environment(...).build_algo()` returns a PPO; PPOLearner holds the loss.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from rlmod.algorithms import settings as s
from rlmod.algorithms.algorithm import Algorithm
from rlmod.algorithms.algorithm_config import AlgorithmConfig
from rlmod.algorithms.settings import Setting
from rlmod.connectors.learner import GeneralAdvantageEstimation
from rlmod.connectors.learner_sequences import AddTimeDimToBatchAndZeroPad
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.rl_module import RLModuleSpec


class PPOConfig(AlgorithmConfig):
    """PPO's settings; every default is RLlib's (ray 2.60 `PPOConfig()`: lr 5e-5,
    lambda_ 1.0, clip_param 0.3, vf_clip_param 10.0, use_kl_loss True, kl_coeff 0.2,
    kl_target 0.01, entropy_coeff 0.0, vf_loss_coeff 1.0, grad_clip None, num_epochs 30,
    minibatch_size 128, train_batch_size 4000, two 256-unit tanh layers with a separate
    value encoder), so a script written for RLlib learns the same here.

    These are slow to learn on small tasks; `rlmod.tuned.FAST_PPO` holds the settings
    rlmod used to default to (SB3-like) and `rlmod train` applies them, and
    `rlmod.tuned.TUNED` holds per-env settings on top (see the README).

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> config = PPOConfig().environment("CartPole-v1").training(lambda_=0.9, clip_param=0.1)
        >>> config.clip_param
        0.1
    """

    lambda_ = Setting(
        1.0,
        section="training",
        check=s.number(low=0.0, high=1.0),
        doc="GAE lambda: bias (0) vs variance (1) of the advantage estimate.",
    )
    clip_param = Setting(
        0.3,
        section="training",
        check=s.number(low=0.0, low_open=True),
        doc="PPO's clip range epsilon of the probability ratio.",
    )
    vf_clip_param = Setting(
        10.0,
        section="training",
        check=s.optional(s.number(low=0.0, low_open=True)),
        doc=(
            "Clamp of the squared value error, in squared reward units (RLlib's value clipping, "
            "default 10). None clamps nothing; prefer it where returns are large: a clamp of "
            "10 zeroes the value gradient wherever |error| > 3.2, which stalls the critic on "
            "Pendulum (rlmod.tuned.FAST_PPO sets None)."
        ),
    )
    vf_loss_coeff = Setting(
        1.0,
        section="training",
        check=s.number(low=0.0),
        doc="Weight of the value loss in the total loss.",
    )
    entropy_coeff = Setting(
        0.0, section="training", check=s.number(low=0.0), doc="Weight of the entropy bonus."
    )
    kl_coeff = Setting(
        0.2,
        section="training",
        check=s.number(low=0.0),
        doc="Initial weight of the KL penalty (with use_kl_loss).",
    )
    kl_target = Setting(
        0.01,
        section="training",
        check=s.number(low=0.0, low_open=True),
        doc="KL per update the adaptive coefficient aims for.",
    )
    use_kl_loss = Setting(
        True,
        section="training",
        check=s.boolean,
        doc="Add the adaptive KL penalty to the clipped objective.",
    )
    normalize_advantages = Setting(
        True, section="training", check=s.boolean, doc="Standardize advantages per train batch."
    )
    kl_early_stop = Setting(
        None,
        section="training",
        check=s.optional(s.number(low=0.0, low_open=True)),
        doc=(
            "Per module: once the mean KL(old || new) of a minibatch exceeds this, checked "
            "before its step, the module takes no more steps in this update (the other modules "
            "go on). None (default, as RLlib, which has no such setting): never stop. "
            "Stable-Baselines3's target_kl=t is kl_early_stop=1.5*t. It keeps converged modules "
            "from drifting on noise and starved modules (few rows) from overfitting them."
        ),
    )

    # RLlib's PPO; lr 5e-5, minibatch 128, batch 4000 are the base's
    setting_defaults: ClassVar[dict[str, Any]] = {"num_epochs": 30}

    def validate(self) -> None:
        super().validate()
        overrides = self.algorithm_config_overrides_per_module.values()
        stops = [self.kl_early_stop, *(o.get("kl_early_stop") for o in overrides)]
        if self.num_learners > 1 and any(v is not None for v in stops):
            raise ValueError(
                f"kl_early_stop with num_learners={self.num_learners}: data-parallel Learners "
                "would each stop on the KL of their own share of a minibatch and their weights "
                "would part. Use num_learners=0 or 1, or kl_early_stop=None."
            )

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule

        return RLModuleSpec(module_class=DefaultPPORLModule)

    def get_default_learner_class(self) -> type:
        from rlmod.algorithms.ppo.ppo_learner import PPOLearner

        return PPOLearner

    def build_learner_connector(
        self, observation_space: gym.Space | None = None, action_space: gym.Space | None = None
    ) -> ConnectorPipeline:
        pipeline = super().build_learner_connector(observation_space, action_space)
        pipeline.connectors.append(
            GeneralAdvantageEstimation(normalize_advantages=self.normalize_advantages, config=self)
        )
        # stateful modules (use_lstm): chunks of max_seq_len, after GAE read the flat rows
        pipeline.connectors.append(AddTimeDimToBatchAndZeroPad())
        return pipeline


class PPO(Algorithm):
    """Proximal Policy Optimization: sample, GAE + clipped-surrogate update, sync weights."""

    config: PPOConfig

    def training_step(self) -> dict[str, Any]:
        group = self.env_runner_group
        assert group is not None  # an online algorithm: setup() built it
        with self._timer("sample_time_s"):
            episodes = group.sample()
        # Env steps before this iteration (rows would count agent steps in multi-agent runs).
        timesteps = {"num_env_steps_sampled_lifetime": self.metrics.num_env_steps_lifetime}
        with self._timer("learn_time_s"):
            results = self.learner_group.update(episodes, timesteps=timesteps)
        with self._timer("sync_weights_time_s"):
            group.sync_weights(from_learner_group=self.learner_group)
        return results


PPOConfig.algo_class = PPO
