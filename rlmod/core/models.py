"""Default models: the model config users know from RLlib, and the MLP builder (the
encoders built from it per observation space are in rlmod/core/encoders.py).

Used by default RLModules (PPO's, BC's, the ICM) to turn `model_config` into layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar

import numpy as np
from torch import nn

from rlmod.utils.naming import did_you_mean

_T = TypeVar("_T")


_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "linear": nn.Identity,
}


def check_mlp_fields(config: object) -> None:
    """Checks the MLP fields of a frozen settings dataclass, by name: each `*_hiddens` must
    be a list of positive ints (stored back as a tuple), each `*_activation` a known
    activation; a ValueError names the `model_config` key. One check for every model
    config (DefaultModelConfig, the curiosity modules' CuriosityModelConfig)."""
    fields = [f.name for f in dataclasses.fields(config)]  # type: ignore[arg-type]
    for name in fields:
        value = getattr(config, name)
        if name.endswith("_activation") and value not in _ACTIVATIONS:
            raise ValueError(
                f"model_config[{name!r}]={value!r} is not a known activation; use one of "
                f"{sorted(_ACTIVATIONS)}."
            )
    for name in fields:
        value = getattr(config, name)
        if name.endswith("_hiddens"):
            if not all(isinstance(w, int | np.integer) and w > 0 for w in value):
                raise ValueError(
                    f"model_config[{name!r}]={list(value)!r} must be a list of positive ints."
                )
            object.__setattr__(config, name, tuple(int(w) for w in value))


def check_conv_fields(config: DefaultModelConfig) -> None:
    """Checks the conv fields (`conv_filters` stored back as a list of lists, as given
    and as RLlib keeps it); a ValueError names the `model_config` key."""
    from rlmod.core.conv import check_conv_filters, check_initializer

    layers = check_conv_filters(config.conv_filters)
    if layers is not None:
        filters = [list(layer) for layer in config.conv_filters]  # type: ignore[attr-defined]
        object.__setattr__(config, "conv_filters", filters)
    for key in ("conv_kernel_initializer", "conv_bias_initializer"):
        check_initializer(key, getattr(config, key))
        kwargs = getattr(config, f"{key}_kwargs")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ValueError(f"model_config[{key + '_kwargs'!r}]={kwargs!r} must be a dict.")


@dataclasses.dataclass(frozen=True)
class DefaultModelConfig:
    """Settings of the default models, MLPs and CNNs (RLlib's `DefaultModelConfig` names).

    Attributes:
        fcnet_hiddens: Widths of the hidden layers of the encoder; RLlib's default
            [256, 256]. Two layers of 64 solve the classic-control tasks faster on a CPU
            (rlmod.tuned.FAST_PPO).
        fcnet_activation: Activation between hidden layers: tanh, relu, elu, silu, linear.
        vf_share_layers: Whether the value head shares the policy's encoder. Separate
            encoders (False) keep the value loss from disturbing the policy's features.
            False, as RLlib's PPOConfig sets it (RLlib's class default, True, is read
            only by PPO there too).
        head_fcnet_hiddens: Extra hidden layers of the policy and value heads.
        head_fcnet_activation: Activation of the head layers (RLlib's default relu).
        free_log_std: For Box actions, whether the log standard deviation is a free
            parameter independent of the observation (True) or a network output.
        log_std_init: Initial log standard deviation for Box actions.
        conv_filters: The CNN of image observations (rank-3 Box, channels-last): a list
            of `[out_channels, kernel, stride]` or `[out_channels, kernel, stride,
            padding]` (RLlib's format; kernel and stride an int or `[h, w]`, padding
            "same", the default, or "valid"). None: the default stack for the image size
            (rlmod.core.conv.default_conv_filters; the Nature CNN for 84x84). An error
            for observations without an image.
        conv_activation: Activation after each conv layer (RLlib's default relu).
        conv_kernel_initializer: Name of an in-place `torch.nn.init` function for the
            conv kernels, e.g. "xavier_uniform_"; None: orthogonal with gain sqrt(2).
        conv_kernel_initializer_kwargs: Keyword arguments of that function.
        conv_bias_initializer: Likewise for the conv biases; None: zeros.
        conv_bias_initializer_kwargs: Keyword arguments of that function.
        use_lstm: Whether an LSTM follows the encoder (rlmod.core.recurrent): the module
            then carries a state between steps. RLlib's default False.
        lstm_cell_size: Hidden size of that LSTM; RLlib's default 256.
        max_seq_len: Longest sequence a Learner trains on (episodes are cut into chunks
            of at most this many steps, zero-padded); RLlib's default 20.
        lstm_use_prev_action: Whether the LSTM also sees the previous action (one-hot for
            Discrete); RLlib's default False.
        lstm_use_prev_reward: Whether the LSTM also sees the previous reward; RLlib's
            default False.
    """

    fcnet_hiddens: tuple[int, ...] = (256, 256)
    fcnet_activation: str = "tanh"
    vf_share_layers: bool = False
    head_fcnet_hiddens: tuple[int, ...] = ()
    head_fcnet_activation: str = "relu"
    free_log_std: bool = True
    log_std_init: float = 0.0
    conv_filters: object = None
    conv_activation: str = "relu"
    conv_kernel_initializer: str | None = None
    conv_kernel_initializer_kwargs: dict[str, object] | None = None
    conv_bias_initializer: str | None = None
    conv_bias_initializer_kwargs: dict[str, object] | None = None
    use_lstm: bool = False
    lstm_cell_size: int = 256
    max_seq_len: int = 20
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False

    def __post_init__(self) -> None:
        check_mlp_fields(self)
        check_conv_fields(self)
        for name in ("lstm_cell_size", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"model_config[{name!r}]={value!r} must be a positive int.")

    @classmethod
    def from_any(
        cls, config: DefaultModelConfig | Mapping[str, object] | None
    ) -> DefaultModelConfig:
        """Builds the config from a dict (unknown keys are an error) or passes one through."""
        if isinstance(config, cls):
            return config
        if isinstance(config, DefaultModelConfig):  # a base instance for a subclass
            config = dataclasses.asdict(config)
        return dataclass_from_mapping(cls, config, what="model_config")


def dataclass_from_mapping(
    cls: type[_T], config: Mapping[str, object] | None, *, what: str, ignored: Collection[str] = ()
) -> _T:
    """`cls(**config)` for a settings dataclass; an unknown key (not in `ignored`, which
    belong to another model sharing the dict) is a ValueError naming the closest field."""
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise TypeError(f"{what} must be a dict, got {type(config).__name__}.")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in config if k not in names and k not in ignored]
    if unknown:
        raise ValueError(
            f"{what} has unknown key {unknown[0]!r}.{did_you_mean(unknown[0], names)}"
            f" Valid keys: {sorted(names)}."
        )
    return cls(**{k: v for k, v in config.items() if k in names})


