"""Curiosity, in one place: the ICM and RND modules, their settings, and the learner
connector that turns their output into an exploration bonus.

The modules are learner-only RLModules (their specs have `learner_only=True`): built on
Learners only, trained with their own loss (`compute_self_supervised_loss`, which returns
the loss and logs the terms `loss_terms` returns). `IntrinsicCuriosityModelConnector`, a
learner connector, calls their `compute_intrinsic_rewards` on each update and adds eta
times it to the policy's rewards before GAE. EnvRunners never see any of this.
(`rlmod.core.curiosity` and `rlmod.connectors.curiosity` name the same objects, so configs
and checkpoints that store those import paths still load.)

Settings live in each module's `model_config` (RLlib's names):

| key                      | default | meaning                                                 |
|--------------------------|---------|---------------------------------------------------------|
| feature_dim              | 64      | size of the ICM's feature vector phi(s)                 |
| feature_net_hiddens      | [64]    | hidden widths of the feature net phi                    |
| feature_net_activation   | relu    | activation of the feature net                           |
| inverse_net_hiddens      | [64]    | hidden widths of the inverse model g(phi(s), phi(s'))   |
| inverse_net_activation   | relu    | activation of the inverse model                         |
| forward_net_hiddens      | [64]    | hidden widths of the forward model f(phi(s), a)         |
| forward_net_activation   | relu    | activation of the forward model                         |
| forward_loss_weight      | 0.2     | beta: loss = beta * L_forward + (1 - beta) * L_inverse  |
| intrinsic_reward_coeff   | 0.05    | eta: what the connector adds, eta * r_int, to rewards   |

The defaults are sized for low-dimensional observations (one-hot grid cells, classic
control); RLlib's example uses feature_dim 288 and hidden layers of 256.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rlmod.connectors.learner import LearnerConnector
from rlmod.core.apis import find_intrinsic_rewards
from rlmod.core.columns import DEFAULT_MODULE_ID, Columns
from rlmod.core.learner import Learner, TensorBatch
from rlmod.core.models import DefaultModelConfig, check_mlp_fields, dataclass_from_mapping, mlp
from rlmod.core.multi_rl_module import ModuleID, MultiRLModule
from rlmod.core.rl_module import RLModule, TensorDict
from rlmod.errors import UnknownModuleIDError
from rlmod.utils.packed_obs import PackedObservationBox

if TYPE_CHECKING:
    from rlmod.algorithms.algorithm_config import AlgorithmConfig

ICM_MODULE_ID = "icm"
"""The module ID the ICM connector looks for by default."""


@dataclasses.dataclass(frozen=True)
class CuriosityModelConfig:
    """The `model_config` of the curiosity modules (see the module docstring's table).

    Attributes:
        feature_dim: Size of the feature vector phi(s) (ICM) or of the embedding (RND).
        feature_net_hiddens: Hidden widths of phi (ICM) or of the RND networks.
        feature_net_activation: Activation of phi / the RND networks.
        inverse_net_hiddens: Hidden widths of the ICM's inverse model.
        inverse_net_activation: Activation of the inverse model.
        forward_net_hiddens: Hidden widths of the ICM's forward model.
        forward_net_activation: Activation of the forward model.
        forward_loss_weight: beta of Pathak et al. (eq. 7); 0.2 as in the paper.
        intrinsic_reward_coeff: eta, the scale of the intrinsic reward the connector adds
            to the env's reward (a connector argument, when given, wins).
    """

    feature_dim: int = 64
    feature_net_hiddens: tuple[int, ...] = (64,)
    feature_net_activation: str = "relu"
    inverse_net_hiddens: tuple[int, ...] = (64,)
    inverse_net_activation: str = "relu"
    forward_net_hiddens: tuple[int, ...] = (64,)
    forward_net_activation: str = "relu"
    forward_loss_weight: float = 0.2
    intrinsic_reward_coeff: float = 0.05

    def __post_init__(self) -> None:
        check_mlp_fields(self)
        if not 0.0 <= self.forward_loss_weight <= 1.0:
            raise ValueError(
                f"model_config['forward_loss_weight']={self.forward_loss_weight} must be in "
                "[0, 1]: it weighs the forward loss against the inverse loss."
            )
        if self.feature_dim < 1:
            raise ValueError(f"model_config['feature_dim']={self.feature_dim} must be >= 1.")

    @classmethod
    def from_any(cls, config: Mapping[str, Any] | None) -> CuriosityModelConfig:
        """From a module's `model_config`. Keys of `DefaultModelConfig` are ignored (the
        global `model_config` reaches every module); any other unknown key is an error."""
        shared = {f.name for f in dataclasses.fields(DefaultModelConfig)}
        return dataclass_from_mapping(cls, config, what="Curiosity model_config", ignored=shared)


def _flat_dim(space: gym.Space, what: str) -> int:
    if not isinstance(space, gym.spaces.Box):
        raise TypeError(
            f"Curiosity modules need Box {what} (the default env-to-module connectors one-hot "
            f"and flatten other observation spaces), got {space}."
        )
    if isinstance(space, PackedObservationBox):
        raise TypeError(
            f"Curiosity modules take vector (or image) Box {what}; these are Dict/Tuple "
            f"observations with an image, packed into bytes ({space}). Flatten them in the "
            "env (gymnasium.wrappers.FlattenObservation) to use a curiosity module."
        )
    return int(np.prod(space.shape))


class IntrinsicCuriosityModel(RLModule):
    """ICM (Pathak et al. 2017, "Curiosity-driven Exploration by Self-supervised Prediction").

    A feature net phi, an inverse model g(phi(s_t), phi(s_t+1)) -> a_t and a forward model
    f(phi(s_t), a_t) -> phi(s_t+1) (a_t one-hot for Discrete actions, the action vector for
    Box ones). The intrinsic reward (eq. 6) is the forward model's error
    `r_int = 1/2 * ||f(phi(s_t), a_t) - phi(s_t+1)||^2`, the squared L2 norm summed over the
    feature dims (not averaged, as in the paper and its reference code). The loss (eq. 7) is
    `beta * L_forward + (1 - beta) * L_inverse` with L_forward the batch mean of r_int and
    L_inverse the cross-entropy of the taken action (Discrete) or the mean squared error of
    the predicted action (Box). Gradients of both losses reach phi, as in the reference code.

    It only yields a training signal, so its spec is learner-only and it has no policy.

    Example:
        >>> import gymnasium as gym, torch
        >>> from rlmod.core import RLModuleSpec
        >>> from rlmod.curiosity import IntrinsicCuriosityModel
        >>> icm = RLModuleSpec(module_class=IntrinsicCuriosityModel, learner_only=True,
        ...     observation_space=gym.spaces.Box(0, 1, (16,)),
        ...     action_space=gym.spaces.Discrete(4)).build()
        >>> batch = {"obs": torch.eye(16)[:3], "new_obs": torch.eye(16)[1:4],
        ...          "actions": torch.tensor([2, 2, 1])}
        >>> icm.compute_intrinsic_rewards(batch).shape
        torch.Size([3])
    """

    def setup(self) -> None:
        cfg = CuriosityModelConfig.from_any(self.model_config)
        self.config = cfg
        obs_dim = _flat_dim(self.observation_space, "observations")
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            self._discrete, act_dim = True, int(space.n)
        elif isinstance(space, gym.spaces.Box):
            self._discrete, act_dim = False, _flat_dim(space, "actions")
        else:
            raise TypeError(
                f"IntrinsicCuriosityModel supports Discrete and Box actions, got {space}."
            )
        self._act_dim = act_dim
        self.feature_net = mlp(
            obs_dim,
            cfg.feature_net_hiddens,
            activation_name=cfg.feature_net_activation,
            out_dim=cfg.feature_dim,
        )
        self.inverse_net = mlp(
            2 * cfg.feature_dim,
            cfg.inverse_net_hiddens,
            activation_name=cfg.inverse_net_activation,
            out_dim=act_dim,
        )
        self.forward_net = mlp(
            cfg.feature_dim + act_dim,
            cfg.forward_net_hiddens,
            activation_name=cfg.forward_net_activation,
            out_dim=cfg.feature_dim,
        )

    def _action_input(self, actions: torch.Tensor) -> torch.Tensor:
        if self._discrete:
            return F.one_hot(actions.long(), self._act_dim).float()  # [B, A]
        return actions.float().flatten(1)  # [B, A]

    def _forward(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        obs = batch[Columns.OBS].flatten(1).float()
        next_obs = batch[Columns.NEXT_OBS].flatten(1).float()
        phis = self.feature_net(torch.cat([obs, next_obs]))  # one pass for both, [2B, F]
        phi, next_phi = phis.chunk(2)
        predicted_next_phi = self.forward_net(
            torch.cat([phi, self._action_input(batch[Columns.ACTIONS])], dim=-1)
        )
        forward_error = 0.5 * (predicted_next_phi - next_phi).pow(2).sum(-1)  # [B]
        return {
            Columns.INTRINSIC_REWARDS: forward_error,
            "inverse_outputs": self.inverse_net(torch.cat([phi, next_phi], dim=-1)),  # [B, A]
        }

    def compute_intrinsic_rewards(self, batch: TensorDict) -> torch.Tensor:
        """r_int per row, `[B]` (eq. 6 without eta): 1/2 ||f(phi(s), a) - phi(s')||^2."""
        return self._forward(batch)[Columns.INTRINSIC_REWARDS]

    def loss_terms(self, batch: TensorDict, fwd_out: TensorDict) -> dict[str, torch.Tensor]:
        """`total_loss` = beta * L_forward + (1 - beta) * L_inverse (eq. 7; beta is
        forward_loss_weight), with `forward_loss` and `inverse_loss`."""
        beta = self.config.forward_loss_weight
        forward_loss = fwd_out[Columns.INTRINSIC_REWARDS].mean()
        predicted = fwd_out["inverse_outputs"]
        actions = batch[Columns.ACTIONS]
        if self._discrete:
            inverse_loss = F.cross_entropy(predicted, actions.long())
        else:
            inverse_loss = F.mse_loss(predicted, actions.float().flatten(1))
        return {
            "total_loss": beta * forward_loss + (1.0 - beta) * inverse_loss,
            "forward_loss": forward_loss,
            "inverse_loss": inverse_loss,
        }

    def compute_self_supervised_loss(
        self,
        *,
        learner: Learner,
        module_id: str,
        config: AlgorithmConfig,
        batch: TensorDict,
        fwd_out: TensorDict,
    ) -> torch.Tensor:
        """RLlib's hook: the `total_loss` of `loss_terms`; the Learner logs the terms."""
        return _log_and_total(learner, module_id, self.loss_terms(batch, fwd_out))


class RandomNetworkDistillation(RLModule):
    """RND (Burda et al. 2018, "Exploration by Random Network Distillation").

    A fixed, randomly initialized target net and a predictor net trained to match it on
    the next observations; the intrinsic reward is the predictor's error
    `||predictor(s_t+1) - target(s_t+1)||^2` (summed over the embedding dims), large on
    rarely seen states. The loss is its batch mean. Uses `feature_dim`,
    `feature_net_hiddens` and `feature_net_activation` of `model_config`; observation and
    reward normalization of the paper are left out (one-hot and classic-control
    observations are already on a unit scale).
    """

    def setup(self) -> None:
        cfg = CuriosityModelConfig.from_any(self.model_config)
        self.config = cfg
        obs_dim = _flat_dim(self.observation_space, "observations")
        act = cfg.feature_net_activation
        self.target_net = mlp(
            obs_dim, cfg.feature_net_hiddens, activation_name=act, out_dim=cfg.feature_dim
        )
        self.target_net.requires_grad_(False)  # fixed: never trained
        self.predictor_net = mlp(
            obs_dim, cfg.feature_net_hiddens, activation_name=act, out_dim=cfg.feature_dim
        )

    def _forward(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        next_obs = batch[Columns.NEXT_OBS].flatten(1).float()
        error = (self.predictor_net(next_obs) - self.target_net(next_obs)).pow(2).sum(-1)
        return {Columns.INTRINSIC_REWARDS: error}  # [B]

    def compute_intrinsic_rewards(self, batch: TensorDict) -> torch.Tensor:
        """r_int per row, `[B]`: ||predictor(s') - target(s')||^2."""
        return self._forward(batch)[Columns.INTRINSIC_REWARDS]

    def loss_terms(self, batch: TensorDict, fwd_out: TensorDict) -> dict[str, torch.Tensor]:
        """`total_loss`: the predictor's mean squared distillation error."""
        return {"total_loss": fwd_out[Columns.INTRINSIC_REWARDS].mean()}

    def compute_self_supervised_loss(
        self,
        *,
        learner: Learner,
        module_id: str,
        config: AlgorithmConfig,
        batch: TensorDict,
        fwd_out: TensorDict,
    ) -> torch.Tensor:
        """RLlib's hook: the `total_loss` of `loss_terms`; the Learner logs the terms."""
        return _log_and_total(learner, module_id, self.loss_terms(batch, fwd_out))


def _log_and_total(
    learner: Learner, module_id: str, terms: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    """What RLlib's `compute_self_supervised_loss` does with a module's loss terms: logs
    them under the module's ID (`Learner.log`) and returns the one to minimize."""
    learner.log(module_id, **terms)
    return terms["total_loss"]


CURIOSITY_COLUMNS = (Columns.OBS, Columns.NEXT_OBS, Columns.ACTIONS)
"""What a curiosity module trains on: transitions (s_t, a_t, s_t+1)."""


class IntrinsicCuriosityModelConnector(LearnerConnector):
    """rewards += eta * r_int, with r_int from the curiosity module `module_id`.

    On each update, the module (an `IntrinsicCuriosityModel`, or any module with
    `compute_intrinsic_rewards`, e.g. `RandomNetworkDistillation`) runs without gradients on
    the policy's train batch; its raw output is stored as `intrinsic_rewards` and eta times
    it is added to `rewards`, so GAE, which runs after the user's learner connectors, sees
    the sum. The transition columns are then put under `module_id` in the batch (the same
    tensors, not copies), so the Learner trains the curiosity module on its own minibatches
    in the same `update()` as the policy.

    The class itself is a valid `config.learner_connector` (it is called with the
    observation and action spaces, which it does not need), so JSON configs can name it as
    `{"__import__": "rlmod.curiosity:IntrinsicCuriosityModelConnector"}`.

    Args:
        observation_space: Ignored; here so that the class is a learner-connector factory.
        action_space: Ignored, likewise.
        intrinsic_reward_coeff: eta. None (default) reads the curiosity module's
            `model_config["intrinsic_reward_coeff"]` (0.05 unless set), which keeps the whole
            curiosity setup in its spec, and so in JSON.
        module_id: The curiosity module's ID.
        policy_module_id: The module whose rewards get the bonus.

    Example:
        >>> from rlmod.algorithms.ppo import PPOConfig
        >>> from rlmod.core import MultiRLModuleSpec, RLModuleSpec
        >>> from rlmod.curiosity import IntrinsicCuriosityModel
        >>> config = PPOConfig().environment("FrozenLake-v1").training(
        ...     learner_connector=IntrinsicCuriosityModelConnector).rl_module(
        ...     rl_module_spec=MultiRLModuleSpec(rl_module_specs={
        ...         "default_policy": RLModuleSpec(),
        ...         "icm": RLModuleSpec(module_class=IntrinsicCuriosityModel, learner_only=True)}),
        ...     algorithm_config_overrides_per_module={"icm": {"lr": 5e-4}})
    """

    def __init__(
        self,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
        *,
        intrinsic_reward_coeff: float | None = None,
        module_id: ModuleID = ICM_MODULE_ID,
        policy_module_id: ModuleID = DEFAULT_MODULE_ID,
    ) -> None:
        if intrinsic_reward_coeff is not None and intrinsic_reward_coeff < 0:
            raise ValueError(
                f"intrinsic_reward_coeff={intrinsic_reward_coeff} must be >= 0 (None reads "
                "the curiosity module's model_config)."
            )
        self.intrinsic_reward_coeff = intrinsic_reward_coeff
        self.module_id = module_id
        self.policy_module_id = policy_module_id

    def __call__(  # type: ignore[override]
        self, batch: TensorBatch, *, rl_module: MultiRLModule, **kwargs: Any
    ) -> TensorBatch:
        if self.module_id not in rl_module:
            raise UnknownModuleIDError(
                f"IntrinsicCuriosityModelConnector(module_id={self.module_id!r}) found no such "
                f"module on the Learner (modules: {list(rl_module.keys())[:10]}). Add it to "
                "config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={..., "
                f"{self.module_id!r}: RLModuleSpec(module_class=IntrinsicCuriosityModel, "
                "learner_only=True)}))."
            )
        cols = batch.get(self.policy_module_id)
        if cols is None:  # this Learner got no rows of the policy this time
            return batch
        curiosity = rl_module[self.module_id]
        compute_intrinsic_rewards = find_intrinsic_rewards(curiosity)
        if compute_intrinsic_rewards is None:
            raise TypeError(
                f"Module {self.module_id!r} ({type(curiosity).__name__}) has no "
                "compute_intrinsic_rewards(batch) -> [B] tensor; use IntrinsicCuriosityModel, "
                "RandomNetworkDistillation or a module that defines it."
            )
        eta = self.intrinsic_reward_coeff
        if eta is None:
            eta = float(
                getattr(
                    getattr(curiosity, "config", None),
                    "intrinsic_reward_coeff",
                    CuriosityModelConfig.intrinsic_reward_coeff,
                )
            )
        with torch.no_grad():
            r_int = compute_intrinsic_rewards(cols)  # [B]
        cols[Columns.INTRINSIC_REWARDS] = r_int
        cols[Columns.REWARDS] = cols[Columns.REWARDS] + eta * r_int  # new tensor: no aliasing
        batch[self.module_id] = {c: cols[c] for c in CURIOSITY_COLUMNS}
        return batch
