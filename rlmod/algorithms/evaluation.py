"""Evaluating a checkpoint: run its InferencePolicy on fresh envs and collect the returns.

Used by `rlmod evaluate`; the policy acts exactly as in production (InferencePolicy: the
inference-only module and the connectors it was trained with), not through a Learner.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import gymnasium as gym

from rlmod.algorithms.inference import InferencePolicy
from rlmod.env.registry import is_gym_id, make_env


def evaluate_checkpoint(
    path: str | os.PathLike,
    *,
    num_episodes: int = 10,
    seed: int = 0,
    explore: bool = False,
    render: str | None = None,
    video_dir: str | os.PathLike | None = None,
    trusted_modules: Iterable[str] = (),
) -> list[float]:
    """The returns of `num_episodes` episodes of the checkpoint's policy.

    Args:
        path: A single-agent Algorithm checkpoint.
        num_episodes: Episodes to run, one after another on one env.
        seed: Seeds the env's first reset (episode i starts from `seed + i`).
        explore: Sample actions instead of taking the distribution's mode.
        render: "rgb_array" renders frames (gymnasium IDs only).
        video_dir: With `render`, records one video per episode there (needs moviepy).
        trusted_modules: Packages the stored config may name besides rlmod.
    """
    trusted = tuple(trusted_modules)
    policy = InferencePolicy.from_checkpoint(path, explore=explore, trusted_modules=trusted)
    config = policy.config
    if config.env is None:
        raise ValueError(
            f"{path}: the env was a lambda when saved and is not stored; register it with "
            "rlmod.register_env and evaluate with InferencePolicy in your own loop."
        )
    env_config = dict(config.env_config)
    if render is not None:
        if not is_gym_id(config.env):
            raise ValueError(f"--render works with gymnasium IDs; env={config.env!r} is not one.")
        env_config["render_mode"] = render
    env = make_env(config.env, env_config)
    if video_dir is not None:
        try:
            env = gym.wrappers.RecordVideo(env, str(video_dir), episode_trigger=lambda _: True)
        except gym.error.DependencyNotInstalled as e:
            env.close()
            raise ImportError(f"--video-dir records with gymnasium's RecordVideo: {e}") from e
    returns = []
    try:
        for i in range(num_episodes):
            obs, _ = env.reset(seed=seed + i)
            policy.reset()
            total, done, reward = 0.0, False, None
            while not done:  # the reward goes back in for modules with lstm_use_prev_reward
                action = policy.compute_single_action(obs, prev_reward=reward)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    except gym.error.DependencyNotInstalled as e:  # rendering: pygame, mujoco, ...
        raise ImportError(f"rendering {config.env!r} needs a package: {e}") from e
    finally:
        env.close()
    return returns
