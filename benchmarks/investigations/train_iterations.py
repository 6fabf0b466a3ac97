"""Wall time of a fixed amount of PPO work on CartPole-v1: speed, apart from learning.

`solve_cartpole.py` times runs whose length depends on how many env steps a seed needs, and
a change of numerics (another tanh kernel, another sampling stream) changes that number
chaotically; this times the same work for every commit: `--iterations` training iterations
with `rlmod.tuned.TUNED["CartPole-v1"]`, in a fresh process. Prints the wall time from
spawn (imports included) and the time spent in `train()`, best of `--repeats`.

    python benchmarks/investigations/train_iterations.py [--iterations 20] [--repeats 3] [--seed 0]
"""

from __future__ import annotations

import argparse

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
from _common import header, run_timed, table

TRAIN_N = r"""
import json, sys, time
from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED
iterations, seed = int(sys.argv[1]), int(sys.argv[2])
config = PPOConfig().environment("CartPole-v1").debugging(seed=seed)
for k, v in TUNED["CartPole-v1"].items():
    setattr(config, k, v)
algo = config.build_algo()
start = time.perf_counter()
timers = {}
for _ in range(iterations):
    r = algo.train()
    for k, v in r["timers"].items():
        timers[k] = timers.get(k, 0.0) + v
print(json.dumps({"train_s": time.perf_counter() - start, "timers": timers,
                  "steps": r["num_env_steps_sampled_lifetime"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    header(f"{args.iterations} PPO iterations on CartPole-v1 (TUNED), fresh process")
    runs = [run_timed(TRAIN_N, args.iterations, args.seed) for _ in range(args.repeats)]
    best = min(runs, key=lambda r: r["train_s"])
    row = {
        "env steps": f"{best['steps']:,}",
        "wall s (best)": f"{min(r['wall_s'] for r in runs):.2f}",
        "train() s (best)": f"{best['train_s']:.2f}",
    }
    for k, v in sorted(best["timers"].items()):
        row[k] = f"{v:.2f}"
    table([row], list(row))


if __name__ == "__main__":
    main()
