"""Runs every benchmark, one after the other (never two at once: they share the cores),
with the arguments `benchmarks/RESULTS.md` quotes, and prints their tables.

    python benchmarks/run_all.py [--only startup sampling_throughput ...]

About 14 minutes on 2 cores; `make bench` runs it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS: dict[str, list[str]] = {
    "startup": ["--repeats", "5"],
    "sampling_throughput": ["--steps", "200000", "--repeats", "3"],
    "solve_cartpole": ["--seeds", "0", "1", "2"],
    "pendulum": ["--seeds", "0", "1", "2"],
    "curiosity_frozenlake": [],
    "multi_module_scale": [],
    "multi_agent_learning": ["--seeds", "0", "1", "2"],
    "checkpoint_io": ["--repeats", "5"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", nargs="+", choices=sorted(BENCHMARKS), help="Run only these benchmarks."
    )
    args = parser.parse_args()
    failed = []
    for name in args.only or list(BENCHMARKS):
        cmd = [sys.executable, str(HERE / f"{name}.py"), *BENCHMARKS[name]]
        print(f"\n$ python benchmarks/{name}.py {' '.join(BENCHMARKS[name])}", flush=True)
        start = time.perf_counter()
        if subprocess.run(cmd, check=False).returncode != 0:
            failed.append(name)
        print(f"({name}: {time.perf_counter() - start:.0f} s)", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
