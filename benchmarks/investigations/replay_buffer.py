"""Replay-buffer add and sample throughput (transitions/s) vs a plain numpy ring buffer.

The ring buffer does the same copies and nothing else: `add` writes each column into
preallocated arrays (wrapping at the end), `sample` draws uniform indices and gathers each
column with np.take. rlmod's buffers are timed on the same data in this process,
interleaved, best of `--repeats`: `ReplayBuffer` (uniform), `PrioritizedReplayBuffer`
(sum-tree: add sets max priorities, sample walks the tree and computes the importance
weights, then the TD errors update the priorities), and the full insertion path of
`MultiAgentReplayBuffer` (n-step collector, n=1 and n=3) for reference.

    python benchmarks/investigations/replay_buffer.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import numpy as np
from _common import header, table

from rlmod.core.columns import Columns
from rlmod.replay import MultiAgentReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer

CAPACITY, ADD_ROWS, BATCH, NUM_ADDS, NUM_SAMPLES = 100_000, 256, 256, 2_000, 2_000


class RingBuffer:
    """The baseline: preallocated columns, wrap-around writes, uniform gathers."""

    def __init__(self, capacity: int, example: dict[str, np.ndarray]) -> None:
        self.capacity, self.size, self.head = capacity, 0, 0
        self.cols = {c: np.empty((capacity, *v.shape[1:]), v.dtype) for c, v in example.items()}
        self.rng = np.random.default_rng(0)

    def add(self, rows: dict[str, np.ndarray]) -> None:
        n = len(rows[Columns.OBS])
        first = min(n, self.capacity - self.head)
        for c, v in rows.items():
            self.cols[c][self.head : self.head + first] = v[:first]
            self.cols[c][: n - first] = v[first:]
        self.head = (self.head + n) % self.capacity
        self.size = min(self.capacity, self.size + n)

    def sample(self, batch: int) -> dict[str, np.ndarray]:
        idx = self.rng.integers(0, self.size, batch)
        return {c: np.take(v, idx, axis=0) for c, v in self.cols.items()}


def transitions(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """CartPole-sized transitions as a buffer stores them."""
    return {
        Columns.OBS: rng.random((ADD_ROWS, 4), np.float32),
        Columns.ACTIONS: rng.integers(0, 2, ADD_ROWS),
        Columns.REWARDS: np.ones(ADD_ROWS, np.float32),
        Columns.NEXT_OBS: rng.random((ADD_ROWS, 4), np.float32),
        Columns.TERMINATEDS: rng.random(ADD_ROWS) < 0.02,
        "n_step": np.ones(ADD_ROWS, np.int32),
    }


def runner_batch(rng: np.random.Generator, start_eps: int) -> dict[str, np.ndarray]:
    """What an EnvRunner returns for 8 sub-envs x 32 steps (episodes of about 50 steps)."""
    t = transitions(rng)
    del t["n_step"]
    done = rng.random(ADD_ROWS) < 0.02
    t[Columns.TERMINATEDS] = done
    t[Columns.TRUNCATEDS] = np.zeros(ADD_ROWS, bool)
    t[Columns.EPS_ID] = start_eps + np.repeat(np.arange(8), 32) * 1000 + np.cumsum(done)
    return t


def timed(fn: Callable[[], object], repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return time.perf_counter() - start


def measure_once(
    rng: np.random.Generator,
    data: list[dict[str, np.ndarray]],
    record: Callable[[str, int, float], None],
) -> None:
    """One timed round of every operation."""
    ring = RingBuffer(CAPACITY, data[0])
    uni, per = ReplayBuffer(CAPACITY, seed=0), PrioritizedReplayBuffer(CAPACITY, seed=0)
    for name, buf in (("ring", ring), ("uniform", uni), ("prioritized", per)):
        it = iter(range(NUM_ADDS))
        record(
            f"{name} add",
            ADD_ROWS * NUM_ADDS,
            timed(lambda b=buf, i=it: b.add(data[next(i) % 16]), NUM_ADDS),
        )
    record("ring sample", BATCH * NUM_SAMPLES, timed(lambda: ring.sample(BATCH), NUM_SAMPLES))
    record("uniform sample", BATCH * NUM_SAMPLES, timed(lambda: uni.sample(BATCH), NUM_SAMPLES))
    td = rng.random(BATCH)

    def per_step() -> None:
        _, idx = per.sample(BATCH, beta=0.4)
        per.update_priorities(idx, td)

    record(
        "prioritized sample",
        BATCH * NUM_SAMPLES,
        timed(lambda: per.sample(BATCH, beta=0.4), NUM_SAMPLES),
    )
    record("prioritized sample+update", BATCH * NUM_SAMPLES, timed(per_step, NUM_SAMPLES))
    batches = [runner_batch(rng, 100_000 * i) for i in range(NUM_ADDS // 4)]
    for n in (1, 3):
        multi = MultiAgentReplayBuffer(
            replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": CAPACITY},
            n_step=lambda mid, n=n: (n, 0.99),
        )
        it = iter(batches)
        record(
            f"MultiAgentReplayBuffer add, n_step={n}",
            ADD_ROWS * len(batches),
            timed(lambda m=multi, i=it: m.add({"p": next(i)}), len(batches)),
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    header(f"Replay buffers: {ADD_ROWS}-row adds, {BATCH}-row samples, capacity {CAPACITY:,}")
    rng = np.random.default_rng(0)
    data = [transitions(rng) for _ in range(16)]
    best: dict[str, float] = {}

    def record(name: str, rows: int, seconds: float) -> None:
        best[name] = max(best.get(name, 0.0), rows / seconds)

    for _ in range(args.repeats):
        measure_once(rng, data, record)
    rows = []
    for op in ("add", "sample"):
        base = best[f"ring {op}"]
        rows.append(
            {
                "operation": op,
                "buffer": "numpy ring (baseline)",
                "transitions/s": f"{base:,.0f}",
                "ratio": "1.00",
            }
        )
        for name in ("uniform", "prioritized"):
            rate = best[f"{name} {op}"]
            rows.append(
                {
                    "operation": op,
                    "buffer": name,
                    "transitions/s": f"{rate:,.0f}",
                    "ratio": f"{rate / base:.2f}",
                }
            )
    rate = best["prioritized sample+update"]
    rows.append(
        {
            "operation": "sample + update_priorities",
            "buffer": "prioritized",
            "transitions/s": f"{rate:,.0f}",
            "ratio": f"{rate / best['ring sample']:.2f}",
        }
    )
    for n in (1, 3):
        rate = best[f"MultiAgentReplayBuffer add, n_step={n}"]
        rows.append(
            {
                "operation": f"add from EnvRunner batches, n_step={n}",
                "buffer": "MultiAgentReplayBuffer (uniform)",
                "transitions/s": f"{rate:,.0f}",
                "ratio": f"{rate / best['ring add']:.2f}",
            }
        )
    table(rows, ["operation", "buffer", "transitions/s", "ratio"])


if __name__ == "__main__":
    main()
