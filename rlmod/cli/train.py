"""`rlmod train`: train an algorithm on an env until a stop criterion, logging to a run dir.

Uses `rlmod.cli.settings` for the config, `rlmod.cli.evaluation` for evaluation-driven stops
and the best checkpoint, `rlmod.utils.loggers` and `rlmod.utils.run_control` for the logs,
the run dir and the summary; `rlmod.cli.seeds` runs it once per seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rlmod.cli import arguments as a
from rlmod.cli import resume
from rlmod.cli.errors import (
    EXIT_INTERRUPTED,
    EXIT_NOT_SOLVED,
    EXIT_OK,
    EXIT_TERMINATED,
    CLIError,
)
from rlmod.cli.settings import ALGORITHMS, TUNED_BY_ALGORITHM, build_config, config_class
from rlmod.cli.settings import load_settings as _load_settings


def add_parser(commands: Any) -> None:
    """The `train` subcommand's options."""
    tuned = ", ".join(
        f"{algo}: {', '.join(sorted(table))}" for algo, table in TUNED_BY_ALGORITHM.items()
    )
    train = commands.add_parser(
        "train",
        help="Train an algorithm on an env until a stop criterion.",
        description="Train an algorithm on an env and log each iteration to a run dir "
        "(progress.csv, result.jsonl, params.json, TensorBoard events). Settings: the "
        "algorithm's defaults, then rlmod's fast settings (PPO: rlmod.tuned.FAST_PPO), then "
        "the tuned settings of the env if there are any, then "
        "--config, then --env, the evaluation options and --seed.",
        epilog=f"Algorithms: {', '.join(ALGORITHMS)}. Tuned envs ({tuned}). Example: rlmod "
        "train --algo DQN --env CartPole-v1 --stop-reward 475 --stop-on eval",
    )
    train.set_defaults(command="train", run=run)
    train.add_argument("--algo", default="PPO", help="Algorithm name (default: PPO).")
    train.add_argument(
        "--env",
        help="A gymnasium ID (CartPole-v1; ALE/Pong-v5 and MinAtar/Breakout-v1 with the "
        "atari and minatar extras; ALE IDs get the Atari wrapper, see --no-atari-wrapper), "
        "gymnasium's module:Env-v0 (imports module, which registers Env-v0), a name "
        "registered with rlmod.register_env, or an env class or creator by import path "
        'module:Class with --trust module (or set "env" in --config).',
    )
    a.add_gym_packages_argument(train)
    train.add_argument(
        "--config",
        metavar="JSON_OR_PATH",
        help="Settings as a JSON object "
        "or a path to a .json file, with flat setting names as "
        "AlgorithmConfig.to_dict() writes them, e.g. '{\"lr\": 3e-4}'.",
    )
    train.add_argument(
        "--no-tuned",
        action="store_true",
        help="Start from the algorithm's defaults (RLlib's for PPO), without rlmod's fast "
        "or per-env tuned settings.",
    )
    train.add_argument(
        "--no-atari-wrapper",
        action="store_true",
        help="Train on an ALE ID's raw frames (210x160 RGB). By default --env ALE/... goes "
        "through rlmod.env.wrappers.atari_wrappers.make_atari_env: no-op starts, 4 frames "
        "skipped and max-pooled, 84x84 grayscale, 4 frames stacked, uint8 (set its keys "
        'in --config\'s env_config, e.g. {"env_config": {"dim": 64}}).',
    )
    seeds = train.add_mutually_exclusive_group()
    seeds.add_argument(
        "--seed",
        type=a.count(0, a.MAX_SEED),
        help="Seed of torch, numpy and the "
        "envs (default: the config's, else a random one, recorded in params.json).",
    )
    seeds.add_argument(
        "--seeds",
        type=a.count(0, a.MAX_SEED),
        nargs="+",
        metavar="SEED",
        help="Train once per seed, one after another, each in RUN_DIR/seed_<SEED>; then "
        "print the comparison table of the runs (rlmod compare RUN_DIR); --seed-workers N runs N at a time.",
    )
    train.add_argument(
        "--seed-workers",
        type=a.count(1),
        default=1,
        metavar="N",
        help="With --seeds: train N seeds at a time, each in its own process (output in "
        "RUN_DIR/seed_<SEED>/train.log). Default: 1, one after another.",
    )
    train.add_argument(
        "--stop-reward",
        type=a.finite(),
        metavar="R",
        help="Stop once the return --stop-on reads is >= R.",
    )
    train.add_argument(
        "--stop-on",
        choices=["train", "eval"],
        default="train",
        help="Which return --stop-reward reads: 'train', episode_return_mean of the last "
        "--stop-window training episodes (exploring), or 'eval', the mean of the latest "
        "evaluation (evaluates every iteration unless --eval-every or the config says "
        "otherwise). Default: train.",
    )
    train.add_argument(
        "--stop-window",
        type=a.count(1),
        metavar="N",
        help="Training episodes episode_return_mean averages (metrics_num_episodes_for_"
        "smoothing; default 100, benchmarks often use 10).",
    )
    train.add_argument(
        "--eval-every",
        type=a.count(1),
        metavar="N",
        help="Evaluate every N training iterations (evaluation_interval; greedy unless the "
        "config sets evaluation_explore). The best evaluation's checkpoint is kept in "
        "RUN_DIR/best.",
    )
    train.add_argument(
        "--eval-episodes",
        type=a.count(1),
        metavar="K",
        help="Episodes per evaluation (evaluation_duration; default 10).",
    )
    train.add_argument(
        "--stop-timesteps",
        type=a.count(1),
        metavar="N",
        help="Stop once N env steps were sampled (in all, those of a --resume included).",
    )
    train.add_argument(
        "--stop-iters",
        type=a.count(1),
        metavar="N",
        help="Stop after N training iterations (in all, those of a --resume included).",
    )
    train.add_argument(
        "--stop-seconds",
        type=a.finite(positive=True),
        metavar="S",
        help="Stop once S seconds of wall time have passed.",
    )
    train.add_argument(
        "--as-test",
        action="store_true",
        help="Exit with code 1 if --stop-reward was not reached (for CI).",
    )
    train.add_argument(
        "--run-dir",
        type=a.dir_path,
        metavar="DIR",
        help="Where the logs go (default: runs/<algo>-<env>-<date>-<time>).",
    )
    train.add_argument(
        "--no-tensorboard", action="store_true", help="Do not write TensorBoard event files."
    )
    train.add_argument(
        "--logger",
        nargs="+",
        choices=["csv", "tensorboard", "wandb", "mlflow"],
        metavar="NAME",
        help="Where results go: csv (progress.csv and result.jsonl, always written), "
        "tensorboard, wandb, mlflow (default: csv tensorboard). W&B and MLflow get the config, "
        "every scalar by env steps and the final and best checkpoints as artifacts; they "
        "follow their own settings (WANDB_MODE=offline, MLFLOW_TRACKING_URI). Needs "
        "pip install 'rlmod[wandb]' or 'rlmod[mlflow]'.",
    )
    train.add_argument(
        "--video-every",
        type=a.count(1),
        metavar="N",
        help="Every N iterations (and after the last), record one greedy episode of the "
        "current policy into RUN_DIR/videos/iteration_<N>/ (gymnasium's RecordVideo; needs "
        "pip install 'rlmod[video]', and pygame for classic-control envs).",
    )
    train.add_argument(
        "--checkpoint-every",
        type=a.count(0),
        metavar="N",
        default=0,
        help="Save a checkpoint into RUN_DIR/checkpoints every N iterations (a final one is "
        "always saved at the end).",
    )
    train.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="Continue from the newest checkpoint of a run dir, in place (its progress.csv "
        "and result.jsonl go on from the restored iteration), or into --run-dir NEW_DIR; or "
        "from a checkpoint directory, into a new run dir. Settings come from the checkpoint "
        "(--config, --env and --seed are refused); --stop-iters and --stop-timesteps count "
        "totals, the restored ones included.",
    )
    train.add_argument(
        "--progress-every",
        type=a.count(1),
        metavar="N",
        default=1,
        help="Without a terminal (a log file, CI), print the progress line every N "
        "iterations (default: every iteration). It shows an ETA when --stop-timesteps, "
        "--stop-iters or --stop-seconds bounds the run.",
    )
    a.add_trust_argument(train)
    train.add_argument(
        "--keep-last-n",
        type=a.count(1),
        metavar="N",
        help="Keep only the newest N checkpoints in RUN_DIR/checkpoints.",
    )


