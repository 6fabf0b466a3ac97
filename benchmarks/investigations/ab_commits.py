"""Runs one benchmark script on two or more checkouts (commits), alternating, in one session.

Each run is a fresh process with the checkout as its working directory and on PYTHONPATH,
so each measures its own code; alternating runs lets the machine's drift hit every
checkout alike. `{round}` in the command is replaced by the round number (0, 1, ...),
e.g. to give each round its own seed. Prints each run's output, labelled.

    git worktree add /tmp/before <commit>
    python benchmarks/investigations/ab_commits.py --trees /tmp/before . --rounds 3 \
        -- benchmarks/solve_cartpole.py --seeds {round} --skip-sb3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def describe(tree: str) -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=tree
    )
    return f"{tree} ({out.stdout.strip() or 'unknown commit'})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", nargs="+", required=True, help="checkouts to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="script and its arguments, after --"
    )
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"]
    trees = [os.path.abspath(t) for t in args.trees]
    for rnd in range(args.rounds):
        # Alternate the order too, so neither checkout always runs first in a round.
        for tree in trees if rnd % 2 == 0 else trees[::-1]:
            cmd = [sys.executable, *(c.replace("{round}", str(rnd)) for c in command)]
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
            print(f"## round {rnd}, {describe(tree)}: {' '.join(cmd[1:])}", flush=True)
            print(out.stdout.rstrip(), flush=True)
            if out.returncode != 0:
                print(out.stderr[-2000:], flush=True)


if __name__ == "__main__":
    main()
