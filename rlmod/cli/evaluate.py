"""`rlmod evaluate CHECKPOINT`: a checkpoint's policy, greedily, over a number of episodes.

Uses `rlmod.algorithms.evaluation.evaluate_checkpoint` (inference-only module, no Learner).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlmod.cli import arguments as a
from rlmod.cli.errors import EXIT_OK, CLIError


def add_parser(commands: Any) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="Run a checkpoint's policy greedily and print the mean return.",
        description="Load the policy of a single-agent checkpoint (inference-only module and "
        "its connectors, no Learner), run it for --episodes episodes and print the mean "
        "return.",
    )
    evaluate.set_defaults(command="evaluate", run=run)
    evaluate.add_argument(
        "checkpoint",
        type=Path,
        metavar="CHECKPOINT",
        help="A checkpoint directory (e.g. RUN_DIR/best), or a run dir (its newest checkpoint).",
    )
    evaluate.add_argument(
        "--episodes",
        type=a.count(1),
        default=10,
        metavar="N",
        help="Episodes to run (default: 10).",
    )
    evaluate.add_argument(
        "--seed", type=a.count(0, a.MAX_SEED), default=0, help="Seed of the env (default: 0)."
    )
    evaluate.add_argument(
        "--explore",
        action="store_true",
        help="Sample actions instead of taking the most likely one.",
    )
    evaluate.add_argument(
        "--render",
        choices=["rgb_array"],
        help="Render the episodes (with --video-dir: record videos).",
    )
    evaluate.add_argument(
        "--video-dir",
        type=Path,
        metavar="DIR",
        help="Where --render rgb_array writes videos (needs moviepy).",
    )
    a.add_gym_packages_argument(evaluate)
    a.add_trust_argument(evaluate)


def run(args: argparse.Namespace) -> int:
    """The greedy policy's mean return over --episodes."""
    from rlmod.algorithms.evaluation import evaluate_checkpoint
    from rlmod.cli.checkpoint_paths import checkpoint_path
    from rlmod.cli.envs import import_gym_packages
    from rlmod.errors import CheckpointError

    if args.video_dir is not None and args.render is None:
        raise CLIError("--video-dir needs --render rgb_array.")
    import_gym_packages(args.gym_packages)
    path = checkpoint_path(args.checkpoint)
    try:
        returns = evaluate_checkpoint(
            path,
            num_episodes=args.episodes,
            seed=args.seed,
            explore=args.explore,
            render=args.render,
            video_dir=args.video_dir,
            trusted_modules=args.trust,
        )
    except (CheckpointError, ValueError, TypeError, ImportError) as e:
        raise CLIError(str(e)) from None
    print(f"Evaluated {path} over {len(returns)} episodes.")
    print(f"  episode_return_mean  {sum(returns) / len(returns):.2f}")
    print(f"  episode_return_min   {min(returns):.2f}")
    print(f"  episode_return_max   {max(returns):.2f}")
    return EXIT_OK