def run(args: argparse.Namespace) -> int:
    """`rlmod train ...`: one run, or one per --seeds."""
    if args.seed_workers > 1 and not args.seeds:
        raise CLIError("--seed-workers runs several --seeds at once; pass --seeds too.")
    if args.seeds:
        from rlmod.cli.seeds import train_seeds

        return train_seeds(args, train_one)
    return train_one(args)


def _stop_reason(args: argparse.Namespace, result: dict[str, Any], wall_s: float) -> str:
    """Why to stop after this result, or '' to go on."""
    from rlmod.cli.evaluation import reward_reached

    if reward_reached(result, args.stop_reward, on=args.stop_on):
        what = "evaluation" if args.stop_on == "eval" else "training"
        return f"the {what} episode_return_mean reached --stop-reward {args.stop_reward:g}"
    if args.stop_timesteps is not None and (
        result["num_env_steps_sampled_lifetime"] >= args.stop_timesteps
    ):
        return f"--stop-timesteps {args.stop_timesteps} env steps sampled"
    if args.stop_iters is not None and result["training_iteration"] >= args.stop_iters:
        return f"--stop-iters {args.stop_iters} iterations done"
    if args.stop_seconds is not None and wall_s >= args.stop_seconds:
        return f"--stop-seconds {args.stop_seconds:g} s passed"
    return ""


