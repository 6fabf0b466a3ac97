"""DQNConfig and DQN: Deep Q-learning with Rainbow's main parts, on replay buffers.

`DQNConfig().environment(...).build_algo()` returns a DQN; DQNLearner holds the loss,
DefaultDQNRLModule the Q-network and exploration, OffPolicyAlgorithm the replay loop.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rlmod.algorithms import settings as s
from rlmod.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from rlmod.algorithms.settings import Invalid, Setting
from rlmod.core.rl_module import RLModuleSpec
from rlmod.utils.schedules import scheduled_value


def _epsilon(v: Any) -> Any:
    """A probability in [0, 1], or a schedule [(env_step, epsilon), ...] of them."""
    if isinstance(v, list | tuple):
        points = s.schedule_or_number(low=0.0)(v)
        if any(p[1] > 1.0 for p in points):
            raise Invalid("epsilon values must be in [0, 1].")
        return points
    return s.number(low=0.0, high=1.0)(v)


class DQNConfig(OffPolicyConfig):
    """DQN's settings; names and defaults are RLlib's DQNConfig's.

    Example:
        >>> from rlmod.algorithms.dqn import DQNConfig
        >>> config = DQNConfig().environment("CartPole-v1").training(n_step=3, double_q=True)
        >>> config.epsilon
        [[0, 1.0], [10000, 0.05]]
    """

    double_q = Setting(
        True,
        section="training",
        check=s.boolean,
        doc=(
            "Pick the next action with the online network, value it with the target network "
            "(van Hasselt et al. 2016): less overestimation."
        ),
    )
    dueling = Setting(
        True,
        section="training",
        check=s.boolean,
        doc=("Dueling heads Q = V + A - mean(A) (Wang et al. 2016)."),
    )
    epsilon = Setting(
        [[0, 1.0], [10_000, 0.05]],
        section="training",
        check=_epsilon,
        doc=(
            "Probability of a random action while exploring: a number or a piecewise-linear "
            "schedule [(env_step, epsilon), ...]. Evaluation (explore=False) is greedy."
        ),
    )
    td_error_loss_fn = Setting(
        "huber",
        section="training",
        check=s.one_of("huber", "mse"),
        doc="Loss of the TD error: 'huber' (delta 1) or 'mse'.",
    )

    setting_defaults: ClassVar[dict[str, Any]] = {
        "lr": 5e-4,
        "grad_clip": 40.0,
        # RLlib's DQN: one train() samples at least 1000 env steps (training_step() repeats).
        "min_sample_timesteps_per_iteration": 1000,
        # RLlib's DefaultModelConfig widths with ReLU, the usual Q-network.
        "model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
    }

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rlmod.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule

        return RLModuleSpec(module_class=DefaultDQNRLModule)

    def module_flags(self) -> dict[str, Any]:
        """`dueling`, `double_q` (without it the module skips the online network's pass
        over new_obs) and `epsilon` (the schedule's start) for acting before the first
        update, which sets epsilon from the schedule from then on."""
        return {
            "dueling": self.dueling,
            "double_q": self.double_q,
            "epsilon": scheduled_value(self.epsilon, 0),
        }

    def get_default_learner_class(self) -> type:
        from rlmod.algorithms.dqn.dqn_learner import DQNLearner

        return DQNLearner


class DQN(OffPolicyAlgorithm):
    """Deep Q-Networks (Mnih et al. 2015) with double Q, dueling heads, n-step returns and
    prioritized replay (the parts of Rainbow, Hessel et al. 2018, besides C51 and noisy nets).
    """

    config: DQNConfig


DQNConfig.algo_class = DQN
