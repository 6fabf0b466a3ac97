"""Encoders of the default modules: the one place that turns an observation space and a
`model_config` into the layers that map observations to features.

Every default module (PPO's, hence BC's and MARWIL's, DQN's and SAC's) builds its
encoders with `build_encoder`:

- a rank-1 Box (or any Box that is not an image): an MLP over the flattened observation
  (`fcnet_hiddens`, `fcnet_activation`), as before;
- a rank-3 Box, channels-last (H, W, C) as gymnasium gives images: a CNN
  (`conv_filters`, or the default stack for the image size, `conv_activation`, the conv
  initializers) whose output is flattened, as RLlib's CNN encoder; `fcnet_hiddens` is
  not used there (RLlib's rule), the heads (`head_fcnet_hiddens`) follow it;
- a packed Dict/Tuple observation (rlmod/utils/packed_obs.py): one CNN per image part and
  one MLP over all other parts (flattened, Discrete one-hot), outputs concatenated, as
  Stable-Baselines3's MultiInputPolicy does.

Images arrive as stored, `uint8` (or `bool`), and become float32 inside the encoder:
`uint8` divided by 255 into [0, 1], `bool` as 0/1; a float image is used as it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmod.core.conv import check_conv_filters, conv_output_hw, default_conv_filters
from rlmod.core.models import DefaultModelConfig, activation, mlp
from rlmod.utils.packed_obs import PackedObservationBox, is_image

is_image_space = is_image
"""Whether the default models treat `space` as an image: a rank-3 Box (H, W, C)."""


class Conv2d(nn.Conv2d):
    """`nn.Conv2d` that initialises nothing on the meta device (as models.Linear), so
    modules with CNNs can be built for deferred init (rlmod/core/deferred_init.py)."""

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()


class MLPEncoder(nn.Sequential):
    """The MLP encoder of vector observations; flattens `[B, *shape]` to `[B, D]` first
    and casts non-float inputs to float32. Its layers are those of `models.mlp`, so its
    parameter names are those of the plain MLP (`0.weight`, ...)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.dim() > 2:
            obs = obs.flatten(1)
        if not obs.is_floating_point():
            obs = obs.float()
        return super().forward(obs)


def image_to_float(obs: torch.Tensor) -> torch.Tensor:
    """`uint8` images to float32 in [0, 1] (divided by 255), `bool` to 0/1, floats as
    they are (as float32)."""
    if obs.dtype == torch.uint8:
        return obs.float().div_(255.0)
    return obs if obs.dtype == torch.float32 else obs.float()


class CNNEncoder(nn.Module):
    """Conv layers over channels-last images `[B, H, W, C]`, flattened to `[B, out_dim]`.

    Each layer is zero padding ("same" layers), `Conv2d`, then `conv_activation`. Kernels
    are orthogonal with gain sqrt(2) and biases zero (as the MLPs here and CleanRL's
    Atari CNN), unless `conv_kernel_initializer` / `conv_bias_initializer` name a
    `torch.nn.init` function.

    The layers stay channels-last in memory throughout, gradients included: the images
    are handed to the convolutions as a permuted view (`[B, C, H, W]` shape, channels-last
    strides, so torch runs channels-last kernels) and the last output is flattened in
    (H, W, C) order, which is a free view of a channels-last tensor. Flattening in
    (C, H, W) order instead (as `nn.Flatten` after a channels-first CNN does) copies the
    output and sends its gradient back channels-first, which makes the backward pass
    convert layouts; on a 2-core Xeon that cost MinAtar's small CNN about a third more
    per minibatch (benchmarks/investigations/pixel_ppo_floor.py). The two orders are the
    same network up to a fixed permutation of the features the heads read.
    """

    def __init__(self, shape: tuple[int, ...], cfg: DefaultModelConfig) -> None:
        super().__init__()
        h, w, c = (int(d) for d in shape)
        filters = check_conv_filters(cfg.conv_filters or default_conv_filters(shape))
        assert filters is not None
        layers: list[nn.Module] = []
        hw = (h, w)
        for i, (out, kernel, stride, padding) in enumerate(filters):
            out_hw, pads = conv_output_hw(hw, kernel, stride, padding)
            if min(out_hw) < 1:
                raise ValueError(
                    f"model_config['conv_filters'][{i}] (kernel {kernel}, stride {stride}, "
                    f"{padding!r} padding) does not fit the {hw[0]}x{hw[1]} input it gets "
                    f"from the layers before (image {h}x{w}x{c}); use smaller kernels or "
                    "strides, or 'same' padding."
                )
            if any(pads):
                layers.append(nn.ZeroPad2d(pads))
            conv = Conv2d(c, out, kernel, stride)
            _init_conv(conv, cfg)
            layers += [conv, activation(cfg.conv_activation)]
            hw, c = out_hw, out
        # named `convs`: weights saved as `cnn` (the (C, H, W) order) must not load silently
        self.convs = nn.Sequential(*layers)
        self.out_dim = hw[0] * hw[1] * c

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = image_to_float(obs).permute(0, 3, 1, 2)  # [B, H, W, C] -> [B, C, H, W] view
        return self.convs(x).permute(0, 2, 3, 1).flatten(1)  # (H, W, C) order: a view


