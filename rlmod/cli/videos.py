"""Videos during `rlmod train --video-every N`: one greedy episode of the current policy,
recorded with gymnasium's RecordVideo into RUN_DIR/videos/iteration_<N>/.

Used by `rlmod.cli.train`. The policy acts as `rlmod evaluate` runs it (an InferencePolicy
of a checkpoint saved to a temporary directory); needs moviepy (`pip install
'rlmod[video]'`) and whatever the env renders with (pygame for classic control).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rlmod.cli.errors import CLIError

VIDEO_DIR = "videos"


def check_can_record(config: Any) -> None:
    """Fails before training if a video could not be made: no moviepy, an env that is not a
    gymnasium ID, or one that cannot render (a missing pygame)."""
    import gymnasium as gym

    from rlmod.env.registry import make_env

    try:
        import moviepy  # noqa: F401
    except ImportError:
        raise CLIError(
            "--video-every needs moviepy to write videos: pip install 'rlmod[video]'."
        ) from None
    if not isinstance(config.env, str):
        raise CLIError(f"--video-every renders gymnasium IDs; env={config.env!r} is not one.")
    try:
        env = make_env(config.env, {**config.env_config, "render_mode": "rgb_array"})
        try:
            env.reset(seed=0)
            env.render()
        finally:
            env.close()
    except (gym.error.Error, TypeError, ValueError) as e:
        raise CLIError(f"--video-every: {config.env} cannot render rgb_array frames: {e}") from None


def record_video(algo: Any, run_dir: Path, *, seed: int, trusted_modules: list[str]) -> Path:
    """One greedy episode of `algo`'s current policy as RUN_DIR/videos/iteration_<N>/*.mp4."""
    from rlmod.algorithms.evaluation import evaluate_checkpoint

    out = run_dir / VIDEO_DIR / f"iteration_{algo.iteration:06d}"
    with tempfile.TemporaryDirectory() as tmp:
        path = algo.save_to_path(Path(tmp) / "checkpoint")
        try:
            evaluate_checkpoint(
                path,
                num_episodes=1,
                seed=seed,
                render="rgb_array",
                video_dir=out,
                trusted_modules=trusted_modules,
            )
        except (ImportError, ValueError, TypeError) as e:
            raise CLIError(f"--video-every: {e}") from None
    return out
