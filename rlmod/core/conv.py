"""Convolution settings of the default models: RLlib's `conv_filters` format, its default
filter stacks per image size, and the checks that turn a bad setting into a clear error.

Used by rlmod/core/models.py (to check `model_config`) and rlmod/core/encoders.py (to
build the CNN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from torch import nn

ConvLayer = tuple[int, tuple[int, int], tuple[int, int], str]
"""One checked conv layer: (out_channels, (kernel_h, kernel_w), (stride_h, stride_w), padding)."""

# RLlib's default stacks (ray/rllib/models/utils.py `get_filter_config`), except 84x84, which
# is the Nature CNN (Mnih et al. 2015) as the Atari baselines (SB3's CnnPolicy, CleanRL's
# ppo_atari.py) use it: RLlib's 84x84 stack ends in a 256-channel 11x11 "same" conv whose
# flattened output has 30,976 features.
_DEFAULT_FILTERS: dict[tuple[int, int], list[list[object]]] = {
    (96, 96): [[16, 8, 4], [32, 4, 2], [256, 11, 2]],
    (84, 84): [[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]],
    (64, 64): [[32, 4, 2], [64, 4, 2], [128, 4, 2], [256, 4, 2]],
    (42, 42): [[16, 4, 2], [32, 4, 2], [256, 11, 1]],
    (10, 10): [[16, 5, 2], [32, 5, 2]],
}


def default_conv_filters(shape: Sequence[int]) -> list[list[object]]:
    """The default `conv_filters` for channels-last images of `shape` (H, W, C).

    96x96, 84x84 (Nature CNN), 64x64, 42x42 and 10x10 get fixed stacks (RLlib's, Nature's
    for 84x84). Any other size gets `[16, 4, 2]` layers ("same" padding, channels doubling
    up to 128) until both sides are at most 8, or one `[16, 3, 1]` layer for an image
    that already is that small; e.g. 28x28 -> [[16, 4, 2], [32, 4, 2]] (7x7x32 features).
    A shape that looks channels-first (`(4, 84, 84)`: a few channels, then a square
    image) is a ValueError saying how to move the axis.
    """
    if len(shape) != 3:
        raise ValueError(f"default_conv_filters needs an (H, W, C) shape, got {tuple(shape)}.")
    h, w, c = (int(d) for d in shape)
    if w == c and h < w and h <= 16:
        raise ValueError(
            f"Image observations of shape {tuple(shape)} look channels-first (C, H, W), as "
            "gymnasium's FrameStackObservation stacks frames; the default CNN takes "
            "channels-last (H, W, C) images. Move the axis in the env (e.g. "
            "gymnasium.wrappers.TransformObservation with np.moveaxis(obs, 0, -1) and the "
            "transposed space), or set model_config['conv_filters'] to use the shape as "
            "(H, W, C)."
        )
    if (h, w) in _DEFAULT_FILTERS:
        return [list(f) for f in _DEFAULT_FILTERS[(h, w)]]
    if max(h, w) <= 8:
        return [[16, 3, 1]]
    filters: list[list[object]] = []
    channels = 16
    while max(h, w) > 8:
        filters.append([channels, 4, 2])
        h, w = math.ceil(h / 2), math.ceil(w / 2)
        channels = min(2 * channels, 128)
    return filters


def _positive_int(value: object) -> bool:
    return bool(isinstance(value, int | np.integer) and not isinstance(value, bool) and value > 0)


def _pair(value: object) -> tuple[int, int] | None:
    if _positive_int(value):
        return (int(value), int(value))  # type: ignore[call-overload]
    if isinstance(value, list | tuple) and len(value) == 2 and all(map(_positive_int, value)):
        return (int(value[0]), int(value[1]))
    return None


def check_conv_filters(value: object) -> tuple[ConvLayer, ...] | None:
    """`model_config["conv_filters"]` checked: None, or a list of `[out_channels, kernel,
    stride]` or `[out_channels, kernel, stride, padding]` (RLlib's format): kernel and
    stride an int or an `[h, w]` pair, padding "same" (the default, TensorFlow-style:
    output side = ceil(input / stride)) or "valid" (no padding). A ValueError names
    the bad layer and the format."""
    if value is None:
        return None
    fmt = (
        "Each layer is [out_channels, kernel, stride] or [out_channels, kernel, stride, "
        'padding] with positive ints (kernel and stride may be [h, w] pairs) and padding "same" '
        'or "valid", e.g. [[16, 4, 2], [32, 4, 2, "valid"]].'
    )
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(
            f"model_config['conv_filters']={value!r} must be a non-empty list of layers. {fmt}"
        )
    layers: list[ConvLayer] = []
    for i, layer in enumerate(value):
        ok = isinstance(layer, list | tuple) and len(layer) in (3, 4)
        out = layer[0] if ok else None
        kernel = _pair(layer[1]) if ok else None
        stride = _pair(layer[2]) if ok else None
        padding = (layer[3] if len(layer) == 4 else "same") if ok else None
        if (
            not _positive_int(out)
            or kernel is None
            or stride is None
            or padding not in ("same", "valid")
        ):
            raise ValueError(f"model_config['conv_filters'][{i}]={layer!r} is not a layer. {fmt}")
        layers.append((int(out), kernel, stride, str(padding)))  # type: ignore[arg-type]
    return tuple(layers)


def check_initializer(key: str, name: object) -> None:
    """`conv_kernel_initializer` / `conv_bias_initializer`: None (rlmod's orthogonal init)
    or the name of an in-place `torch.nn.init` function, e.g. "xavier_uniform_" (RLlib's
    rule: the trailing underscore is required). Callables are refused: a model config
    must be storable as JSON in specs and checkpoints."""
    if name is None:
        return
    if not isinstance(name, str):
        raise ValueError(
            f"model_config[{key!r}]={name!r}: give the name of a torch.nn.init function as a "
            "string, e.g. 'xavier_uniform_' (rlmod stores model configs as JSON, so callables "
            "are not accepted)."
        )
    if not name.endswith("_") or not callable(getattr(nn.init, name.lower(), None)):
        raise ValueError(
            f"model_config[{key!r}]={name!r} is not an in-place torch.nn.init function; use "
            "e.g. 'xavier_uniform_', 'kaiming_normal_' or 'orthogonal_' (trailing underscore)."
        )


def conv_output_hw(
    hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int], padding: str
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output (H, W) of one conv layer and its zero padding (left, right, top, bottom)."""
    out: list[int] = []
    pads: list[tuple[int, int]] = []
    for size, k, s in zip(hw, kernel, stride, strict=True):
        if padding == "same":
            o = math.ceil(size / s)
            total = max((o - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
        else:
            o = (size - k) // s + 1
            pads.append((0, 0))
        out.append(o)
    (top, bottom), (left, right) = pads
    return (out[0], out[1]), (left, right, top, bottom)
