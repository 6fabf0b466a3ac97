"""`rlmod train ... --seeds 0 1 2`: the same training once per seed, one after another, each
run in PARENT/seed_<SEED>, then the comparison table of the runs.

Used by `rlmod.cli.train.run`.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable

from rlmod.cli.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, CLIError


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
    codes = []
    for seed in args.seeds:
        one = copy.copy(args)
        one.seeds, one.seed, one.run_dir = None, seed, parent / f"seed_{seed}"
        print(f"--- seed {seed} -> {one.run_dir}", file=sys.stderr)
        code = train_one(one)
        codes.append(code)
        if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            return code  # Ctrl-C stops every seed, not just this one
    print(f"\nRuns of {len(args.seeds)} seeds in {parent}:")
    print_table(read_groups([parent]), threshold=args.stop_reward, per_run=True)
    return max(codes, default=EXIT_OK)
