"""Offline RL on one machine: BC time to goal, Parquet read throughput, recording overhead,
and MARWIL vs BC on mixed data.

- BC time to goal: `examples/offline/cartpole_bc.py` in a fresh process on 200 recorded
  expert CartPole episodes (a scripted controller scoring 500) until the evaluation's
  `episode_return_mean` reaches 450; seconds from process start (imports included) as the
  example reports them, and from spawn as measured here.
- Read throughput: rows/s from the same Parquet files into Learner batches (OfflineReader
  with BC's and MARWIL's settings: batch 2,000, shuffle buffer 10,000, the env-to-module
  transform; MARWIL's also computes discounted returns), in steady state (the shuffle pool
  filled once before timing), against pyarrow's own scan of the files
  (`ParquetFile.iter_batches`, all columns; and only the columns the reader takes).
  Rounds interleaved, fastest of each kept.
- Recording overhead: `SingleAgentEnvRunner.sample()` on CartPole-v1 with the tuned number
  of sub-envs, with `offline_data(output=...)` writing and without (one EnvRunner, its
  writer toggled), rounds interleaved, fastest of each kept; ratio without / with.
- MARWIL (beta=1) vs BC: `examples/offline/cartpole_marwil.py` over seeds, the final
  evaluation return of each. Its data: half expert, half random timesteps, interleaved
  episode by episode (every file half expert) and recorded with a fixed seed (the same
  files every run), so neither the reader's file order nor a re-recording decides.

    flock /tmp/bench.lock python benchmarks/offline.py [--seeds 0 1 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import pyarrow.parquet as pq
import torch
from _common import header, table

from rlmod.algorithms.bc import BCConfig
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.env import SingleAgentEnvRunner
from rlmod.offline import OfflineReader, record_episodes
from rlmod.offline.reader import REQUIRED_COLUMNS, resolve_files
from rlmod.offline.transforms import module_view
from rlmod.testing import cartpole_expert
from rlmod.tuned import TUNED

ROOT = Path(__file__).resolve().parents[1]


def _run_example(script: str, *args: str) -> tuple[dict, float]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "offline" / script), *args],
                         capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - start
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), wall


def _fastest(fns: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Rows/s of each function (it returns the rows it handled): the fastest of `rounds`
    runs, the functions interleaved, their order rotating each round."""
    best = {name: 0.0 for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            rows = fns[name]()
            best[name] = max(best[name], rows / (time.perf_counter() - start))
    return best


def read_throughput(data: Path, rounds: int) -> list[dict]:
    files = resolve_files(data)
    env = gym.make("CartPole-v1")
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    passes = 3

    def scan(columns: list[str] | None) -> Callable[[], int]:
        def go() -> int:
            rows = 0
            for _ in range(passes):
                for f in files:
                    for batch in pq.ParquetFile(f).iter_batches(columns=columns):
                        rows += batch.num_rows
            return rows
        return go

    def reader(gamma: float | None) -> Callable[[], int]:
        transform = module_view(ConnectorPipeline(
            [], input_observation_space=env.observation_space,
            input_action_space=env.action_space), env.action_space)
        r = OfflineReader(files, batch_size=2000, shuffle_buffer_size=10_000, seed=0,
                          gamma=gamma, obs_shape=(4,), transform=transform)
        r.next_batch()  # steady state: the shuffle pool is full before timing

        def go() -> int:
            rows = 0
            while rows < passes * total:
                rows += len(r.next_batch()["rewards"])
            return rows
        return go

    best = _fastest({"pyarrow scan, all columns": scan(None),
                     "pyarrow scan, the reader's columns": scan(list(REQUIRED_COLUMNS)),
                     "OfflineReader, BC": reader(None),
                     "OfflineReader, MARWIL (+ returns)": reader(0.99)}, rounds)
    base = best["pyarrow scan, all columns"]
    base_cols = best["pyarrow scan, the reader's columns"]
    return [{"path": name, "rows/s": f"{v:,.0f}", "vs scan (all)": f"{v / base:.2f}",
             "vs scan (same columns)": f"{v / base_cols:.2f}"} for name, v in best.items()]


def recording_overhead(rounds: int) -> dict:
    config = BCConfig().environment("CartPole-v1").debugging(seed=0)
    config.num_envs_per_env_runner = TUNED["CartPole-v1"].get("num_envs_per_env_runner", 16)
    with tempfile.TemporaryDirectory() as out:
        config.offline_data(output=out)
        runner = SingleAgentEnvRunner(config=config)
        writer = runner._writer
        steps = 20_000

        def sample(with_writer: bool) -> Callable[[], int]:
            def go() -> int:
                runner._writer = writer if with_writer else None
                runner.sample(num_timesteps=steps)
                return steps
            return go

        best = _fastest({"with output": sample(True), "without": sample(False)}, rounds)
        runner._writer = writer
        runner.stop()
        assert writer is not None
        episodes = writer.num_episodes_written
    return {"envs": config.num_envs_per_env_runner,
            "steps/s without": f"{best['without']:,.0f}",
            "steps/s with output": f"{best['with output']:,.0f}",
            "ratio with / without": f"{best['with output'] / best['without']:.2f}",
            "episodes written": episodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as Algorithm does (num_threads_per_learner); 2 cores shared
    header("Offline RL (BC, MARWIL, Parquet)")
    work = Path(tempfile.mkdtemp(prefix="rlmod_offline_bench_"))
    expert = work / "expert"
    rows = record_episodes(gym.make("CartPole-v1"), cartpole_expert, num_episodes=200,
                           output_dir=expert, seed=0)
    print(f"\n200 expert episodes, {rows:,} rows, in {expert}\n")

    print("## BC to eval return 450 (fresh process, 200 expert episodes)")
    bc_rows = []
    for seed in args.seeds:
        out, wall = _run_example("cartpole_bc.py", "--data", str(expert), "--quiet",
                                 "--seed", str(seed))
        bc_rows.append({"seed": seed, "reached": out["reached"], "return": out["return"],
                        "iterations": out["iterations"],
                        "s from start": out["seconds_from_start"],
                        "s from spawn": f"{wall:.1f}"})
    table(bc_rows, ["seed", "reached", "return", "iterations", "s from start",
                    "s from spawn"])

    print("\n## Read throughput: Parquet -> Learner batches (3 passes over the files)")
    table(read_throughput(expert, args.rounds),
          ["path", "rows/s", "vs scan (all)", "vs scan (same columns)"])

    print("\n## Recording overhead: EnvRunner.sample() with and without output")
    rec = recording_overhead(args.rounds)
    table([rec], list(rec))

    print("\n## MARWIL (beta=1) vs BC: half expert, half random timesteps (interleaved, "
          "seeded), 20 iterations")
    out, wall = _run_example("cartpole_marwil.py", "--seeds", *map(str, args.seeds))
    table([{"algorithm": name, **{f"seed {s}": f"{r:.1f}" for s, r in zip(
        args.seeds, returns, strict=True)}, "mean": f"{sum(returns) / len(returns):.1f}"}
        for name, returns in out.items()],
        ["algorithm", *(f"seed {s}" for s in args.seeds), "mean"])
    print(f"({wall:.0f} s)")


if __name__ == "__main__":
    main()
