"""Atari preprocessing under RLlib's name, built from gymnasium's own wrappers.

`wrap_atari_for_new_api_stack` is the function RLlib's Atari examples call
(`ray.rllib.env.wrappers.atari_wrappers`, same module path here under `rlmod.env`), and
`make_atari_env` is the env creator that `rlmod train --env ALE/Pong-v5` sets: an import
path a config or checkpoint can store. Observations stay `uint8` images, channels last
(height x width x stacked frames), so a stored step costs one byte per pixel; the module
scales them to floats. gymnasium's `AtariPreprocessing` resizes with OpenCV, which the
`atari` extra installs (`pip install 'rlmod[atari]'`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

_WRAPPER_KEYS = ("dim", "frameskip", "framestack", "grayscale", "noop_max", "terminal_on_life_loss")
"""The keys of `make_atari_env`'s env_config that go to the wrapper, not to gymnasium.make."""


def wrap_atari_for_new_api_stack(
    env: gym.Env[object, object],
    dim: int = 64,
    frameskip: int = 4,
    framestack: int | None = None,
    grayscale: bool = True,
    *,
    noop_max: int = 30,
    terminal_on_life_loss: bool = False,
) -> gym.Env[object, object]:
    """Wraps an ALE env for training from pixels: RLlib's function of the same name.

    gymnasium's `AtariPreprocessing` takes up to `noop_max` no-op actions after each
    reset, repeats each action `frameskip` times and keeps the pixel-wise max of the
    last two frames, converts to grayscale (unless `grayscale=False`) and resizes to
    `dim` x `dim`; `FrameStackObservation` then stacks the last `framestack` frames
    (the first frame repeated after a reset). The result is a `Box(0, 255, (dim, dim,
    C), uint8)` with C = `framestack` (x 3 in colour), or 1 (3) without stacking: frames
    on the last axis, as RLlib stacks them and as rlmod's CNN encoders read images.

    Where it differs from RLlib's:

    - observations stay `uint8` in [0, 255]; RLlib's version turns them into float32 in
      [-1, 1] inside the env (4 bytes a pixel in every buffer). rlmod's modules scale
      images themselves.
    - RLlib always ends an episode at each lost life without resetting the game
      (`EpisodicLifeEnv`) and presses FIRE after resets (`FireResetEnv`); gymnasium has
      neither. Here a lost life ends an episode only with `terminal_on_life_loss=True`,
      and then gymnasium's wrapper resets the whole game; the default, False, follows
      Machado et al. (2018, "Revisiting the ALE"): the agent learns to press FIRE itself.
    - the base env must not skip frames itself when `frameskip > 1`: make it with
      `gym.make("ALE/Pong-v5", frameskip=1)`, as RLlib's examples do through env_config
      (`make_atari_env` does it for you). ALE's v5 envs keep their sticky actions
      (`repeat_action_probability=0.25`) unless you pass 0.0.

    Example:
        >>> import gymnasium as gym, ale_py
        >>> gym.register_envs(ale_py)
        >>> env = wrap_atari_for_new_api_stack(
        ...     gym.make("ALE/Pong-v5", frameskip=1), dim=84, framestack=4
        ... )  # doctest: +SKIP
        >>> env.observation_space  # doctest: +SKIP
        Box(0, 255, (84, 84, 4), uint8)
    """
    try:
        import cv2  # noqa: F401  # AtariPreprocessing resizes with it
    except ImportError as e:
        raise ValueError(
            f"wrap_atari_for_new_api_stack resizes frames with gymnasium's "
            f"AtariPreprocessing, which needs OpenCV ({e}): pip install 'rlmod[atari]' "
            "(or opencv-python-headless)."
        ) from None
    if frameskip > 1 and getattr(env.unwrapped, "_frameskip", None) != 1:
        spec_id = getattr(env.spec, "id", "ALE/Pong-v5")
        raise ValueError(
            f"wrap_atari_for_new_api_stack(frameskip={frameskip}) skips frames itself, but "
            f"the env already skips {getattr(env.unwrapped, '_frameskip', '?')} per step: make "
            f"it with gym.make({spec_id!r}, frameskip=1) (or pass frameskip=1 here to keep "
            "the env's own skipping, without the max over the last two frames)."
        )
    if framestack is not None and framestack < 1:
        raise ValueError(f"framestack={framestack}: stack at least 1 frame, or pass None.")
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frameskip,
        screen_size=dim,
        terminal_on_life_loss=terminal_on_life_loss,
        grayscale_obs=grayscale,
        grayscale_newaxis=True,  # (dim, dim, 1): the channel axis the CNN reads
        scale_obs=False,  # uint8 end to end
    )
    if not framestack:
        return env
    stacked = gym.wrappers.FrameStackObservation(env, framestack)  # [k, dim, dim, C]
    height, width, channels = env.observation_space.shape  # type: ignore[misc]
    return gym.wrappers.TransformObservation(
        stacked,
        _frames_last,  # [dim, dim, k * C]
        gym.spaces.Box(0, 255, (height, width, framestack * channels), np.uint8),
    )


def _frames_last(frames: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """[k, H, W, C] stacked frames -> [H, W, k * C], oldest frame first."""
    return np.concatenate(list(frames), axis=-1)


def make_atari_env(env_config: Mapping[str, object]) -> gym.Env[object, object]:
    """An env creator: `gym.make(id, frameskip=1, **rest)` wrapped by
    `wrap_atari_for_new_api_stack` with the wrapper's keys of `env_config`.

    What `rlmod train --env ALE/Pong-v5` uses (with `dim=84, framestack=4`, DeepMind's
    Nature-DQN preprocessing); in Python, `config.environment(make_atari_env,
    env_config={"id": "ALE/Breakout-v5", "dim": 84, "framestack": 4})`, or in a JSON
    config `"env": {"__import__": "rlmod.env.wrappers.atari_wrappers:make_atari_env"}`.
    Keys other than `id` and the wrapper's (`dim`, `frameskip`, `framestack`,
    `grayscale`, `noop_max`, `terminal_on_life_loss`) go to `gymnasium.make`
    (`repeat_action_probability`, `full_action_space`, `render_mode`, ...); the base env
    is made with `frameskip=1`, since the wrapper skips frames.
    """
    from rlmod.env.registry import register_namespace

    # Any: the user's keyword arguments for the wrapper and gymnasium.make, which check them.
    kwargs: dict[str, Any] = dict(env_config)  # type: ignore[explicit-any]
    env_id = kwargs.pop("id", None)
    if not isinstance(env_id, str):
        raise ValueError(
            "make_atari_env needs env_config={'id': 'ALE/Pong-v5', ...} (an ALE gymnasium "
            f"ID); got keys {sorted(env_config)}."
        )
    wrapper = {k: kwargs.pop(k) for k in _WRAPPER_KEYS if k in kwargs}
    register_namespace(env_id)
    # The base env steps one frame at a time: the wrapper skips (its `frameskip`) and
    # max-pools instead.
    return wrap_atari_for_new_api_stack(gym.make(env_id, frameskip=1, **kwargs), **wrapper)
