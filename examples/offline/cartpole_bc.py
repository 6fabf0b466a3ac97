"""Example: record expert CartPole episodes, train BC on them offline, evaluate.

The expert is a scripted linear controller (`rlmod.testing.cartpole_expert`, return 500);
`rlmod.offline.record_episodes` writes its episodes to Parquet with the env's spaces in
`spaces.json`. BC (`BCConfig`, MARWIL with beta=0) then trains on a Learner that never
builds an env: its module's spaces come from that `spaces.json`. Every
`evaluation_interval` iterations an evaluation EnvRunner plays the trained module on
CartPole-v1 until `episode_return_mean` reaches the goal.

    python examples/offline/cartpole_bc.py --as-test
    python examples/offline/cartpole_bc.py --data /tmp/expert --episodes 200

Recording from a trained checkpoint instead: `rlmod record --checkpoint CKPT --episodes
200 --output DIR`. The last line printed is `RESULT {json}` (reached, return, seconds since
process start, ...), which `benchmarks/offline.py` parses.
"""

from __future__ import annotations

import time

START = time.perf_counter()  # time-to-goal counts from process start, imports included

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import gymnasium as gym  # noqa: E402

from rlmod.algorithms.bc import BCConfig  # noqa: E402
from rlmod.offline import record_episodes  # noqa: E402
from rlmod.testing import cartpole_expert  # noqa: E402


def train_bc(data: Path, *, seed: int, goal: float, max_iterations: int, quiet: bool) -> dict:
    """BC on the episodes in `data` until evaluation reaches `goal`."""
    config = (
        BCConfig()
        .environment("CartPole-v1")  # for evaluation only; training reads `data`
        .offline_data(input_=str(data))
        .training(lr=3e-3, train_batch_size=2000, minibatch_size=250, num_epochs=2)
        .evaluation(evaluation_interval=2, evaluation_duration=10)
        .debugging(seed=seed)
    )
    algo = config.build_algo()
    best = float("-inf")
    iteration = 0
    for iteration in range(1, max_iterations + 1):  # noqa: B007 - reported below
        result = algo.train()
        if "evaluation" not in result:
            continue
        ret = result["evaluation"]["env_runners"]["episode_return_mean"]
        best = max(best, ret)
        if not quiet:
            loss = result["learners"]["default_policy"]["policy_loss"]
            print(
                f"iter {iteration:3d}  loss {loss:.3f}  eval return {ret:6.1f}  "
                f"{time.perf_counter() - START:5.1f} s",
                flush=True,
            )
        if ret >= goal:
            break
    algo.stop()
    return {
        "reached": best >= goal,
        "return": best,
        "iterations": iteration,
        "seconds_from_start": round(time.perf_counter() - START, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="Recorded episodes; recorded if empty.")
    parser.add_argument("--episodes", type=int, default=200, help="Expert episodes to record.")
    parser.add_argument("--goal", type=float, default=450.0)
    parser.add_argument("--max-iterations", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--as-test", action="store_true", help="Exit 1 if the goal is missed.")
    parser.add_argument("--quiet", action="store_true", help="Print only the RESULT line.")
    args = parser.parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="cartpole_expert_"))
    if not any(data.glob("*.parquet")):
        rows = record_episodes(
            gym.make("CartPole-v1"),
            cartpole_expert,
            num_episodes=args.episodes,
            output_dir=data,
            seed=args.seed,
        )
        if not args.quiet:
            print(f"recorded {args.episodes} expert episodes ({rows} rows) in {data}")
    out = train_bc(
        data, seed=args.seed, goal=args.goal, max_iterations=args.max_iterations, quiet=args.quiet
    )
    print("RESULT " + json.dumps(out), flush=True)
    return 1 if args.as_test and not out["reached"] else 0


if __name__ == "__main__":
    sys.exit(main())
