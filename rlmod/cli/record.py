"""`rlmod record --checkpoint CKPT --episodes N --output DIR`: a checkpoint's policy
recorded to Parquet, ready for BC/MARWIL.

Uses `rlmod.algorithms.inference.InferencePolicy` and `rlmod.offline.record_episodes`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlmod.cli import arguments as a
from rlmod.cli.errors import EXIT_OK, CLIError


def add_parser(commands: Any) -> None:
    record = commands.add_parser(
        "record",
        help="Run a checkpoint's policy and write its episodes to Parquet (offline data).",
        description="Load the policy of a single-agent checkpoint (as `evaluate` does), run it "
        "for --episodes episodes and write every step to Parquet files under --output, with "
        "the env's spaces in spaces.json, for BC/MARWIL: "
        "BCConfig().offline_data(input_=OUTPUT).",
    )
    record.set_defaults(command="record", run=run)
    record.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        metavar="CKPT",
        help="A checkpoint directory, or a run dir (its newest checkpoint).",
    )
    record.add_argument(
        "--episodes", type=a.count(1), required=True, metavar="N", help="Episodes to record."
    )
    record.add_argument(
        "--output",
        type=Path,
        required=True,
        metavar="DIR",
        help="Directory of the Parquet files (created; may already hold episodes of the same env).",
    )
    record.add_argument(
        "--seed",
        type=a.count(0, a.MAX_SEED),
        default=0,
        help="Episode i resets the env with seed + i (default: 0).",
    )
    record.add_argument(
        "--explore",
        action="store_true",
        help="Sample actions instead of taking the most likely one.",
    )
    record.add_argument(
        "--max-rows-per-file",
        type=a.count(1),
        default=100_000,
        metavar="N",
        help="Rows per Parquet file before a new one starts (default: 100000).",
    )
    a.add_gym_packages_argument(record)
    a.add_trust_argument(record)


def run(args: argparse.Namespace) -> int:
    from rlmod.algorithms.inference import InferencePolicy
    from rlmod.cli.checkpoint_paths import checkpoint_path
    from rlmod.cli.envs import import_gym_packages
    from rlmod.env.registry import make_env
    from rlmod.errors import CheckpointError, EnvError, OfflineDataError
    from rlmod.offline import record_episodes

    import_gym_packages(args.gym_packages)
    path = checkpoint_path(args.checkpoint)
    try:
        policy = InferencePolicy.from_checkpoint(
            path, explore=args.explore, trusted_modules=tuple(args.trust)
        )
        if policy.config.env is None:
            raise ValueError(
                f"{path}: the env was a lambda when saved and is not stored; "
                "record with rlmod.offline.record_episodes in your own script."
            )
        env = make_env(policy.config.env, dict(policy.config.env_config))
        try:
            rows = record_episodes(
                env,
                policy.compute_single_action,
                num_episodes=args.episodes,
                output_dir=args.output,
                seed=args.seed,
                max_rows_per_file=args.max_rows_per_file,
                on_episode_start=policy.reset,
            )
        finally:
            env.close()
    except (CheckpointError, OfflineDataError, EnvError, ValueError, TypeError, ImportError) as e:
        raise CLIError(str(e)) from None
    print(f"Recorded {args.episodes} episodes ({rows:,} steps) of {path} in {args.output}.")
    print(f"  train on them: BCConfig().offline_data(input_={str(args.output)!r})")
    return EXIT_OK
