"""Packed observations: Dict/Tuple observations with images, stored as one flat byte row.

EnvRunners, episodes, batches, replay buffers and offline files hold each observation
column as one numpy array `[N, ...]`. A Dict/Tuple observation with images cannot be
flattened to float32 without quadrupling every pixel, so the default env-to-module
connector (`PackObservations`) writes it as a `uint8` row: each image part's bytes as they
are (`uint8`, or `bool` as 0/1; a float image as float32 bytes), then every other part
flattened to float32 (Discrete and MultiDiscrete one-hot) as float32 bytes. A stored step
then costs 1 byte per pixel. The space the module sees is a `PackedObservationBox`: a
`Box(0, 255, (num_bytes,), uint8)` that also holds the original space, so the default
encoders (rlmod/core/encoders.py) split a row back into its parts (`unpack`), and specs
and checkpoints store it (rlmod/utils/spaces.py, type "Packed").

The layout: parts in the order of `gymnasium.spaces.flatten`'s walk (Dict keys in the
space's order, Tuple items in order), images first at their byte offsets, the float32
vector of all other parts last.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlmod.utils.spaces import flat_dim, flatten_batch


def is_image(space: gym.Space) -> bool:
    """A rank-3 Box (H, W, C): what the default models treat as an image."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def has_image_part(space: gym.Space) -> bool:
    """Whether a Dict/Tuple `space` holds an image anywhere inside."""
    return any(is_image(leaf) for _, leaf in _leaves(space))


def _leaves(
    space: gym.Space, path: tuple[Any, ...] = ()
) -> list[tuple[tuple[Any, ...], gym.Space]]:
    if isinstance(space, gym.spaces.Dict):
        return [x for k, s in space.spaces.items() for x in _leaves(s, (*path, k))]
    if isinstance(space, gym.spaces.Tuple):
        return [x for i, s in enumerate(space.spaces) for x in _leaves(s, (*path, i))]
    return [(path, space)]


def _get(obs: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obs = obs[key]
    return obs


def _batch_of_one(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _batch_of_one(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_batch_of_one(v) for v in obs)
    return np.asarray(obs)[None]


@dataclasses.dataclass(frozen=True)
class ImagePart:
    """One image in a packed row: where it sits, its shape and how it is stored
    ("uint8", "bool" as 0/1 bytes, or "float32")."""

    path: tuple[Any, ...]
    shape: tuple[int, int, int]
    kind: str
    start: int
    stop: int


class PackedObservationBox(gym.spaces.Box):
    """`Box(0, 255, (num_bytes,), uint8)` rows holding packed observations of `original`
    (a Dict or Tuple space with at least one image part); see the module docstring.

    Attributes:
        original: The Dict/Tuple space the rows pack.
        images: The image parts, in row order.
        vector_dim: Number of float32 entries of the other parts (0 if none); they sit
            at bytes `vector_start: vector_start + 4 * vector_dim`.
    """

    def __init__(self, original: gym.Space) -> None:
        if not isinstance(original, gym.spaces.Dict | gym.spaces.Tuple):
            raise TypeError(f"PackedObservationBox packs Dict or Tuple spaces, got {original}.")
        self.original = original
        images: list[ImagePart] = []
        self._vector_leaves: list[tuple[tuple[Any, ...], gym.Space]] = []
        offset = 0
        for path, leaf in _leaves(original):
            if is_image(leaf):
                assert isinstance(leaf, gym.spaces.Box)
                kind = {np.dtype(np.uint8): "uint8", np.dtype(np.bool_): "bool"}.get(
                    np.dtype(leaf.dtype), "float32"
                )
                size = int(np.prod(leaf.shape)) * (1 if kind != "float32" else 4)
                shape = tuple(int(d) for d in leaf.shape)
                images.append(ImagePart(path, shape, kind, offset, offset + size))  # type: ignore[arg-type]
                offset += size
            else:
                self._vector_leaves.append((path, leaf))
        self.images: tuple[ImagePart, ...] = tuple(images)
        self.vector_start = offset
        self.vector_dim = sum(flat_dim(leaf) for _, leaf in self._vector_leaves)
        super().__init__(0, 255, (offset + 4 * self.vector_dim,), np.uint8)

    def pack(self, obs: Any) -> np.ndarray:
        """A batch of `original` observations (dict/tuple of arrays `[N, ...]`, as a
        vector env gives them) -> packed rows `[N, num_bytes]` uint8."""
        parts: list[np.ndarray] = []
        for part in self.images:
            arr = np.asarray(_get(obs, part.path))
            n = arr.shape[0]
            dtype = np.float32 if part.kind == "float32" else np.uint8
            parts.append(np.ascontiguousarray(arr, dtype=dtype).reshape(n, -1).view(np.uint8))
        if self._vector_leaves:
            vec = np.concatenate(
                [flatten_batch(leaf, _get(obs, path)) for path, leaf in self._vector_leaves],
                axis=-1,
            )
            parts.append(np.ascontiguousarray(vec, dtype=np.float32).view(np.uint8))
        return np.concatenate(parts, axis=-1)

    def unpack(self, rows: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """Packed rows `[B, num_bytes]` uint8 -> the images (`[B, H, W, C]`, uint8, bool
        or float32 as stored) and the float32 vector `[B, vector_dim]` (None if none)."""
        b = rows.shape[0]
        images = []
        for part in self.images:
            raw = rows[:, part.start : part.stop]
            if part.kind == "float32":
                raw = raw.contiguous().view(torch.float32)
            elif part.kind == "bool":
                raw = raw.bool()
            images.append(raw.reshape(b, *part.shape))
        vector = None
        if self.vector_dim:
            raw = rows[:, self.vector_start : self.vector_start + 4 * self.vector_dim]
            vector = raw.contiguous().view(torch.float32)
        return images, vector

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """One packed row of a sample of `original` (a Box's random bytes would decode
        to arbitrary floats)."""
        return self.pack(_batch_of_one(self.original.sample()))[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PackedObservationBox) and other.original == self.original

    def __hash__(self) -> int:
        return hash(("PackedObservationBox", self.shape))

    def __repr__(self) -> str:
        return f"PackedObservationBox({self.original!r}, bytes={self.shape[0]})"
