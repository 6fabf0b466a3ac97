"""Atari and MinAtar envs (rlmod/env/wrappers/atari_wrappers.py, rlmod/env/registry.py):
the wrapper keeps uint8 frames channels-last with the newest frame last, refuses a base
env that skips frames itself, `make_atari_env` splits its env_config between the wrapper
and gymnasium.make; `ALE/` and `MinAtar/` IDs register on first use (a clear error naming
the extra when the package is missing), and vector envs of ALE IDs observe what the
single env observes.

The CLI applying the wrapper is tested in tests/cli/test_cli_atari.py.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from rlmod.env import registry
from rlmod.env.registry import is_gym_id, make_env, make_vector_env, register_namespace

pytest.importorskip("ale_py", reason="needs the atari extra")


def _without_namespace(monkeypatch: pytest.MonkeyPatch, namespace: str) -> None:
    """gymnasium's registry as rlmod's registry module sees it, minus `namespace`'s IDs."""
    kept = {k: v for k, v in gym.registry.items() if not k.startswith(f"{namespace}/")}
    monkeypatch.setattr(registry.gym, "registry", kept)


@pytest.fixture
def wrap():  # noqa: ANN201  # the function under test; skips where OpenCV is missing
    pytest.importorskip("cv2", reason="gymnasium's AtariPreprocessing resizes with OpenCV")
    from rlmod.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    return wrap_atari_for_new_api_stack


def test_stacked_frames_stay_uint8_channels_last_newest_last(wrap) -> None:
    register_namespace("ALE/Pong-v5")
    env = wrap(gym.make("ALE/Pong-v5", frameskip=1), dim=84, framestack=4)
    assert env.observation_space == gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == (84, 84, 4)
    assert all(np.array_equal(obs[..., 0], obs[..., i]) for i in range(4))  # reset padding
    frames = [obs]
    for _ in range(60):  # Pong's ball and paddles move within a second of play
        obs, *_ = env.step(env.action_space.sample())
        frames.append(obs)
    for before, after in zip(frames, frames[1:], strict=False):
        np.testing.assert_array_equal(after[..., :3], before[..., 1:])  # shifted by one
    assert not np.array_equal(frames[-1][..., 3], frames[-2][..., 3])  # new frames arrive
    assert obs in env.observation_space


def test_rllib_defaults_and_colour_stacking(wrap) -> None:
    register_namespace("ALE/Breakout-v5")
    plain = wrap(gym.make("ALE/Breakout-v5", frameskip=1))  # RLlib: dim 64, no stacking
    assert plain.observation_space.shape == (64, 64, 1)
    assert plain.reset(seed=1)[0].shape == (64, 64, 1)
    colour = wrap(gym.make("ALE/Breakout-v5", frameskip=1), dim=42, framestack=2, grayscale=False)
    assert colour.observation_space == gym.spaces.Box(0, 255, (42, 42, 6), np.uint8)
    colour.reset(seed=1)
    obs, *_ = colour.step(0)
    assert obs.shape == (42, 42, 6) and obs.dtype == np.uint8


def test_a_base_env_that_skips_frames_is_refused_with_the_fix(wrap) -> None:
    register_namespace("ALE/Pong-v5")
    with pytest.raises(ValueError, match=r"gym.make\('ALE/Pong-v5', frameskip=1\)"):
        wrap(gym.make("ALE/Pong-v5"))  # v5 skips 4 frames per step by default
    with pytest.raises(ValueError, match="framestack=0"):
        wrap(gym.make("ALE/Pong-v5", frameskip=1), framestack=0)


def test_make_atari_env_splits_env_config(wrap) -> None:
    from rlmod.env.wrappers.atari_wrappers import make_atari_env

    config = {"id": "ALE/Pong-v5", "dim": 32, "framestack": 3, "repeat_action_probability": 0.0}
    env = make_atari_env(config)
    assert env.observation_space.shape == (32, 32, 3)
    assert env.unwrapped._frameskip == 1  # the wrapper skips, the base env does not
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0  # gymnasium.make's
    assert config["id"] == "ALE/Pong-v5" and len(config) == 4  # the caller's dict is kept
    with pytest.raises(ValueError, match=r"make_atari_env needs env_config=\{'id'"):
        make_atari_env({"dim": 84})


def test_minatar_ids_register_on_first_use_and_stay_boolean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("minatar", reason="needs the minatar extra")
    env = make_env("MinAtar/Breakout-v1")
    space = env.observation_space
    assert isinstance(space, gym.spaces.Box) and space.dtype == np.bool_
    assert space.shape == (10, 10, 4)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.bool_ and obs.shape == (10, 10, 4)
    assert env.action_space == gym.spaces.Discrete(3)  # v1: the game's minimal action set
    assert is_gym_id("MinAtar/SpaceInvaders-v1")


@pytest.mark.parametrize(
    ("env_id", "package", "extra"),
    [("MinAtar/Breakout-v1", "minatar", "minatar"), ("ALE/Pong-v5", "ale_py", "atari")],
)
def test_a_missing_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, env_id: str, package: str, extra: str
) -> None:
    _without_namespace(monkeypatch, env_id.split("/")[0])
    monkeypatch.setitem(sys.modules, package, None)  # `import package` raises ImportError
    with pytest.raises(ValueError, match=rf"needs the '{package}' package.*rlmod\[{extra}\]"):
        make_env(env_id)
    with pytest.raises(ValueError, match=rf"rlmod\[{extra}\]"):
        is_gym_id(env_id)


def test_an_unknown_namespace_still_gets_the_generic_hint() -> None:
    with pytest.raises(ValueError, match="No package registered the namespace 'Nowhere'"):
        make_env("Nowhere/Game-v0")


def test_vector_envs_of_ale_ids_observe_what_the_single_env_observes() -> None:
    single = make_env("ALE/Pong-v5")
    vector = make_vector_env("ALE/Pong-v5", {}, 2)  # not ale_py's preprocessing AtariVectorEnv
    assert isinstance(vector, gym.vector.SyncVectorEnv)
    assert vector.single_observation_space == single.observation_space
    assert make_vector_env("CartPole-v1", {}, 2).__class__.__name__ == "CartPoleVectorEnv"


def test_missing_opencv_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlmod.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    monkeypatch.setitem(sys.modules, "cv2", None)
    env = make_env("ALE/Pong-v5", {"frameskip": 1})
    with pytest.raises(ValueError, match=r"needs OpenCV .*pip install 'rlmod\[atari\]'"):
        wrap_atari_for_new_api_stack(env)
