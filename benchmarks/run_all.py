"""Runs the benchmark suite, one script after the other (never two at once: they share the
cores), with the arguments `benchmarks/RESULTS.md` quotes; prints each script's tables and
then every script's summary row in one table.

    python benchmarks/run_all.py [--quick] [--only startup sampling_throughput ...]

The full suite takes about an hour on 2 cores, `--quick` (fewer seeds, rounds and sizes)
about 20 minutes; `make bench` runs the full one. Investigations, floors and A/B drivers
are in benchmarks/investigations/, outside the suite.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

from _common import SUMMARY_COLUMNS, commit, machine, parse_summary, table

HERE = Path(__file__).resolve().parent
SEEDS = ["--seeds", "0", "1", "2"]
# name -> (full arguments, --quick arguments)
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "startup": (["--repeats", "5"], ["--repeats", "3"]),
    "sampling_throughput": (
        ["--steps", "200000", "--repeats", "3"],
        ["--steps", "100000", "--repeats", "2"],
    ),
    "solve_cartpole": (SEEDS, SEEDS),
    "pendulum": (SEEDS, SEEDS),
    "curiosity_frozenlake": ([], ["--envs", "FrozenLake", *SEEDS]),
    "multi_module_scale": (
        ["--rllib-python", "none"],
        ["--rllib-python", "none", "--issue17-only", "--skip-10k", "--issue17-rounds", "16"],
    ),
    "multi_agent_learning": (SEEDS, ["--seeds", "0"]),
    "checkpoint_io": (["--repeats", "5"], ["--repeats", "3"]),
    "guard_overhead": ([], ["--rounds", "15"]),
    "off_policy": (SEEDS, ["--seeds", "0"]),
    "offline": ([], ["--seeds", "0", "--read-rounds", "15"]),
    "ray_sampling": ([], ["--steps", "32000", "--repeats", "2"]),
    "stacking_default": ([], ["--modules", "2", "10", "100", "--epochs", "1", "5"]),
    "minatar_vs_sb3": ([*SEEDS, "--env-steps", "100000"], [*SEEDS, "--env-steps", "25000"]),
    "atari_throughput": ([*SEEDS, "--env-steps", "8192"], [*SEEDS, "--env-steps", "2048"]),
    "lstm_vs_recurrentppo": ([*SEEDS, "--steps", "100000"], ["--seeds", "0", "--steps", "50000"]),
}


def run(name: str, args: list[str]) -> tuple[int, str]:
    """Runs one benchmark script, echoing its output as it comes; returns its exit code and
    its stdout."""
    cmd = [sys.executable, str(HERE / f"{name}.py"), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        out.append(line)
    return proc.wait(), "".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", nargs="+", choices=sorted(BENCHMARKS), help="Run only these benchmarks."
    )
    parser.add_argument("--quick", action="store_true", help="fewer seeds, rounds and sizes")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    rows, failed = [], []
    for name in args.only or list(BENCHMARKS):
        bench_args = BENCHMARKS[name][1 if args.quick else 0]
        print(f"\n$ python benchmarks/{name}.py {' '.join(bench_args)}", flush=True)
        start = time.perf_counter()
        code, out = run(name, bench_args)
        seconds = time.perf_counter() - start
        print(f"({name}: {seconds:.0f} s)", flush=True)
        row = parse_summary(out) if code == 0 else None
        if row is None:
            failed.append(name)
            row = {"benchmark": f"FAILED (exit code {code})" if code else "no summary row"}
        rows.append({"script": name, **row, "s": f"{seconds:.0f}"})
    print(
        f"\n# Suite summary{' (--quick)' if args.quick else ''}\ncommit {commit()}, "
        f"{machine()}, started {started:%Y-%m-%d %H:%M} UTC"
    )
    table(rows, ["script", *SUMMARY_COLUMNS, "s"])
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
