"""Space helpers: JSON form of gymnasium spaces and batched flattening of observations.

Used by specs (JSON round trip), env-to-module connectors (flatten, one-hot) and checkpoints.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def space_to_dict(space: gym.Space | None) -> dict[str, Any] | None:
    """Returns a JSON-able description of `space` (None stays None)."""
    if space is None:
        return None
    from rlmod.utils.packed_obs import PackedObservationBox

    if isinstance(space, PackedObservationBox):
        return {"type": "Packed", "original": space_to_dict(space.original)}
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": list(np.atleast_1d(space.n).tolist())}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_dict(s) for k, s in space.spaces.items()}}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_dict(s) for s in space.spaces]}
    raise TypeError(
        f"Cannot store a space of type {type(space).__name__} as JSON; supported are Box, "
        "Discrete, MultiDiscrete, MultiBinary, Dict and Tuple."
    )


def space_from_dict(data: dict[str, Any] | None) -> gym.Space | None:
    """Inverse of `space_to_dict`."""
    if data is None:
        return None
    kind = data.get("type")
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        low = np.asarray(data["low"], dtype=dtype).reshape(data["shape"])
        high = np.asarray(data["high"], dtype=dtype).reshape(data["shape"])
        return gym.spaces.Box(low, high, dtype=dtype)
    if kind == "Packed":
        from rlmod.utils.packed_obs import PackedObservationBox

        return PackedObservationBox(_required_space(data["original"]))
    if kind == "Discrete":
        return gym.spaces.Discrete(data["n"], start=data.get("start", 0))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(data["nvec"], start=data.get("start"))
    if kind == "MultiBinary":
        n = data["n"]
        return gym.spaces.MultiBinary(n[0] if len(n) == 1 else n)
    if kind == "Dict":
        return gym.spaces.Dict({k: _required_space(v) for k, v in data["spaces"].items()})
    if kind == "Tuple":
        return gym.spaces.Tuple([_required_space(v) for v in data["spaces"]])
    raise ValueError(f"Unknown space type {kind!r} in stored space description {data!r}.")


def _required_space(data: dict[str, Any]) -> gym.Space:
    space = space_from_dict(data)
    if space is None:
        raise ValueError("A stored Dict/Tuple space has a part that is None.")
    return space


def flat_dim(space: gym.Space) -> int:
    """Size of one observation of `space` after flattening (Discrete parts one-hot)."""
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(space.nvec.sum())
    if isinstance(space, gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Dict):
        return sum(flat_dim(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(flat_dim(s) for s in space.spaces)
    raise TypeError(f"Cannot flatten observations of space type {type(space).__name__}.")


def flatten_batch(space: gym.Space, obs: Any) -> np.ndarray:
    """Flattens a batch of observations of `space` into float32 `[B, flat_dim(space)]`.

    `obs` is batched as a gymnasium vector env returns it: an array with a leading batch
    axis, or for Dict/Tuple spaces a dict/tuple of such arrays. Discrete parts are one-hot.
    """
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        arr = np.asarray(obs)
        return arr.reshape(arr.shape[0], -1).astype(np.float32, copy=False)
    if isinstance(space, gym.spaces.Discrete):
        idx = np.asarray(obs, dtype=np.int64).reshape(-1) - int(space.start)
        out = np.zeros((idx.shape[0], int(space.n)), dtype=np.float32)
        out[np.arange(idx.shape[0]), idx] = 1.0
        return out
    if isinstance(space, gym.spaces.MultiDiscrete):
        idx2d = np.asarray(obs, dtype=np.int64).reshape(-1, space.nvec.size) - space.start.reshape(
            -1
        )
        offsets = np.concatenate([[0], np.cumsum(space.nvec.reshape(-1))[:-1]])
        out = np.zeros((idx2d.shape[0], int(space.nvec.sum())), dtype=np.float32)
        rows = np.repeat(np.arange(idx2d.shape[0]), idx2d.shape[1])
        out[rows, (idx2d + offsets).reshape(-1)] = 1.0
        return out
    if isinstance(space, gym.spaces.Dict):
        return np.concatenate([flatten_batch(s, obs[k]) for k, s in space.spaces.items()], axis=-1)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate(
            [flatten_batch(s, o) for s, o in zip(space.spaces, obs, strict=True)], axis=-1
        )
    raise TypeError(f"Cannot flatten observations of space type {type(space).__name__}.")


def flat_box(space: gym.Space) -> gym.spaces.Box:
    """The float32 Box that `flatten_batch` maps observations of `space` into."""
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(
            space.low.reshape(-1).astype(np.float32),
            space.high.reshape(-1).astype(np.float32),
            dtype=np.float32,
        )
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        parts = list(space.spaces.values()) if isinstance(space, gym.spaces.Dict) else space.spaces
        boxes = [flat_box(s) for s in parts]
        return gym.spaces.Box(
            np.concatenate([b.low for b in boxes]),
            np.concatenate([b.high for b in boxes]),
            dtype=np.float32,
        )
    return gym.spaces.Box(0.0, 1.0, shape=(flat_dim(space),), dtype=np.float32)
