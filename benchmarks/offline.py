"""Offline RL on one machine: BC time to goal, Parquet read throughput, recording overhead,
and MARWIL vs BC on mixed data.

- BC time to goal: `examples/offline/cartpole_bc.py` in a fresh process on 200 recorded
  expert CartPole episodes (a scripted controller scoring 500) until the evaluation's
  `episode_return_mean` reaches 450; seconds from process start (imports included) as the
  example reports them, and from spawn as measured here.
- Read throughput: rows/s from the same Parquet files into Learner batches (OfflineReader
  with BC's and MARWIL's settings: batch 2,000, shuffle buffer 10,000, the env-to-module
  transform; MARWIL's also computes discounted returns and what bootstraps truncated
  episodes, for which it reads `new_obs` on the first pass), prefetching the next chunk
  in a background thread as by default (MARWIL's also without), in steady state (the
  shuffle pool filled once before timing), against pyarrow's own scan of the files
  (`ParquetFile.iter_batches`, all columns, its decoding threads included; and only the
  columns each reader takes). Paired rounds (each runs every
  path once, one pass over the files; order reversed every other round): the median of
  the per-round ratios with a 95% CI, on the wall clock and on process CPU time.
- Recording overhead: `SingleAgentEnvRunner.sample()` on CartPole-v1 with the tuned number
  of sub-envs, with `offline_data(output=...)` writing and without (one EnvRunner, its
  writer toggled), rounds interleaved, fastest of each kept; ratio without / with.
- MARWIL (beta=1) vs BC: `examples/offline/cartpole_marwil.py` over seeds, the final
  evaluation return of each. Its data: half expert, half random timesteps, interleaved
  episode by episode (every file half expert) and recorded with a fixed seed (the same
  files every run), so neither the reader's file order nor a re-recording decides.

    flock /tmp/bench.lock python benchmarks/offline.py [--seeds 0 1 2] [--rounds 5] \
        [--read-rounds 41] [--only read]
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
from _common import header, median_ci, summary, table

from rlmod.algorithms.bc import BCConfig
from rlmod.connectors.pipeline import ConnectorPipeline
from rlmod.core.columns import Columns
from rlmod.env import SingleAgentEnvRunner
from rlmod.offline import OfflineReader, record_episodes
from rlmod.offline.reader import REQUIRED_COLUMNS, resolve_files
from rlmod.offline.transforms import module_view
from rlmod.testing import cartpole_expert
from rlmod.tuned import TUNED

ROOT = Path(__file__).resolve().parents[1]


def _run_example(script: str, *args: str) -> tuple[dict, float]:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "offline" / script), *args],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    wall = time.perf_counter() - start
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :]), wall


def _fastest(fns: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Rows/s of each function (it returns the rows it handled): the fastest of `rounds`
    runs, the functions interleaved, their order rotating each round."""
    best = {name: 0.0 for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            rows = fns[name]()
            best[name] = max(best[name], rows / (time.perf_counter() - start))
    return best


def _paired_rounds(
    fns: dict[str, Callable[[], int]], rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Per round, every function once (order reversed every other round, so a drift in
    the machine's speed hits all alike), timed on the wall clock and on the process's CPU
    clock (all its threads: pyarrow decodes on a pool); returns per clock and function the
    rounds' rows/s."""
    names = list(fns)
    speeds: dict[str, dict[str, list[float]]] = {
        "wall": {n: [] for n in names},
        "cpu": {n: [] for n in names},
    }
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            rows = fns[name]()
            speeds["cpu"][name].append(rows / max(time.process_time() - cpu, 1e-9))
            speeds["wall"][name].append(rows / (time.perf_counter() - wall))
    return speeds


def read_throughput(data: Path, rounds: int) -> list[dict]:
    """Rows/s of the OfflineReader (BC's and MARWIL's settings) and of pyarrow's own scan
    of the same files, measured in paired rounds: each round runs every path once, one pass
    over the files each (the readers: as many rows in batches of 2,000); the table gives
    each path's median rows/s and the median, with a 95% CI, and the minimum of its
    per-round ratio to the all-columns scan, on the wall clock and on process CPU time (which leaves out waits
    for cores other processes hold)."""
    files = resolve_files(data)
    env = gym.make("CartPole-v1")
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)

    def scan(columns: list[str] | None) -> Callable[[], int]:
        def go() -> int:
            rows = 0
            for f in files:
                for batch in pq.ParquetFile(f).iter_batches(columns=columns):
                    rows += batch.num_rows
            return rows

        return go

    def reader(gamma: float | None, prefetch: bool = True) -> Callable[[], int]:
        transform = module_view(
            ConnectorPipeline(
                [],
                input_observation_space=env.observation_space,
                input_action_space=env.action_space,
            ),
            env.action_space,
        )
        r = OfflineReader(
            files,
            batch_size=2000,
            shuffle_buffer_size=10_000,
            seed=0,
            gamma=gamma,
            obs_shape=(4,),
            transform=transform,
            prefetch=prefetch,
        )
        r.next_batch()  # steady state: the shuffle pool is full before timing

        def go() -> int:
            rows = 0
            while rows < total:
                rows += len(r.next_batch()["rewards"])
            return rows

        return go

    all_cols = "pyarrow scan, all columns"
    fns = {
        all_cols: scan(None),
        "pyarrow scan, BC's columns": scan(list(REQUIRED_COLUMNS)),
        "pyarrow scan, MARWIL's columns": scan([*REQUIRED_COLUMNS, Columns.NEXT_OBS]),
        "OfflineReader, BC": reader(None),
        "OfflineReader, MARWIL (+ returns, bootstrap)": reader(0.99),
        "OfflineReader, MARWIL, prefetch=False": reader(0.99, prefetch=False),
    }
    for fn in fns.values():  # warm-up: files in the page cache, pools filled
        fn()
    speeds = _paired_rounds(fns, rounds)
    rows = []
    for name in fns:
        row = {"path": name}
        for clock, by_name in speeds.items():
            ratios = [x / b for x, b in zip(by_name[name], by_name[all_cols], strict=True)]
            median, low, high = median_ci(ratios)
            row[f"{clock}: rows/s"] = f"{sorted(by_name[name])[len(ratios) // 2]:,.0f}"
            row[f"{clock}: vs scan (all), median"] = f"{median:.2f}"
            row[f"{clock}: 95% CI"] = f"{low:.2f}-{high:.2f}"
            row[f"{clock}: min"] = f"{min(ratios):.2f}"
        rows.append(row)
    return rows


READ_COLUMNS = [
    "path",
    *(
        f"{clock}: {col}"
        for clock in ("wall", "cpu")
        for col in ("rows/s", "vs scan (all), median", "95% CI", "min")
    ),
]


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
    return {
        "envs": config.num_envs_per_env_runner,
        "steps/s without": f"{best['without']:,.0f}",
        "steps/s with output": f"{best['with output']:,.0f}",
        "ratio with / without": f"{best['with output'] / best['without']:.2f}",
        "episodes written": episodes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds of the recording overhead"
    )
    parser.add_argument(
        "--read-rounds",
        type=int,
        default=41,
        help="paired rounds of the read throughput (median and 95%% CI)",
    )
    parser.add_argument(
        "--only", choices=["read"], default=None, help="measure the read throughput only"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)  # as Algorithm does (num_threads_per_learner); 2 cores shared
    header("Offline RL (BC, MARWIL, Parquet)")
    work = Path(tempfile.mkdtemp(prefix="rlmod_offline_bench_"))
    expert = work / "expert"
    rows = record_episodes(
        gym.make("CartPole-v1"), cartpole_expert, num_episodes=200, output_dir=expert, seed=0
    )
    print(f"\n200 expert episodes, {rows:,} rows, in {expert}\n")

    if args.only == "read":
        print("\n## Read throughput only (--only read)")
        read = read_throughput(expert, args.read_rounds)
        table(read, READ_COLUMNS)
        print_summary(read, None)
        return
    print("## BC to eval return 450 (fresh process, 200 expert episodes)")
    bc_rows = []
    for seed in args.seeds:
        out, wall = _run_example(
            "cartpole_bc.py", "--data", str(expert), "--quiet", "--seed", str(seed)
        )
        bc_rows.append(
            {
                "seed": seed,
                "reached": out["reached"],
                "return": out["return"],
                "iterations": out["iterations"],
                "s from start": out["seconds_from_start"],
                "s from spawn": f"{wall:.1f}",
            }
        )
    table(bc_rows, ["seed", "reached", "return", "iterations", "s from start", "s from spawn"])

    print(
        f"\n## Read throughput: Parquet -> Learner batches ({args.read_rounds} paired "
        "rounds, one pass over the files each)"
    )
    read = read_throughput(expert, args.read_rounds)
    table(read, READ_COLUMNS)

    print("\n## Recording overhead: EnvRunner.sample() with and without output")
    rec = recording_overhead(args.rounds)
    table([rec], list(rec))

    print(
        "\n## MARWIL (beta=1) vs BC: half expert, half random timesteps (interleaved, "
        "seeded), 20 iterations"
    )
    out, wall = _run_example("cartpole_marwil.py", "--seeds", *map(str, args.seeds))
    table(
        [
            {
                "algorithm": name,
                **{f"seed {s}": f"{r:.1f}" for s, r in zip(args.seeds, returns, strict=True)},
                "mean": f"{sum(returns) / len(returns):.1f}",
            }
            for name, returns in out.items()
        ],
        ["algorithm", *(f"seed {s}" for s in args.seeds), "mean"],
    )
    print(f"({wall:.0f} s)")
    print_summary(read, bc_rows)


def print_summary(read: list[dict], bc_rows: list[dict] | None) -> None:
    """The suite's row: MARWIL's reader (the costlier one) against pyarrow's scan of all
    columns (the limit: decoding the files and nothing else), and BC's time to goal."""
    by_path = {r["path"]: r for r in read}
    scan = by_path["pyarrow scan, all columns"]
    marwil = by_path["OfflineReader, MARWIL (+ returns, bootstrap)"]
    rlmod = f"MARWIL reader {marwil['wall: rows/s']} rows/s"
    if bc_rows:
        walls = sorted(float(r["s from spawn"]) for r in bc_rows)
        reached = sum(bool(r["reached"]) for r in bc_rows)
        rlmod += (
            f"; BC to 450 in {walls[len(walls) // 2]:.1f} s from spawn ({reached}/{len(walls)})"
        )
    summary(
        "offline: Parquet -> Learner batches (MARWIL's reader), wall rows/s; BC time to goal",
        rlmod=rlmod,
        limit=f"pyarrow scan, all columns {scan['wall: rows/s']} rows/s",
        ratio=f"{marwil['wall: vs scan (all), median']} of scan (95% CI {marwil['wall: 95% CI']})",
    )


if __name__ == "__main__":
    main()
