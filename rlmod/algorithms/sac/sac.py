"""SACConfig and SAC: Soft Actor-Critic on replay buffers, for Box and Discrete actions.

`SACConfig().environment(...).build_algo()` returns a SAC; SACLearner holds the losses,
DefaultSACRLModule the actor and critics, OffPolicyAlgorithm the replay loop.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rlmod.algorithms import settings as s
from rlmod.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from rlmod.algorithms.settings import Invalid, Setting
from rlmod.core.rl_module import RLModuleSpec


def _target_entropy(v: Any) -> Any:
    if v == "auto":
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise Invalid("expected 'auto' or a number (nats).")
    return float(v)


def _sac_lr(v: Any) -> Any:
    if v is not None:
        raise Invalid(
            "SAC has one learning rate per part, as RLlib's SACConfig: set actor_lr, "
            "critic_lr and alpha_lr (RLlib's defaults 3e-5, 3e-4, 3e-4) and leave lr None."
        )
    return v


class SACConfig(OffPolicyConfig):
    """SAC's settings; names and defaults follow RLlib's SACConfig: `actor_lr`,
    `critic_lr`, `alpha_lr` (3e-5, 3e-4, 3e-4; each a number or a schedule) for the policy,
    the critics and the temperature, and `lr` None (setting it is refused, as in RLlib).

    Example:
        >>> from rlmod.algorithms.sac import SACConfig
        >>> config = SACConfig().environment("Pendulum-v1").training(initial_alpha=0.5)
        >>> config.twin_q, config.target_entropy, config.tau
        (True, 'auto', 0.005)
    """

    lr = Setting(
        None,
        section="training",
        check=_sac_lr,
        doc="Not used by SAC (None, as RLlib's): see actor_lr, critic_lr and alpha_lr.",
    )
    actor_lr = Setting(
        3e-5,
        section="training",
        check=s.schedule_or_number(),
        doc="Learning rate (or schedule) of the policy, RLlib's default 3e-5.",
    )
    critic_lr = Setting(
        3e-4,
        section="training",
        check=s.schedule_or_number(),
        doc="Learning rate (or schedule) of the Q-networks (both with twin_q), 3e-4.",
    )
    alpha_lr = Setting(
        3e-4,
        section="training",
        check=s.schedule_or_number(),
        doc="Learning rate (or schedule) of the entropy temperature (log alpha), 3e-4.",
    )
    twin_q = Setting(
        True,
        section="training",
        check=s.boolean,
        doc=(
            "Two critics and the minimum of their targets (clipped double Q, Fujimoto et al. "
            "2018), against overestimation."
        ),
    )
    initial_alpha = Setting(
        1.0,
        section="training",
        check=s.number(low=0.0, low_open=True),
        doc="Initial entropy temperature alpha.",
    )
    target_entropy = Setting(
        "auto",
        section="training",
        check=_target_entropy,
        doc=(
            "Entropy the temperature steers the policy to: 'auto' is -dim(A) for Box actions "
            "and 0.98 * log(n) for Discrete ones, or a number."
        ),
    )

    setting_defaults: ClassVar[dict[str, Any]] = {
        "train_batch_size": 256,
        "tau": 5e-3,
        "target_network_update_freq": 0,
        "num_steps_sampled_before_learning_starts": 1500,
        # RLlib's SAC: one train() samples at least 100 env steps and lasts at least 1 s.
        "min_sample_timesteps_per_iteration": 100,
        "min_time_s_per_iteration": 1,
        "replay_buffer_config": {
            "type": "PrioritizedEpisodeReplayBuffer",
            "capacity": 1_000_000,
            "alpha": 0.6,
            "beta": 0.4,
        },
        "model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
    }

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rlmod.algorithms.sac.default_sac_rl_module import DefaultSACRLModule

        return RLModuleSpec(module_class=DefaultSACRLModule)

    def module_flags(self) -> dict[str, Any]:
        return {"twin_q": self.twin_q, "initial_alpha": self.initial_alpha}

    def get_default_learner_class(self) -> type:
        from rlmod.algorithms.sac.sac_learner import SACLearner

        return SACLearner


class SAC(OffPolicyAlgorithm):
    """Soft Actor-Critic (Haarnoja et al. 2018): maximum-entropy actor-critic on replay."""

    config: SACConfig


SACConfig.algo_class = SAC
