"""Issue 17's 4,000-env-step first `train()` (1,000 agents, one module per agent,
[64, 64], 32 envs) for two source trees, alternating fresh processes, so that a before /
after comparison is one run on one machine state.

    python benchmarks/stacked_train_ab.py /path/to/base /path/to/new [--rounds 1]
        [--batch 4000] [--agents 1000]

Each child is benchmarks/_stacked_scale.py's I17_TRAIN, run with PYTHONPATH=<tree>.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _stacked_scale import I17_TRAIN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+", help="source trees (PYTHONPATH roots)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4000)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--envs", type=int, default=32)
    args = parser.parse_args()
    print("| round | tree | train() s | sample s | learn s | agent steps | CPU s |")
    print("|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for tree in args.trees:
            env = {**os.environ, "PYTHONPATH": tree}
            before = os.times()
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    I17_TRAIN,
                    str(args.agents),
                    str(args.batch),
                    "1",
                    str(args.envs),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            after = os.times()
            cpu = (
                after.children_user
                - before.children_user
                + after.children_system
                - before.children_system
            )
            res = json.loads(out.stdout.strip().splitlines()[-1])
            t = res["timers"]
            print(
                f"| {r} | {tree} | {res['train_s']:.1f} | {t[0]:.1f} | {t[1]:.1f} | "
                f"{res['agent_steps']:,} | {cpu:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
