"""`rlmod train ... --seeds 0 1 2`: the same training once per seed, one after another, each
run in PARENT/seed_<SEED>, then the comparison table of the runs.

Used by `rlmod.cli.train.run`.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable

from rlmod.cli.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, EXIT_USAGE, CLIError


def train_seeds(args: argparse.Namespace, train_one: Callable[[argparse.Namespace], int]) -> int:
    """Runs `train_one` per seed; returns the first interrupt's exit code, else the largest."""
    from rlmod.cli.compare import print_table
    from rlmod.cli.runs import read_groups
    from rlmod.utils import run_control

    if args.resume is not None:
        raise CLIError("--seeds starts new runs; it does not go with --resume.")
    if len(set(args.seeds)) != len(args.seeds):
        raise CLIError(f"--seeds {' '.join(map(str, args.seeds))}: a seed is repeated.")
    if args.run_dir is not None:
        try:
            run_control.check_run_dir(args.run_dir)
        except ValueError as e:
            raise CLIError(str(e)) from None
        parent = args.run_dir
    else:
        parent = run_control.make_default_run_dir(args.algo.upper(), args.env or "config")
    runs = []
    for seed in args.seeds:
        one = copy.copy(args)
        one.seeds, one.seed, one.run_dir = None, seed, parent / f"seed_{seed}"
        runs.append(one)
    if args.seed_workers > 1:
        codes = _in_parallel(runs, args.seed_workers)
    else:
        codes = []
        for one in runs:
            print(f"--- seed {one.seed} -> {one.run_dir}", file=sys.stderr)
            codes.append(train_one(one))
            if codes[-1] in (EXIT_INTERRUPTED, EXIT_TERMINATED):
                return codes[-1]  # Ctrl-C stops every seed, not just this one
    stopped = [c for c in codes if c in (EXIT_INTERRUPTED, EXIT_TERMINATED)]
    if stopped:
        return stopped[0]
    print(f"\nRuns of {len(args.seeds)} seeds in {parent}:")
    print_table(read_groups([parent]), threshold=args.stop_reward, per_run=True)
    return max(codes, default=EXIT_OK)


LOG_FILE = "train.log"
"""With --seed-workers > 1: what each run printed, in its run dir."""


def _in_parallel(runs: list[argparse.Namespace], workers: int) -> list[int]:
    """The runs in `workers` processes at once (spawned: a fresh interpreter each), each
    printing into RUN_DIR/train.log; returns their exit codes in seed order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    print(
        f"Training {len(runs)} seeds, {workers} at a time; each run prints into "
        f"RUN_DIR/{LOG_FILE}.",
        file=sys.stderr,
    )
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        codes = list(pool.map(train_logged, runs))
    for one, code in zip(runs, codes, strict=True):
        print(f"--- seed {one.seed} -> {one.run_dir} (exit code {code})", file=sys.stderr)
    return codes


def train_logged(args: argparse.Namespace) -> int:
    """One seed's run in a worker process, its output in RUN_DIR/train.log."""
    import contextlib

    from rlmod.cli.train import train_one

    args.run_dir.mkdir(parents=True, exist_ok=True)
    with (
        (args.run_dir / LOG_FILE).open("w") as log,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        try:
            return train_one(args)
        except CLIError as e:
            print(f"rlmod train: error: {' '.join(str(e).split())}", file=log)
            return EXIT_USAGE
