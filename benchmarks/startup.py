"""Start-up cost: `import rlmod` against `import torch` alone (the limit: rlmod needs
torch) and against `import stable_baselines3` (the peer), and `build_algo()` for CartPole
PPO after import. Each measurement is a fresh process; best of `--repeats`.

    python benchmarks/startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys

from _common import header, summary, table

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
    sb3 = importlib.util.find_spec("stable_baselines3") is not None
    sb3_s = best(IMPORT.format(mod="stable_baselines3"), args.repeats) if sb3 else None
    table(
        [
            {"measure": "import torch", "seconds": f"{torch_s:.3f}", "target": ""},
            {
                "measure": "import stable_baselines3",
                "seconds": "not installed" if sb3_s is None else f"{sb3_s:.3f}",
                "target": "",
            },
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
    summary(
        "start-up: import rlmod.algorithms.ppo, s (build_algo() after it)",
        rlmod=f"{rlmod_s:.2f} ({build_s:.3f})",
        peer="-" if sb3_s is None else f"import stable_baselines3 {sb3_s:.2f}",
        limit=f"import torch {torch_s:.2f}",
        ratio=f"{rlmod_s / torch_s:.2f} of torch"
        + ("" if sb3_s is None else f", {rlmod_s / sb3_s:.2f} of SB3"),
    )


if __name__ == "__main__":
    main()