def activation(name: str) -> nn.Module:
    """A fresh activation layer by name."""
    return _ACTIVATIONS[name]()


class Linear(nn.Linear):
    """`nn.Linear` that initialises nothing on the meta device, where modules are built
    whose weights come later (rlmod/core/deferred_init.py): there torch's initialisers
    run as Python decompositions on values that do not exist, 0.3 s of building 1,000
    inference-only PPO modules (2-core AMD EPYC). On real devices it is `nn.Linear`,
    drawing the same numbers from the torch RNG."""

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()


def _orthogonal_init(layer: nn.Linear, gain: float) -> nn.Linear:
    if not layer.weight.is_meta:  # as Linear.reset_parameters
        nn.init.orthogonal_(layer.weight, gain=gain)
        nn.init.zeros_(layer.bias)
    return layer


def mlp(
    in_dim: int,
    hiddens: Sequence[int],
    *,
    activation_name: str,
    out_dim: int | None = None,
    out_gain: float = 1.0,
) -> nn.Sequential:
    """An MLP with orthogonal init (gain sqrt(2) hidden, `out_gain` output), as in PPO practice.

    Orthogonal init with a small output gain (0.01 for policy logits) is what CleanRL and
    Stable-Baselines3 use; it makes the initial policy near-uniform.
    """
    layers: list[nn.Module] = []
    last = in_dim
    for width in hiddens:
        layers += [
            _orthogonal_init(Linear(last, width), float(np.sqrt(2))),
            activation(activation_name),
        ]
        last = width
    if out_dim is not None:
        layers.append(_orthogonal_init(Linear(last, out_dim), out_gain))
    return nn.Sequential(*layers)
