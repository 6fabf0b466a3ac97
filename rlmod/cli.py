"""The `rlmod` command: train an algorithm on an env from the shell, logging to a run dir.

Entry point `rlmod = "rlmod.cli:main"`; builds an AlgorithmConfig (defaults, then
`rlmod.tuned`, then `--config`), runs `algo.train()` until a stop criterion, and logs
through `rlmod.utils.loggers`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlmod.tuned import FAST_PPO, TUNED, TUNED_DQN, TUNED_SAC
from rlmod.utils.naming import did_you_mean, from_import_path

ALGORITHMS: dict[str, str] = {
    "PPO": "rlmod.algorithms.ppo:PPOConfig",
    "DQN": "rlmod.algorithms.dqn:DQNConfig",
    "SAC": "rlmod.algorithms.sac:SACConfig",
}
"""Algorithm name -> import path of its config class (imported only when used)."""

TUNED_BY_ALGORITHM: dict[str, dict[str, dict[str, Any]]] = {
    "PPO": TUNED,
    "DQN": TUNED_DQN,
    "SAC": TUNED_SAC,
}
"""Algorithm name -> {env ID -> tuned settings}; the settings of one algorithm do not
carry over to another."""

FAST_BY_ALGORITHM: dict[str, dict[str, Any]] = {"PPO": FAST_PPO}
"""Algorithm name -> settings applied under every env's tuned ones: PPOConfig's defaults
are RLlib's (slow on small tasks); `rlmod train` starts from rlmod's fast ones instead."""

MAX_SEED = 2**64 - 1
"""The largest seed torch takes (the same bound as config.debugging(seed=...))."""

EXIT_OK, EXIT_NOT_SOLVED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


class CLIError(Exception):
    """A mistake on the command line: printed as one `error:` line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `rlmod ARGS...`; returns the exit code (argparse exits itself on --help and on
    malformed arguments)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="rlmod: %(levelname)s: %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except CLIError as e:
        message = " ".join(str(e).split())  # one line, whatever the library wrote
        print(f"rlmod {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE


def _build_parser() -> argparse.ArgumentParser:
    from rlmod import __version__

    parser = argparse.ArgumentParser(
        prog="rlmod",
        description="rlmod: reinforcement learning where one config describes "
        "every module as a spec. EnvRunners sample, Learners train.",
    )
    parser.add_argument("--version", action="version", version=f"rlmod {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="Log at INFO level.")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
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
        "--config, then --env and --seed.",
        epilog=f"Algorithms: {', '.join(ALGORITHMS)}. Tuned envs ({tuned}). Example: rlmod "
        "train --algo PPO --env CartPole-v1 --stop-reward 475 --config '{\"lr\": 3e-4}'",
    )
    train.set_defaults(command="train", run=_train)
    train.add_argument("--algo", default="PPO", help="Algorithm name (default: PPO).")
    train.add_argument(
        "--env",
        help="A gymnasium ID or a name registered with "
        'rlmod.register_env (or set "env" in --config).',
    )
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
        "--seed",
        type=_count(0, MAX_SEED),
        help="Seed of torch, numpy and the "
        "envs (default: the config's, else a random one, recorded in params.json).",
    )
    train.add_argument(
        "--stop-reward",
        type=_finite(),
        metavar="R",
        help="Stop once episode_return_mean (over the last 100 episodes) is >= R.",
    )
    train.add_argument(
        "--stop-timesteps", type=_count(1), metavar="N", help="Stop once N env steps were sampled."
    )
    train.add_argument(
        "--stop-iters", type=_count(1), metavar="N", help="Stop after N training iterations."
    )
    train.add_argument(
        "--stop-seconds",
        type=_finite(positive=True),
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
        type=_dir_path,
        metavar="DIR",
        help="Where the logs go (default: runs/<algo>-<env>-<date>-<time>).",
    )
    train.add_argument(
        "--no-tensorboard", action="store_true", help="Do not write TensorBoard event files."
    )
    train.add_argument(
        "--checkpoint-every",
        type=_count(0),
        metavar="N",
        default=0,
        help="Save a checkpoint into RUN_DIR/checkpoints every N iterations (a final one is "
        "always saved at the end).",
    )
    train.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="Continue from a checkpoint directory, or from the newest checkpoint of a run "
        "dir; settings come from the checkpoint (--config, --env and --seed are refused).",
    )
    _add_trust_argument(train)
    train.add_argument(
        "--keep-last-n",
        type=_count(1),
        metavar="N",
        help="Keep only the newest N checkpoints in RUN_DIR/checkpoints.",
    )

    evaluate = commands.add_parser(
        "evaluate",
        help="Run a checkpoint's policy greedily and print the mean return.",
        description="Load the policy of a single-agent checkpoint (inference-only module and "
        "its connectors, no Learner), run it for --episodes episodes and print the mean "
        "return.",
    )
    evaluate.set_defaults(command="evaluate", run=_evaluate)
    evaluate.add_argument(
        "checkpoint",
        type=Path,
        metavar="CHECKPOINT",
        help="A checkpoint directory, or a run dir (its newest checkpoint).",
    )
    evaluate.add_argument(
        "--episodes", type=_count(1), default=10, metavar="N", help="Episodes to run (default: 10)."
    )
    evaluate.add_argument(
        "--seed", type=_count(0, MAX_SEED), default=0, help="Seed of the env (default: 0)."
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
    _add_trust_argument(evaluate)

    record = commands.add_parser(
        "record",
        help="Run a checkpoint's policy and write its episodes to Parquet (offline data).",
        description="Load the policy of a single-agent checkpoint (as `evaluate` does), run it "
        "for --episodes episodes and write every step to Parquet files under --output, with "
        "the env's spaces in spaces.json, for BC/MARWIL: "
        "BCConfig().offline_data(input_=OUTPUT).",
    )
    record.set_defaults(command="record", run=_record)
    record.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        metavar="CKPT",
        help="A checkpoint directory, or a run dir (its newest checkpoint).",
    )
    record.add_argument(
        "--episodes", type=_count(1), required=True, metavar="N", help="Episodes to record."
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
        type=_count(0, MAX_SEED),
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
        type=_count(1),
        default=100_000,
        metavar="N",
        help="Rows per Parquet file before a new one starts (default: 100000).",
    )
    _add_trust_argument(record)
    return parser


