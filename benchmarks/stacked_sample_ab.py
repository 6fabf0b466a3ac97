"""Issue 17's sampling ratio (agent steps/s with 1,000 modules over the same 1,000
MultiAgentCartPole agents mapped to 10 modules, one EnvRunner each, 32 envs) for two or more
source trees, alternating fresh processes, so that a before / after comparison is one run on
one machine state.

    python benchmarks/stacked_sample_ab.py /path/to/base /path/to/new /path/to/new:1
        [--rounds 3] [--child-rounds 16] [--envs 32] [--agents 1000]

`TREE:N` runs that tree with `num_threads_per_learner=N` (explicit: N torch threads for the
whole process, the runners' auto rule off); a plain `TREE` with the default (None, auto:
the process on 1 thread, local EnvRunners' large forward passes on 2, see
rlmod/env/acting_threads.py; trees from before that rule sample on 1 thread).

Each child is benchmarks/_stacked_scale.py's I17_SAMPLE (the sampling child of
`multi_module_scale.py --issue17-only`), run with PYTHONPATH=<tree> and that tree's own
benchmarks/stacked_acting.py. Prints one row per child: the median of its per-round ratios,
their range, and the median rates.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from _stacked_scale import I17_SAMPLE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "trees", nargs="+", help="source trees (PYTHONPATH roots), each optionally :THREADS"
    )
    parser.add_argument("--rounds", type=int, default=3, help="children per tree")
    parser.add_argument(
        "--child-rounds", type=int, default=16, help="alternating sample() rounds inside each child"
    )
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--agents", type=int, default=1000)
    args = parser.parse_args()
    print(
        "| round | tree | ratio (median of rounds) | range | 1,000 modules agent steps/s "
        "| 10 modules agent steps/s |"
    )
    print("|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {t: [] for t in args.trees}
    for r in range(args.rounds):
        for tree in args.trees if r % 2 == 0 else args.trees[::-1]:
            root, _, threads = tree.partition(":")
            env = {**os.environ, "PYTHONPATH": root}
            child = os.path.join(root, "benchmarks", "_stacked_scale.py")
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    I17_SAMPLE,
                    child,
                    str(args.agents),
                    str(args.envs),
                    str(args.child_rounds),
                    "10",
                    "10,1000",
                    *([threads] if threads else []),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            res = json.loads(out.stdout.strip().splitlines()[-1])
            ratios[tree].append(res["ratio"])
            print(
                f"| {r} | {tree} | {res['ratio']:.3f} | {res['ratio_min']:.2f}-"
                f"{res['ratio_max']:.2f} | {res['rates']['1000']:,.0f} | "
                f"{res['rates']['10']:,.0f} |",
                flush=True,
            )
    for tree, values in ratios.items():
        print(f"{tree}: median ratio {np.median(values):.3f} over {len(values)} children")


if __name__ == "__main__":
    main()