def old_cnn_weights_hint(unexpected: Iterable[str]) -> str:
    """What to do with weights of a CNN encoder saved before its features were flattened in
    (H, W, C) order (rlmod before commit 2effd4c named its layers `cnn`): the heads after
    it would read the same features in another order, so such weights do not load."""
    if not any(".cnn." in f".{name}" for name in unexpected):
        return ""
    return (
        " These are CNN weights saved by an rlmod older than 2026-12-07 (commit 2effd4c),"
        " whose heads read the CNN's features in (C, H, W) order; this rlmod's read them in"
        " (H, W, C) order, so loading them would act on permuted features. Retrain the module."
    )


def _init_conv(conv: nn.Conv2d, cfg: DefaultModelConfig) -> None:
    if conv.weight.is_meta:
        return
    if cfg.conv_kernel_initializer is None:
        nn.init.orthogonal_(conv.weight, gain=math.sqrt(2))
    else:
        init = getattr(nn.init, cfg.conv_kernel_initializer.lower())
        init(conv.weight, **(cfg.conv_kernel_initializer_kwargs or {}))
    assert conv.bias is not None
    if cfg.conv_bias_initializer is None:
        nn.init.zeros_(conv.bias)
    else:
        init = getattr(nn.init, cfg.conv_bias_initializer.lower())
        init(conv.bias, **(cfg.conv_bias_initializer_kwargs or {}))


class PackedEncoder(nn.Module):
    """One encoder per part of a packed Dict/Tuple observation, outputs concatenated: a
    CNN per image (`conv_filters` applies to each; None gives each its size's default)
    and one MLP (`fcnet_hiddens`) over all other parts, flattened (Discrete one-hot), as
    Stable-Baselines3's MultiInputPolicy; `out_dim` is the sum of their widths."""

    def __init__(self, space: PackedObservationBox, cfg: DefaultModelConfig) -> None:
        super().__init__()
        self.space = space
        self.cnns = nn.ModuleList(CNNEncoder(part.shape, cfg) for part in space.images)
        self.out_dim = sum(cnn.out_dim for cnn in self.cnns)  # type: ignore[misc]
        self.mlp: nn.Module | None = None
        if space.vector_dim:
            self.mlp = MLPEncoder(
                *mlp(space.vector_dim, cfg.fcnet_hiddens, activation_name=cfg.fcnet_activation)
            )
            self.out_dim += cfg.fcnet_hiddens[-1] if cfg.fcnet_hiddens else space.vector_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        images, vector = self.space.unpack(obs)
        features = [cnn(image) for cnn, image in zip(self.cnns, images, strict=True)]
        if self.mlp is not None:
            assert vector is not None
            features.append(self.mlp(vector))
        return torch.cat(features, dim=-1)


def build_encoder(
    space: gym.Space, cfg: DefaultModelConfig, *, owner: str = "The default models"
) -> tuple[nn.Module, int]:
    """The encoder for observations of `space` and the width of its output features.

    `space` is what the module sees (after the env-to-module connectors): a Box, or a
    packed Dict/Tuple (rlmod/utils/packed_obs.py). A ValueError names `conv_filters` when
    it is set for observations without an image; a TypeError, naming `owner` (the
    module class), other spaces.
    """
    if isinstance(space, PackedObservationBox):
        packed = PackedEncoder(space, cfg)
        return packed, packed.out_dim
    if not isinstance(space, gym.spaces.Box):
        raise TypeError(
            f"{owner} needs Box observations, got {space}; the default "
            "env-to-module connectors flatten, one-hot or pack other spaces."
        )
    if is_image_space(space):
        cnn = CNNEncoder(space.shape, cfg)
        return cnn, cnn.out_dim
    if cfg.conv_filters is not None:
        raise ValueError(
            f"model_config['conv_filters'] is set, but the observations {space} are not "
            "images (a rank-3 Box, height x width x channels); remove conv_filters, or give "
            "the env image observations."
        )
    in_dim = int(np.prod(space.shape))
    encoder = MLPEncoder(*mlp(in_dim, cfg.fcnet_hiddens, activation_name=cfg.fcnet_activation))
    return encoder, cfg.fcnet_hiddens[-1] if cfg.fcnet_hiddens else in_dim
