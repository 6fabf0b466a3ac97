"""Start-up cost: `import rlmod` against `import torch` alone, and `build_algo()` for
CartPole PPO after import. Each measurement is a fresh process; best of `--repeats`.

    python benchmarks/startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _common import header, table

IMPORT = "import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"
BUILD = (
    "from rlmod.algorithms.ppo import PPOConfig; import time; "
    "config = PPOConfig().environment('CartPole-v1'); t = time.perf_counter(); "
    "algo = config.build_algo(); print(time.perf_counter() - t)"
)


def best(code: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    header("Start-up")
    torch_s = best(IMPORT.format(mod="torch"), args.repeats)
    rlmod_s = best(IMPORT.format(mod="rlmod.algorithms.ppo"), args.repeats)
    plain_s = best(IMPORT.format(mod="rlmod"), args.repeats)
    build_s = best(BUILD, args.repeats)
    table(
        [
            {"measure": "import torch", "seconds": f"{torch_s:.3f}", "target": ""},
            {"measure": "import rlmod", "seconds": f"{plain_s:.3f}", "target": ""},
            {
                "measure": "import rlmod.algorithms.ppo",
                "seconds": f"{rlmod_s:.3f}",
                "target": f"<= torch + 0.3 = {torch_s + 0.3:.3f}",
            },
            {
                "measure": "build_algo() CartPole PPO, after import",
                "seconds": f"{build_s:.3f}",
                "target": "< 0.5",
            },
        ],
        ["measure", "seconds", "target"],
    )
    print(f"rlmod (with PPO) import over torch: {rlmod_s - torch_s:+.3f} s")


if __name__ == "__main__":
    main()
