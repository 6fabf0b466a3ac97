"""Helpers shared by the benchmark scripts: the commit measured, a table printer, the one
summary row each suite benchmark ends with (run_all.py collects them), and timed children."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(__file__),
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(__file__),
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    """The machine kind, e.g. "2-core Intel(R) Xeon(R) Processor" (the CPU model from
    /proc/cpuinfo where there is one)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()}-core {model}"


def header(title: str) -> None:
    print(f"# {title}")
    print(f"commit {commit()}, python {platform.python_version()}, {machine()}")


def table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(f"{r.get(c, '')}") for r in rows)) for c in columns}
    print("| " + " | ".join(c.ljust(widths[c]) for c in columns) + " |")
    print("|" + "|".join("-" * (widths[c] + 2) for c in columns) + "|")
    for r in rows:
        print("| " + " | ".join(f"{r.get(c, '')}".ljust(widths[c]) for c in columns) + " |")


SUMMARY_HEADING = "## Summary row"
SUMMARY_COLUMNS = ["benchmark", "rlmod", "peer", "limit", "ratio"]


def summary(
    benchmark: str, *, rlmod: str, peer: str = "-", limit: str = "-", ratio: str = "-"
) -> None:
    """Prints the benchmark's one summary row, the last table of its output.

    Args:
        benchmark: the figure, e.g. "CartPole-v1 solve, median wall s (3 seeds)".
        rlmod: rlmod's figure.
        peer: the same figure for another library run side by side (SB3, RLlib,
            torch.save), or "-".
        limit: what no implementation can beat on this machine (the raw env loop with the
            same forward pass, pyarrow's own scan), or "-" where there is none.
        ratio: rlmod against the peer or the limit, saying which ("0.31 of SB3").
    """
    cells = (benchmark, rlmod, peer, limit, ratio)
    row = {c: v.replace("|", "/") for c, v in zip(SUMMARY_COLUMNS, cells, strict=True)}
    print(f"\n{SUMMARY_HEADING}")
    table([row], SUMMARY_COLUMNS)


def parse_summary(output: str) -> dict[str, str] | None:
    """The summary row `summary()` printed in `output` (the last one), or None."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == SUMMARY_HEADING]
    if not starts or len(lines) < starts[-1] + 4:
        return None
    cells = [c.strip() for c in lines[starts[-1] + 3].strip().strip("|").split("|")]
    return dict(zip(SUMMARY_COLUMNS, cells, strict=False))


TRAIN_UNTIL = r"""
import json, sys
from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED
env, target, seed, max_steps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
overrides = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
config = PPOConfig().environment(env).debugging(seed=seed)
for k, v in {**TUNED[env], **overrides}.items():
    setattr(config, k, v)
algo = config.build_algo()
while True:
    r = algo.train()
    ret, steps = r["env_runners"]["episode_return_mean"], r["num_env_steps_sampled_lifetime"]
    full = r["num_episodes_lifetime"] >= 100
    if (full and ret >= target) or steps >= max_steps:
        break
print(json.dumps({"steps": steps, "return": ret, "reached": bool(full and ret >= target)}))
"""
"""rlmod PPO with `rlmod.tuned.TUNED[env]` until the mean return over the last 100 episodes
reaches the target; argv: env, target, seed, max_steps and optionally a JSON dict of
settings over TUNED[env]; prints one JSON line."""


def run_timed(code: str, *args: object, pythonpath: str | None = None) -> dict:
    """Runs `code` in a fresh Python process (with `pythonpath` as its PYTHONPATH if given:
    another checkout's rlmod); its last stdout line (JSON) plus `wall_s`,
    the wall time from spawn to exit (interpreter start and imports included), and `cpu_s`,
    the CPU time (user + system) of that process and its children: on a shared machine it
    moves far less with the other load than the wall time does."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return result


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The median of `values` and a distribution-free `level` confidence interval of it:
    the k-th smallest and k-th largest values, k from the binomial(n, 1/2) distribution
    (no assumption on the shape of the rounds' ratios)."""
    import math

    xs = sorted(values)
    n = len(xs)
    median = (xs[(n - 1) // 2] + xs[n // 2]) / 2
    # largest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2
    tail, k, cdf = (1 - level) / 2, 0, 0.0
    while k < n // 2:
        p_next = math.comb(n, k) / 2**n
        if cdf + p_next > tail:
            break
        cdf += p_next
        k += 1
    k = max(k, 1)
    return median, xs[k - 1], xs[n - k]
