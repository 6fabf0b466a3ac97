"""PPO on Pendulum-v1 until the mean return over the last 100 episodes is >= -300.

Uses `rlmod.tuned.TUNED["Pendulum-v1"]` (what `rlmod train --env Pendulum-v1` uses). Each
seed runs in a fresh process, timed from process start.

    python benchmarks/pendulum.py [--seeds 0 1 2] [--max-steps 1000000]
"""

from __future__ import annotations

import argparse
import statistics

from _common import TRAIN_UNTIL, header, run_timed, summary, table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    args = parser.parse_args()
    header("PPO on Pendulum-v1 to mean return >= -300 (last 100 episodes), from process start")
    rows, runs = [], []
    for seed in args.seeds:
        r = run_timed(TRAIN_UNTIL, "Pendulum-v1", -300, seed, args.max_steps)
        runs.append(r)
        rows.append(
            {
                "seed": seed,
                "reached -300": r["reached"],
                "env steps": f"{r['steps']:,}",
                "wall s": f"{r['wall_s']:.1f}",
                "return": f"{r['return']:.1f}",
            }
        )
    table(rows, ["seed", "reached -300", "env steps", "wall s", "return"])
    reached = sum(r["reached"] for r in runs)
    summary(
        f"Pendulum-v1 PPO to -300, median wall s from process start, {len(runs)} seeds",
        rlmod=f"{statistics.median(r['wall_s'] for r in runs):.1f} ({reached}/{len(runs)} "
        f"reached, {statistics.median(r['steps'] for r in runs):,.0f} env steps)",
    )


if __name__ == "__main__":
    main()
