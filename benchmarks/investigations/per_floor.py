"""Prioritized replay: the floor of a proportional sample and add, beside the ring buffer's.

The issue asks prioritized add and sample to reach 0.8 of a plain numpy ring buffer doing
the same copies (`replay_buffer.py`: 256-row adds and samples, capacity 100,000). This
script times, in one process, interleaved (CPU time per call, best round):

- ring: `replay_buffer.py`'s baseline, whole `add` (column copies) and `sample` (one
  `integers` + one `np.take` per column);
- sample floor: everything a proportional sample must do, each part at its cheapest in
  numpy: the stratified values (`random` + arithmetic), the search as ONE `searchsorted`
  on a prefix-sum array that is assumed current for free (no refresh, no tree: no numpy
  search can take fewer calls), the ring's column gathers, and the importance weights
  (a gather of the sampled priorities, a division, a power); the parts are timed alone too;
- what keeping that prefix sum current costs: `np.cumsum` over all 100,000 priorities,
  which a flat prefix sum pays after every `update_priorities` (the sum tree's upkeep is
  a few small reductions instead);
- add floor: the ring's copies plus one slice write of the new rows' priority;
- rlmod's `PrioritizedReplayBuffer.sample` and `add`, and `SumTree.find` alone.

    python benchmarks/investigations/per_floor.py [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import numpy as np
from _common import header, table
from replay_buffer import ADD_ROWS, BATCH, CAPACITY, RingBuffer, transitions

from rlmod.replay import PrioritizedReplayBuffer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    header(
        f"Prioritized replay floor: {BATCH}-row samples, {ADD_ROWS}-row adds, capacity {CAPACITY:,}"
    )
    rng = np.random.default_rng(0)
    data = [transitions(rng) for _ in range(16)]
    ring = RingBuffer(CAPACITY, data[0])
    per = PrioritizedReplayBuffer(CAPACITY, seed=0)
    for i in range(CAPACITY // ADD_ROWS + 1):  # both full
        ring.add(data[i % 16])
        per.add(data[i % 16])
    # Priorities as after training: spread over two orders of magnitude.
    per.update_priorities(np.arange(CAPACITY), rng.random(CAPACITY) * 10)
    leaves = per.tree.leaves.copy()
    prefix = np.cumsum(leaves)
    total, low = float(prefix[-1]), float(leaves.min())
    cols = ring.cols

    def values() -> np.ndarray:
        return (np.arange(BATCH) + rng.random(BATCH)) * (total / BATCH)

    vals = values()
    idx = np.minimum(np.searchsorted(prefix, vals, side="right"), CAPACITY - 1)

    def gathers() -> dict[str, np.ndarray]:
        return {c: np.take(v, idx, axis=0) for c, v in cols.items()}

    def weights() -> np.ndarray:
        return ((leaves[idx] / low) ** -0.4).astype(np.float32)

    def sample_floor() -> tuple[dict[str, np.ndarray], np.ndarray]:
        i = np.searchsorted(prefix, values(), side="right")
        np.minimum(i, CAPACITY - 1, out=i)
        batch = {c: np.take(v, i, axis=0) for c, v in cols.items()}
        batch["weights"] = ((leaves[i] / low) ** -0.4).astype(np.float32)
        return batch, i

    prio = np.empty(CAPACITY)
    head = [0]

    def add_floor(rows: dict[str, np.ndarray]) -> None:
        start = ring.head
        ring.add(rows)
        prio[start : start + len(rows["obs"])] = 1.0  # (no wrap: 256 divides nothing here)

    it = iter(range(10**9))
    cases: dict[str, tuple[str, Callable[[], object]]] = {
        "ring sample (baseline)": ("sample", lambda: ring.sample(BATCH)),
        "floor sample: values + 1 searchsorted + gathers + weights": ("sample", sample_floor),
        "  part: stratified values": ("part", values),
        "  part: searchsorted on a current prefix sum": (
            "part",
            lambda: np.searchsorted(prefix, vals, side="right"),
        ),
        "  part: column gathers": ("part", gathers),
        "  part: importance weights": ("part", weights),
        "  upkeep: np.cumsum of all priorities (flat prefix sum)": (
            "part",
            lambda: np.cumsum(leaves, out=prefix),
        ),
        "rlmod PrioritizedReplayBuffer.sample": ("sample", lambda: per.sample(BATCH, beta=0.4)),
        "  part: SumTree.find": ("part", lambda: per.tree.find(vals)),
        "ring add (baseline)": ("add", lambda: ring.add(data[next(it) % 16])),
        "floor add: ring copies + 1 priority slice": (
            "add",
            lambda: add_floor(data[next(it) % 16]),
        ),
        "rlmod PrioritizedReplayBuffer.add": ("add", lambda: per.add(data[next(it) % 16])),
    }
    del head
    best: dict[str, float] = {}
    for r in range(args.rounds):
        names = list(cases) if r % 2 == 0 else list(reversed(cases))
        for name in names:
            fn = cases[name][1]
            start = time.process_time()
            for _ in range(args.calls):
                fn()
            us = (time.process_time() - start) / args.calls * 1e6
            best[name] = min(best.get(name, float("inf")), us)
        per.sample(BATCH)  # the adds' tree upkeep is paid inside their own timing
    base = {"sample": best["ring sample (baseline)"], "add": best["ring add (baseline)"]}
    rows = []
    for name, (kind, _) in cases.items():
        ref = base.get(kind)
        rows.append(
            {
                "what": name,
                "us per call (best)": f"{best[name]:.1f}",
                "throughput vs ring": f"{ref / best[name]:.2f}" if ref else "",
            }
        )
    table(rows, ["what", "us per call (best)", "throughput vs ring"])
    print(f"CPU time, best of {args.rounds} interleaved rounds of {args.calls} calls.")


if __name__ == "__main__":
    main()