def _overrides(args: argparse.Namespace, stored: dict[str, Any]) -> dict[str, Any]:
    """Settings the evaluation and window options set, over `stored` (the settings so far):
    --stop-on eval evaluates every iteration unless told otherwise, and evaluation the CLI
    asks for is greedy unless the config chose."""
    out: dict[str, Any] = {}
    if args.eval_every is not None:
        out["evaluation_interval"] = args.eval_every
    elif args.stop_on == "eval" and not stored.get("evaluation_interval"):
        out["evaluation_interval"] = 1
    if args.eval_episodes is not None:
        out["evaluation_duration"] = args.eval_episodes
        out["evaluation_duration_unit"] = "episodes"
    explore_chosen = stored.get("evaluation_explore") is not None or "explore" in (
        stored.get("evaluation_config") or {}
    )
    if out.get("evaluation_interval") and not explore_chosen:
        out["evaluation_explore"] = False
    if args.stop_window is not None:
        out["metrics_num_episodes_for_smoothing"] = args.stop_window
    return out


def _build(args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
    """The config from the command line, the tuned settings applied, the algorithm name."""
    settings = _load_settings(args.config)
    algo_name, config_cls = config_class(args.algo)
    probe, _ = build_config(
        algo=args.algo,
        env=args.env,
        settings=settings,
        seed=args.seed if args.seed is not None else 0,
        tuned=not args.no_tuned,
        trusted_modules=args.trust,
        atari_wrapper=not args.no_atari_wrapper,
    )
    stored = {n: getattr(probe, n) for n in ("evaluation_interval", "evaluation_explore")}
    stored["evaluation_config"] = probe.evaluation_config
    config, tuned = build_config(
        algo=args.algo,
        env=args.env,
        settings=settings,
        seed=args.seed,
        tuned=not args.no_tuned,
        trusted_modules=args.trust,
        overrides=_overrides(args, stored),
        atari_wrapper=not args.no_atari_wrapper,
    )
    return config, tuned, algo_name


def train_one(args: argparse.Namespace) -> int:
    """One training run from `args`; returns the exit code."""
    import contextlib

    from rlmod.cli.envs import import_gym_packages
    from rlmod.cli.evaluation import BestCheckpoint, reward_reached
    from rlmod.utils import checkpoints, run_control
    from rlmod.utils.loggers import ProgressBar, RunLogger

    if args.as_test and args.stop_reward is None:
        raise CLIError("--as-test needs --stop-reward (the return the run must reach).")
    in_place = resume.resumes_in_place(args)
    if args.run_dir is not None and not in_place:  # before anything is built or restored
        try:
            run_control.check_run_dir(args.run_dir)
        except ValueError as e:
            raise CLIError(str(e)) from None
    import_gym_packages(args.gym_packages)
    start = time.perf_counter()
    tuned: dict[str, Any]
    start_iteration = start_env_steps = 0
    if args.resume is not None:
        algo = resume.restore(args, lambda stored: _overrides(args, stored))
        algo_name, config, tuned = resume.class_name(args.resume), algo.config, {}
        start_iteration = algo.iteration
        start_env_steps = int(algo.get_metadata()["num_env_steps_sampled_lifetime"])
        try:
            resume.check_stop_counts(args, iteration=start_iteration, env_steps=start_env_steps)
        except CLIError:
            algo.stop()
            raise
        if in_place:
            args.run_dir = args.resume
            resume.drop_rows_after(args.resume, start_iteration)
    else:
        config, tuned, algo_name = _build(args)
    env_name = (
        config.env
        if isinstance(config.env, str)
        else getattr(config.env, "__name__", repr(config.env))
    )
    if env_name == "make_atari_env":  # --env ALE/...: name the game, not the creator
        env_name = str(config.env_config.get("id", env_name))
    run_dir = args.run_dir or run_control.make_default_run_dir(algo_name, env_name)
    if args.resume is None:
        try:
            algo = config.build_algo()
        except (ValueError, TypeError, KeyError) as e:  # unknown env, spaces, module IDs
            if args.run_dir is None:  # the empty default dir made for this run
                with contextlib.suppress(OSError):
                    run_dir.rmdir()
            raise CLIError(str(e)) from None
    if not any(
        v is not None
        for v in (args.stop_reward, args.stop_timesteps, args.stop_iters, args.stop_seconds)
    ):
        print("No stop criterion given: training until Ctrl-C (or SIGTERM).", file=sys.stderr)
    evaluating = bool(algo.config.evaluation_interval)
    print(
        f"{'Resuming' if args.resume else 'Training'} {algo_name} on {env_name} with seed "
        f"{config.seed}{', tuned settings ' + json.dumps(tuned) if tuned else ''}; logs "
        f"{'appended to' if in_place else 'in'} {run_dir}",
        file=sys.stderr,
    )
    if evaluating:
        print(
            f"Evaluating every {algo.config.evaluation_interval} iteration(s) over "
            f"{algo.config.evaluation_duration} {algo.config.evaluation_duration_unit}; the "
            f"best evaluation's checkpoint goes to {run_dir / 'best'}",
            file=sys.stderr,
        )
    if args.video_every:
        from rlmod.cli.videos import check_can_record, record_video

        try:
            check_can_record(algo.config)
        except CLIError:
            algo.stop()
            raise
    env_module = config.env.split(":")[0] if isinstance(config.env, str) else ""
    video_trust = [*args.trust, *([env_module] if ":" in str(config.env) else [])]
    result: dict[str, Any] = {}
    reason = ""
    checkpoint_dir = run_dir / "checkpoints"
    last_checkpoint = ""
    best = BestCheckpoint(run_dir)
    bar = ProgressBar(
        total_env_steps=args.stop_timesteps,
        total_iterations=args.stop_iters,
        total_seconds=args.stop_seconds,
        start_env_steps=start_env_steps,
        start_iteration=start_iteration,
        start_time=start,
        every=args.progress_every,
    )
    loggers = set(args.logger or ["csv", "tensorboard"])
    tensorboard = "tensorboard" in loggers and not args.no_tensorboard
    trackers = [name for name in ("wandb", "mlflow") if name in loggers]
    with run_control.SigtermAsInterrupt() as sigterm:  # SIGTERM stops as Ctrl-C does
        try:
            run = RunLogger(
                run_dir,
                config=algo.config,
                tensorboard=tensorboard,
                trackers=trackers,
                append=in_place,
            )
        except ImportError as e:
            algo.stop()
            raise CLIError(str(e)) from None
        try:
            try:
                while not reason:
                    result = algo.train()
                    run.log(result)
                    bar.update(result)
                    best.update(algo, result)
                    reason = _stop_reason(args, result, time.perf_counter() - start)
                    if args.video_every and (reason or algo.iteration % args.video_every == 0):
                        record_video(algo, run_dir, seed=config.seed, trusted_modules=video_trust)
                    if args.checkpoint_every and algo.iteration % args.checkpoint_every == 0:
                        last_checkpoint = algo.save_checkpoint_to_dir(
                            checkpoint_dir, keep_last_n=args.keep_last_n
                        )
            except run_control.Terminated:
                reason = "terminated (SIGTERM)"
            except KeyboardInterrupt:
                reason = "interrupted (Ctrl-C)"
            finally:
                sigterm.finishing()
                bar.close()
                try:  # the final checkpoint, also after Ctrl-C or SIGTERM: no training is lost
                    if algo.iteration and not last_checkpoint.endswith(
                        checkpoints.checkpoint_name(algo.iteration)
                    ):
                        last_checkpoint = algo.save_checkpoint_to_dir(
                            checkpoint_dir, keep_last_n=args.keep_last_n
                        )
                finally:
                    algo.stop()
            if trackers and last_checkpoint:
                run.log_checkpoint(last_checkpoint, alias="latest")
            if trackers and best.best is not None:
                run.log_checkpoint(best.path, alias="best")
        finally:
            run.close()
    wall_s = time.perf_counter() - start
    window = min(config.metrics_num_episodes_for_smoothing, result.get("num_episodes_lifetime", 0))
    reached = reward_reached(result, args.stop_reward, on=args.stop_on)
    print(
        run_control.format_summary(
            f"{algo_name} on {env_name}",
            result,
            reason=reason,
            wall_s=wall_s,
            run_dir=run_dir,
            window=window,
            checkpoint=last_checkpoint,
            stop_reward=args.stop_reward,
            tensorboard=tensorboard,
            reached=reached,
            extra_lines=best.summary_lines(),
        )
    )
    if reason.startswith("interrupted"):
        return EXIT_INTERRUPTED
    if reason.startswith("terminated"):
        return EXIT_TERMINATED
    return EXIT_NOT_SOLVED if args.as_test and not reached else EXIT_OK