def _add_trust_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="PACKAGE",
        type=_package_name,
        help="A package whose classes and functions a config or checkpoint may name, besides "
        "rlmod (repeatable). Anything else is refused before it is imported.",
    )


def _count(low: int, high: int | None = None) -> Any:
    """argparse type: an int >= low (and <= high if given; argparse reports the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {value}")
        return value

    return parse


def _dir_path(text: str) -> Path:
    """argparse type: a non-empty path (an empty one, e.g. an unset shell variable, would
    mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (pass a directory, e.g. runs/my-run)")
    return Path(text)


def _package_name(text: str) -> str:
    """argparse type: a dotted package name such as mypkg or mypkg.envs."""
    if not text or not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"expected a package name such as mypkg or mypkg.envs, got {text!r}"
        )
    return text


def _finite(*, positive: bool = False) -> Any:
    """argparse type: a finite float (> 0 if `positive`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or (positive and value <= 0):
            raise argparse.ArgumentTypeError(
                f"must be a finite number{' > 0' if positive else ''}, got {text!r}"
            )
        return value

    return parse


# ---------------------------------------------------------------------- building the config
def _config_class(name: str) -> tuple[str, type]:
    """The registered algorithm name (case-insensitive match) and its config class."""
    by_lower = {n.lower(): n for n in ALGORITHMS}
    canonical = by_lower.get(name.lower())
    if canonical is None:
        raise CLIError(
            f"unknown algorithm {name!r}.{did_you_mean(name, ALGORITHMS)} "
            f"Valid: {', '.join(ALGORITHMS)}."
        )
    return canonical, from_import_path(ALGORITHMS[canonical], setting="--algo")


def _load_settings(text: str | None) -> dict[str, Any]:
    """--config as a dict: a JSON object given inline, or the path of a JSON file."""
    if text is None:
        return {}
    source = "--config"
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise CLIError(
                f"--config {text!r} is neither a JSON object (it does not start "
                "with '{') nor an existing file."
            )
        source, text = f"--config {str(path)!r}", path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CLIError(f"{source} is not valid JSON: {e}.") from None
    if not isinstance(data, dict):
        raise CLIError(f"{source} must be a JSON object of settings, got {type(data).__name__}.")
    return data


def _apply(
    config: Any, settings: Mapping[str, Any], *, source: str, trusted_modules: Sequence[str] = ()
) -> None:
    """Sets each of `settings` on `config`, decoded as `AlgorithmConfig.from_dict` does
    (import paths only inside rlmod and `trusted_modules`)."""
    for name, value in settings.items():
        try:
            if name.startswith("_"):  # AlgorithmConfig lets private names through
                raise AttributeError(f"{type(config).__name__} has no setting {name!r}.")
            if name in config.settings():  # decode {"__import__": ...} and friends
                value = getattr(
                    type(config).from_dict({name: value}, trusted_modules=trusted_modules), name
                )
            setattr(config, name, value)  # unknown names: the config's own error
        except (AttributeError, ValueError, TypeError) as e:
            raise CLIError(f"{source}: {e}") from None


def build_config(
    *,
    algo: str,
    env: str | None = None,
    settings: Mapping[str, Any] | None = None,
    seed: int | None = None,
    tuned: bool = True,
    trusted_modules: Sequence[str] = (),
) -> tuple[Any, dict[str, Any]]:
    """The config `rlmod train` runs, and the tuned settings it applied.

    Order: the algorithm's defaults, rlmod's fast settings for the algorithm
    (`rlmod.tuned.FAST_PPO`), the env's tuned settings, `settings`, then `env` and
    `seed` when given; with no seed anywhere a random one is chosen (and so recorded in
    params.json). Raises CLIError with a one-line message on any bad setting.
    """
    algo_name, config_cls = _config_class(algo)
    settings = dict(settings or {})
    env_id = env if env is not None else settings.get("env")
    if env_id is None:
        raise CLIError('no env: pass --env (e.g. --env CartPole-v1) or set "env" in --config.')
    config = config_cls()
    applied: dict[str, Any] = {}
    if tuned:
        applied = dict(FAST_BY_ALGORITHM.get(algo_name, {}))
        _apply(config, applied, source=f"rlmod.tuned.FAST_{algo_name}")
    if tuned and isinstance(env_id, str):
        for_env = dict(TUNED_BY_ALGORITHM.get(algo_name, {}).get(env_id, {}))
        _apply(config, for_env, source=f"rlmod.tuned.TUNED[{env_id!r}]")
        applied.update(for_env)
    _apply(config, settings, source="--config", trusted_modules=trusted_modules)
    if env is not None:
        _apply(config, {"env": env}, source="--env")
    if seed is not None:
        _apply(config, {"seed": seed}, source="--seed")
    if config.seed is None:  # always seeded, so params.json can repeat the run
        config.seed = secrets.randbelow(2**31)
        logging.getLogger(__name__).info("No seed given: chose seed %d.", config.seed)
    try:
        config.validate()
    except (ValueError, TypeError, KeyError) as e:
        raise CLIError(str(e)) from None
    return config, applied


# ---------------------------------------------------------------------- training
def _stop_reason(args: argparse.Namespace, result: Mapping[str, Any], wall_s: float) -> str:
    """Why to stop after this result, or '' to go on."""
    from rlmod.utils.run_control import reward_reached

    if reward_reached(result, args.stop_reward):
        return f"episode_return_mean reached --stop-reward {args.stop_reward:g}"
    if args.stop_timesteps is not None and (
        result["num_env_steps_sampled_lifetime"] >= args.stop_timesteps
    ):
        return f"--stop-timesteps {args.stop_timesteps} env steps sampled"
    if args.stop_iters is not None and result["training_iteration"] >= args.stop_iters:
        return f"--stop-iters {args.stop_iters} iterations done"
    if args.stop_seconds is not None and wall_s >= args.stop_seconds:
        return f"--stop-seconds {args.stop_seconds:g} s passed"
    return ""


def _train(args: argparse.Namespace) -> int:
    from rlmod.utils import checkpoints, run_control
    from rlmod.utils.loggers import ProgressBar, RunLogger

    if args.as_test and args.stop_reward is None:
        raise CLIError("--as-test needs --stop-reward (the return the run must reach).")
    if args.run_dir is not None:  # before anything is built or restored
        try:
            run_control.check_run_dir(args.run_dir)
        except ValueError as e:
            raise CLIError(str(e)) from None
    start = time.perf_counter()
    tuned: dict[str, Any]
    if args.resume is not None:
        algo, algo_name = _resume(args), _class_name(args.resume)
        config, tuned = algo.config, {}
    else:
        config, tuned = build_config(
            algo=args.algo,
            env=args.env,
            settings=_load_settings(args.config),
            seed=args.seed,
            tuned=not args.no_tuned,
            trusted_modules=args.trust,
        )
        algo_name = _config_class(args.algo)[0]
    env_name = (
        config.env
        if isinstance(config.env, str)
        else getattr(config.env, "__name__", repr(config.env))
    )
    run_dir = args.run_dir or run_control.make_default_run_dir(algo_name, config.env)
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
    print(
        f"{'Resuming' if args.resume else 'Training'} {algo_name} on {env_name} with seed "
        f"{config.seed}{', tuned settings ' + json.dumps(tuned) if tuned else ''}; logs in {run_dir}",
        file=sys.stderr,
    )
    result: dict[str, Any] = {}
    reason = ""
    checkpoint_dir = run_dir / "checkpoints"
    last_checkpoint = ""
    bar = ProgressBar(total_env_steps=args.stop_timesteps)
    with run_control.SigtermAsInterrupt() as sigterm:  # SIGTERM stops as Ctrl-C does
        try:
            with RunLogger(run_dir, config=algo.config, tensorboard=not args.no_tensorboard) as run:
                while not reason:
                    result = algo.train()
                    run.log(result)
                    bar.update(result)
                    reason = _stop_reason(args, result, time.perf_counter() - start)
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
    wall_s = time.perf_counter() - start
    window = min(config.metrics_num_episodes_for_smoothing, result.get("num_episodes_lifetime", 0))
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
            tensorboard=not args.no_tensorboard,
        )
    )
    reached = run_control.reward_reached(result, args.stop_reward)
    if reason.startswith("interrupted"):
        return EXIT_INTERRUPTED
    if reason.startswith("terminated"):
        return EXIT_TERMINATED
    return EXIT_NOT_SOLVED if args.as_test and not reached else EXIT_OK


def _checkpoint_path(path: Path) -> Path:
    """A checkpoint directory itself, or the newest complete checkpoint of a run dir."""
    from rlmod.utils import checkpoints

    if (path / checkpoints.METADATA_FILE).is_file():
        return path
    found = checkpoints.complete_checkpoints(path / "checkpoints")
    if not found:
        raise CLIError(
            f"{path} is neither a checkpoint (no metadata.json) nor a run dir with complete "
            "checkpoints in checkpoints/."
        )
    return found[-1]


def _resume(args: argparse.Namespace) -> Any:
    """The Algorithm restored from --resume; settings come from the checkpoint."""
    from rlmod.algorithms import Algorithm
    from rlmod.errors import CheckpointError

    given = [
        f
        for f, v in (("--config", args.config), ("--env", args.env), ("--seed", args.seed))
        if v is not None
    ]
    if given:
        raise CLIError(f"--resume takes its settings from the checkpoint; drop {given[0]}.")
    path = _checkpoint_path(args.resume)
    try:
        return Algorithm.from_checkpoint(path, trusted_modules=args.trust)
    except (CheckpointError, ValueError, TypeError) as e:
        raise CLIError(str(e)) from None


def _class_name(path: Path) -> str:
    """The algorithm name stored in a checkpoint's metadata (for messages)."""
    from rlmod.utils import checkpoints

    meta = checkpoints.read_metadata(_checkpoint_path(path))
    return str(meta["class"]).rsplit(":", 1)[-1]


def _evaluate(args: argparse.Namespace) -> int:
    """`rlmod evaluate CHECKPOINT`: the greedy policy's mean return over --episodes."""
    from rlmod.algorithms.evaluation import evaluate_checkpoint
    from rlmod.errors import CheckpointError

    if args.video_dir is not None and args.render is None:
        raise CLIError("--video-dir needs --render rgb_array.")
    path = _checkpoint_path(args.checkpoint)
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


def _record(args: argparse.Namespace) -> int:
    """`rlmod record --checkpoint CKPT --episodes N --output DIR`."""
    from rlmod.algorithms.inference import InferencePolicy
    from rlmod.env.registry import make_env
    from rlmod.errors import CheckpointError, EnvError, OfflineDataError
    from rlmod.offline import record_episodes

    path = _checkpoint_path(args.checkpoint)
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


if __name__ == "__main__":
    sys.exit(main())
