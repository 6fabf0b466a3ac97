"""Env-to-module connectors: turn batched raw observations into what a module sees.

Run by EnvRunners on all sub-envs at once, before every forward pass:
`obs = pipeline(obs, episode_starts=mask)`, with `mask[i]` True where sub-env i's
observation is the first of an episode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmod.connectors.pipeline import Connector
from rlmod.utils.packed_obs import PackedObservationBox, has_image_part
from rlmod.utils.spaces import flat_box, flatten_batch


class EnvToModule(Connector):
    """Base of env-to-module connectors: `(obs [N, ...], *, episode_starts [N]) -> obs`."""

    row_wise: bool = False
    """True where output row i depends on input row i only (no memory across steps): the
    offline reader then transforms many rows in one call instead of stepping episodes."""

    def __call__(self, obs: Any, *, episode_starts: np.ndarray, **kwargs: Any) -> Any:
        raise NotImplementedError


def _refuse_rllib_options(
    name: str, *, agent_ids: Any = None, as_learner_connector: bool = False
) -> None:
    """RLlib connector options rlmod has no use for, refused with the reason."""
    if agent_ids is not None:
        raise ValueError(
            f"{name}(agent_ids=...): rlmod runs env-to-module pieces per module on that "
            "module's agents, so a piece cannot pick agents; map the agents to their own "
            "module instead."
        )
    if as_learner_connector:
        raise ValueError(
            f"{name}(as_learner_connector=True): rlmod's EnvRunners write the observations "
            "the module saw into the batch, so Learners already train on them; use it as an "
            "env-to-module piece only."
        )


class FlattenObservations(EnvToModule):
    """Flattens Dict/Tuple/Box (and one-hots Discrete) observations into one float32
    vector per row (RLlib's `FlattenObservations`, ray 2.60
    `ray/rllib/connectors/env_to_module/flatten_observations.py`; `multi_agent` is
    accepted and needs nothing: rlmod runs pieces per module)."""

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        multi_agent: bool = False,
        agent_ids: Any = None,
        as_learner_connector: bool = False,
        **kwargs: Any,
    ) -> None:
        _refuse_rllib_options(
            type(self).__name__, agent_ids=agent_ids, as_learner_connector=as_learner_connector
        )
        if input_observation_space is not None and input_action_space is not None:
            self.set_input_spaces(input_observation_space, input_action_space)

    row_wise = True

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        return flat_box(input_observation_space)

    def __call__(self, obs: Any, *, episode_starts: np.ndarray, **kwargs: Any) -> np.ndarray:
        assert self.input_observation_space is not None
        return flatten_batch(self.input_observation_space, obs)


class OneHotObservations(FlattenObservations):
    """One-hot encodes Discrete / MultiDiscrete observations (e.g. FrozenLake's cell index)."""


def default_env_to_module(observation_space: gym.Space) -> list[EnvToModule]:
    """The connectors every EnvRunner starts with for `observation_space`.

    Vectors become flat float32 (Discrete one-hot); images (rank-3 Box, channels-last)
    pass unchanged, so `uint8` pixels stay `uint8` in episodes, batches, replay buffers
    and offline files, and the module turns them into floats (rlmod/core/encoders.py).
    Dict/Tuple observations with an image are packed into uint8 rows (`PackObservations`),
    without one flattened to float32.
    """
    if isinstance(observation_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return [OneHotObservations()]
    if isinstance(observation_space, gym.spaces.Dict | gym.spaces.Tuple) and has_image_part(
        observation_space
    ):
        return [PackObservations()]  # images stay bytes; the module splits the parts back
    if isinstance(observation_space, gym.spaces.Dict | gym.spaces.Tuple | gym.spaces.MultiBinary):
        return [FlattenObservations()]  # MultiBinary: its 0/1 entries as float32, as-is
    if isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 3:
        if np.dtype(observation_space.dtype) in (np.uint8, np.bool_, np.float32):
            return []  # images reach the module as stored (uint8 stays uint8: 1 byte a pixel)
        return [_ToFloat32()]  # e.g. float64 or int32 images
    if isinstance(observation_space, gym.spaces.Box) and (
        observation_space.dtype != np.float32 or len(observation_space.shape) != 1
    ):
        return [FlattenObservations()] if len(observation_space.shape) <= 1 else [_ToFloat32()]
    return []


class PackObservations(EnvToModule):
    """Packs Dict/Tuple observations that hold images into one uint8 row each: the images'
    bytes as they are, the other parts flattened to float32 bytes (Discrete one-hot).

    The output space is a `PackedObservationBox` (rlmod/utils/packed_obs.py), which the
    default modules split back into parts: a CNN per image, an MLP over the rest. Every
    store of observations (episodes, batches, replay, Parquet) then holds one plain
    array, at 1 byte per pixel.
    """

    row_wise = True

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        return PackedObservationBox(input_observation_space)

    def __call__(self, obs: Any, *, episode_starts: np.ndarray, **kwargs: Any) -> np.ndarray:
        space = self.observation_space
        assert isinstance(space, PackedObservationBox)
        return space.pack(obs)


class _ToFloat32(EnvToModule):
    """Casts Box observations of rank 2 or 4+ (the default MLPs flatten them) and images of
    dtypes other than uint8, bool and float32 to float32, keeping their shape."""

    row_wise = True

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        assert isinstance(input_observation_space, gym.spaces.Box)
        return gym.spaces.Box(
            input_observation_space.low.astype(np.float32),
            input_observation_space.high.astype(np.float32),
            dtype=np.float32,
        )

    def __call__(self, obs: Any, *, episode_starts: np.ndarray, **kwargs: Any) -> np.ndarray:
        return np.asarray(obs, dtype=np.float32)


class _RunningStat:
    """Count, mean and sum of squared deviations (Chan et al.'s parallel Welford)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.n = 0.0
        self.mean = np.zeros(shape, np.float64)
        self.m2 = np.zeros(shape, np.float64)

    def push_batch(self, x: np.ndarray) -> None:
        self.merge(float(x.shape[0]), x.mean(0), ((x - x.mean(0)) ** 2).sum(0))

    def merge(self, n: float, mean: np.ndarray, m2: np.ndarray) -> None:
        if n == 0:
            return
        total = self.n + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.n * n / total)
        self.n = total

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean.copy(), "m2": self.m2.copy()}


class MeanStdFilter(EnvToModule):
    """Normalizes observations by a running mean and standard deviation, then clips.

    RLlib's `MeanStdFilter(*, multi_agent=False, de_mean_to_zero=True, de_std_to_one=True,
    clip_by_value=10.0, update_stats=True)` (ray 2.60,
    `ray/rllib/connectors/env_to_module/mean_std_filter.py`); `clip_by_value=None` does
    not clip. Each EnvRunner keeps the statistics synced last (`base`) and what it has
    seen since (`delta`); `EnvRunnerGroup.sync_env_runner_states` merges all deltas into
    one base (`merge_env_to_module_states`), so every EnvRunner normalizes alike. The
    state is part of checkpoints.
    """

    def __init__(
        self,
        *,
        multi_agent: bool = False,
        de_mean_to_zero: bool = True,
        de_std_to_one: bool = True,
        clip_by_value: float | None = 10.0,
        update_stats: bool = True,
        **kwargs: Any,
    ) -> None:
        _refuse_rllib_options("MeanStdFilter", **kwargs)
        self.de_mean_to_zero = de_mean_to_zero
        self.de_std_to_one = de_std_to_one
        self.clip_by_value = clip_by_value
        self.update_stats = update_stats
        self._base: _RunningStat | None = None
        self._delta: _RunningStat | None = None

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if not isinstance(input_observation_space, gym.spaces.Box):
            raise TypeError(
                f"MeanStdFilter needs Box observations, got {input_observation_space}; put "
                "it after FlattenObservations."
            )
        shape = input_observation_space.shape
        self._base, self._delta = _RunningStat(shape), _RunningStat(shape)
        bound = np.inf if self.clip_by_value is None else self.clip_by_value
        return gym.spaces.Box(-bound, bound, shape=shape, dtype=np.float32)

    def __call__(self, obs: Any, *, episode_starts: np.ndarray, **kwargs: Any) -> np.ndarray:
        assert self._base is not None and self._delta is not None
        x = np.asarray(obs, dtype=np.float64)
        if self.update_stats:
            self._delta.push_batch(x)
        stat = _RunningStat(x.shape[1:])
        stat.merge(self._base.n, self._base.mean, self._base.m2)
        stat.merge(self._delta.n, self._delta.mean, self._delta.m2)
        if self.de_mean_to_zero:
            x = x - stat.mean
        if self.de_std_to_one:
            x = x / (np.sqrt(stat.m2 / max(stat.n, 1.0)) + 1e-8)
        if self.clip_by_value is not None:
            x = np.clip(x, -self.clip_by_value, self.clip_by_value)
        return x.astype(np.float32)

    def get_state(self) -> dict[str, Any]:
        assert self._base is not None and self._delta is not None
        return {"base": self._base.to_dict(), "delta": self._delta.to_dict()}

    def set_state(self, state: dict[str, Any]) -> None:
        assert self._base is not None and self._delta is not None
        shape = self._base.mean.shape
        stats = {}
        for name in ("base", "delta"):
            if name in state:
                s = state[name]
                n, mean, m2 = s.get("n"), np.asarray(s.get("mean")), np.asarray(s.get("m2"))
                if (
                    isinstance(n, bool)
                    or not isinstance(n, int | float)
                    or not 0 <= n < np.inf
                    or mean.shape != shape
                    or m2.shape != shape
                    or not np.isfinite(mean).all()
                    or not (np.isfinite(m2) & (m2 >= 0)).all()
                ):
                    raise ValueError(
                        f"MeanStdFilter state {name!r} must hold a count >= 0 and finite mean "
                        f"and m2 (m2 >= 0) of shape {shape}, got n={n!r}, shapes "
                        f"{mean.shape} and {m2.shape}."
                    )
                stats[name] = _RunningStat(shape)
                stats[name].merge(float(n), mean, m2)
        for name, stat in stats.items():
            setattr(self, f"_{name}", stat)

    @staticmethod
    def merge_states(base: dict[str, Any], deltas: list[dict[str, Any]]) -> dict[str, Any]:
        """The new base after adding each EnvRunner's delta to the shared base."""
        stat = _RunningStat(np.asarray(base["mean"]).shape)
        for s in [base, *deltas]:
            stat.merge(float(s["n"]), np.asarray(s["mean"]), np.asarray(s["m2"]))
        return stat.to_dict()


class FrameStacking(EnvToModule):
    """Concatenates the last `num_frames` flat observations of each sub-env.

    At an episode start the stack is filled with the first observation, so no frame of
    the previous episode leaks into the new one.
    """

    def __init__(self, *, num_frames: int = 4) -> None:
        if num_frames < 1:
            raise ValueError(f"FrameStacking(num_frames={num_frames}) must be at least 1.")
        self.num_frames = num_frames
        self._stack: np.ndarray | None = None  # [N, num_frames, D]

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if not (
            isinstance(input_observation_space, gym.spaces.Box)
            and len(input_observation_space.shape) == 1
        ):
            raise TypeError(
                f"FrameStacking needs flat Box observations, got {input_observation_space}."
            )
        low = np.tile(input_observation_space.low, self.num_frames)
        high = np.tile(input_observation_space.high, self.num_frames)
        return gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    def __call__(self, obs: Any, *, episode_starts: np.ndarray, **kwargs: Any) -> np.ndarray:
        x, stack = self._push(obs, episode_starts)
        return stack.reshape(x.shape[0], -1).astype(np.float32)  # a copy, as its space says

    def _push(self, obs: Any, episode_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Adds this step's observations to the stack (a new episode's stack is filled with
        its first frame); returns them `[N, *S]` and the stack `[N, k, *S]`, as float32, or
        as they are for uint8/bool images (which the module scales itself)."""
        x = np.asarray(obs)
        x = x.astype(_stack_dtype(x.dtype), copy=False)
        if self._stack is None or self._stack.shape[0] != x.shape[0]:
            self._stack = np.repeat(x[:, None], self.num_frames, axis=1)
        else:
            self._stack = np.roll(self._stack, -1, axis=1)
            self._stack[:, -1] = x
            starts = np.asarray(episode_starts, dtype=bool)
            if starts.any():
                self._stack[starts] = x[starts, None]
        return x, self._stack


def _stack_dtype(dtype: Any) -> Any:
    """Frame stacks keep uint8/bool frames (1 byte per pixel); anything else is float32."""
    return dtype if np.dtype(dtype) in (np.dtype(np.uint8), np.dtype(np.bool_)) else np.float32


def merge_env_to_module_states(states: list[Any]) -> Any:
    """One env-to-module state from several EnvRunners' (EnvRunnerGroup's connector sync).

    Walks the nested state dicts alike (a pipeline's `{"0:MeanStdFilter": {...}}`, or
    multi-agent's `{module_id: pipeline_state}`); where it finds running statistics
    (MeanStdFilter's `{"base", "delta"}`), the merged state has as base the shared base
    plus every runner's delta, and an empty delta, so every EnvRunner normalizes alike
    from then on. Any other state is taken from the first EnvRunner.
    """
    first = states[0]
    if not isinstance(first, dict):
        return first
    if set(first) == {"base", "delta"}:
        base = MeanStdFilter.merge_states(first["base"], [s["delta"] for s in states])
        shape = np.asarray(base["mean"]).shape
        return {"base": base, "delta": _RunningStat(shape).to_dict()}
    return {k: merge_env_to_module_states([s[k] for s in states if k in s]) for k in first}


class FrameStackingEnvToModule(FrameStacking):
    """RLlib's frame-stacking piece: the last `num_frames` observations concatenated along
    their last axis, oldest first (ray 2.60, `ray/rllib/connectors/common/frame_stacking.py`,
    `num_frames=1` by default as there).

    RLlib requires a last axis of size 1 (grayscale images, [H, W, 1] -> [H, W, k]); rlmod
    also stacks any Box, e.g. CartPole's [4] -> [4 * k]. At an episode start the stack is
    filled with the first observation. uint8 (and bool) frames stay uint8, so the module
    scales them as any image; other frames become float32.
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        num_frames: int = 1,
        multi_agent: bool = False,
        as_learner_connector: bool = False,
        **kwargs: Any,
    ) -> None:
        _refuse_rllib_options("FrameStackingEnvToModule", as_learner_connector=as_learner_connector)
        super().__init__(num_frames=num_frames)
        if input_observation_space is not None and input_action_space is not None:
            self.set_input_spaces(input_observation_space, input_action_space)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if not isinstance(input_observation_space, gym.spaces.Box):
            raise TypeError(
                f"FrameStackingEnvToModule needs Box observations, got "
                f"{input_observation_space}; put it after FlattenObservations."
            )
        low = np.concatenate([input_observation_space.low] * self.num_frames, axis=-1)
        high = np.concatenate([input_observation_space.high] * self.num_frames, axis=-1)
        dtype = _stack_dtype(input_observation_space.dtype)
        return gym.spaces.Box(low.astype(dtype), high.astype(dtype), dtype=dtype)

    def __call__(self, obs: Any, *, episode_starts: np.ndarray, **kwargs: Any) -> np.ndarray:
        x, stack = self._push(obs, episode_starts)
        stacked = np.moveaxis(stack, 1, -2)  # [N, *S[:-1], k, S[-1]]
        return stacked.reshape(*x.shape[:-1], -1).copy()
