"""PPO on Pendulum-v1 until the mean return over the last 100 episodes is >= -300.

Uses `rlmod.tuned.TUNED["Pendulum-v1"]` (what `rlmod train --env Pendulum-v1` uses). Each
seed runs in a fresh process, timed from process start.

    python benchmarks/pendulum.py [--seeds 0 1 2] [--max-steps 1000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from _common import header, table

CODE = r"""
import json, sys
from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED
seed, max_steps = int(sys.argv[1]), int(sys.argv[2])
config = PPOConfig().environment("Pendulum-v1").debugging(seed=seed)
for k, v in TUNED["Pendulum-v1"].items():
    setattr(config, k, v)
algo = config.build_algo()
while True:
    r = algo.train()
    ret, steps = r["env_runners"]["episode_return_mean"], r["num_env_steps_sampled_lifetime"]
    if (r["num_episodes_lifetime"] >= 100 and ret >= -300) or steps >= max_steps:
        break
print(json.dumps({"steps": steps, "return": ret, "reached": bool(ret >= -300)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    args = parser.parse_args()
    header("PPO on Pendulum-v1 to mean return >= -300 (last 100 episodes), from process start")
    rows = []
    for seed in args.seeds:
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CODE, str(seed), str(args.max_steps)],
                             capture_output=True, text=True)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"seed": seed, "reached -300": r["reached"], "env steps": f"{r['steps']:,}",
                     "wall s": f"{wall:.1f}", "return": f"{r['return']:.1f}"})
    table(rows, ["seed", "reached -300", "env steps", "wall s", "return"])


if __name__ == "__main__":
    main()
