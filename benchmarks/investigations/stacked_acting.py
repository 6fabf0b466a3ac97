"""Issue 17's sampling ratio, taken apart: where 1,000 modules cost more than 10 when the same
1,000 MultiAgentCartPole agents sample in the same envs, and the floor of that ratio.

    python benchmarks/investigations/stacked_acting.py [--envs 32] [--rounds 6] [--steps 10]

Two MultiAgentEnvRunners (agents mapped to 10 and to 1,000 modules, one stacked group each)
sample in alternating rounds, as in benchmarks/multi_module_scale.py's issue-17 child. Each
round records the time of the whole `sample()` call and of the group's acting forward in it
(the only part whose work depends on the module count), and keeps each forward's inputs. Then
the recorded forwards are replayed (same rows, same row-to-module indices) through both ways
to run them: the vmap plain path (`StackedGroup.call_rows`) and StackedActing's padded
layout. The floor: the ratio the runner would reach if its forwards cost what the best of
two replays costs and everything else stayed as measured.
"""

from __future__ import annotations

import argparse
import time

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import numpy as np
import torch
from _common import commit, table
from _stacked_setups import make_runner

from rlmod.core.stacked import StackedGroup
from rlmod.env import MultiAgentEnvRunner


def group_of(runner: MultiAgentEnvRunner) -> StackedGroup:
    [group] = [g.stacked for g in runner._groups.groups if g.stacked is not None]
    return group


def record_forwards(group: StackedGroup) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """Makes `group` keep each acting forward's inputs and seconds in the returned list
    (`del group.forward_exploration` restores the class's own)."""
    calls: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    original = group.forward_exploration

    def timed(obs: torch.Tensor, index: torch.Tensor) -> dict:
        t = time.perf_counter()
        out = original(obs, index)
        calls.append((obs, index, time.perf_counter() - t))
        return out

    group.forward_exploration = timed  # type: ignore[method-assign]
    return calls


def replay(group: StackedGroup, calls: list, how: str) -> list[float]:
    """Seconds per recorded forward, run `how`: "vmap" (the plain path) or "padded"
    (StackedActing)."""
    out = []
    with torch.inference_mode():
        for obs, index, _ in calls:
            t = time.perf_counter()
            if how == "vmap":
                group.call_rows("forward_exploration", {"obs": obs}, index)
            else:
                group.forward_exploration(obs, index)
            out.append(time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10, help="env steps per env per call")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = (10, 1000)
    # One thread throughout, so recorded and replayed forwards compare.
    runners = {m: make_runner(m, args.envs, args.steps, threads=1) for m in sizes}
    groups = {m: group_of(r) for m, r in runners.items()}
    calls = {m: record_forwards(g) for m, g in groups.items()}  # inputs and time
    total = {m: [] for m in sizes}
    fwd = {m: [] for m in sizes}
    steps = {m: 0 for m in sizes}
    for _ in range(args.rounds):  # alternating: the machine's speed drifts
        for m, r in runners.items():
            before = len(calls[m])
            t = time.perf_counter()
            r.sample(num_timesteps=args.envs * args.steps)
            total[m].append(time.perf_counter() - t)
            fwd[m].append(sum(s for *_, s in calls[m][before:]))
            steps[m] += r.get_metrics()["num_agent_steps"]
    rate = {m: steps[m] / sum(total[m]) for m in sizes}
    rows = []
    for m in sizes:
        rows.append(
            {
                "modules": m,
                "agent steps/s": f"{rate[m]:,.0f}",
                "sample() s": f"{sum(total[m]):.2f}",
                "of it acting forward s": f"{sum(fwd[m]):.2f}",
                "forward calls": len(calls[m]),
                "rows per call": f"{np.mean([len(i) for _, i, _ in calls[m]]):,.0f}",
            }
        )
    table(
        rows,
        [
            "modules",
            "agent steps/s",
            "sample() s",
            "of it acting forward s",
            "forward calls",
            "rows per call",
        ],
    )
    ratio = rate[1000] / rate[10]
    print(f"\nsampling ratio 1,000 vs 10 modules: {ratio:.2f} (target >= 0.8)")

    for g in groups.values():
        del g.forward_exploration  # the class's own again
    # Replay the 1,000-module forwards every way (same rows), and the 10-module ones.
    ways = ("vmap", "padded")
    replayed = {(m, w): np.array(replay(groups[m], calls[m], w)) for m in sizes for w in ways}
    replayed = {
        k: np.minimum(v, np.array(replay(groups[k[0]], calls[k[0]], k[1])))
        for k, v in replayed.items()
    }  # best of two replays per call
    print("\nForward per call, replayed (ms, mean over the recorded calls):\n")
    table(
        [
            {
                "modules": m,
                **{w: f"{1e3 * replayed[(m, w)].mean():.2f}" for w in ways},
            }
            for m in sizes
        ],
        ["modules", *ways],
    )
    # Floor: everything but the forward as measured; forwards as replayed.
    rest = {m: sum(total[m]) - sum(fwd[m]) for m in sizes}
    n = {m: len(calls[m]) for m in sizes}
    per_call = {m: sum(fwd[m]) / n[m] for m in sizes}
    best = {m: replayed[(m, "padded")].mean() for m in sizes}
    floor = (steps[1000] / (rest[1000] + n[1000] * best[1000])) / (
        steps[10] / (rest[10] + n[10] * min(best[10], per_call[10]))
    )
    print(
        f"\nEverything but the forward: {rest[10]:.2f} s (10 modules) vs {rest[1000]:.2f} s "
        f"(1,000). Ratio with each runner's forward as replayed: {floor:.2f}.\ncommit {commit()}, {args.envs} envs, {args.rounds} "
        f"alternating rounds of sample() calls of {args.steps} env steps per env, "
        "one thread."
    )


if __name__ == "__main__":
    main()
