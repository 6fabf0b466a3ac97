"""Learner update throughput (agent rows/s) with many modules: stacked groups vs one
module at a time, at the same total rows.

A PPO Learner with N modules of one architecture (CartPole spaces, `fcnet_hiddens=[64, 64]`,
rlmod.tuned.FAST_PPO's 10 epochs of minibatches of 128) gets a synthetic batch of R rows,
R / N per module, and runs `update()` (GAE learner connector + SGD); the GAE share is
timed on its own too. Each case runs in this process, one torch thread, best of
`--repeats` updates after one warm-up update.

    python benchmarks/investigations/learner_stacking.py [--rows 64000] [--modules 10 1000]
        [--unstacked-modules 10 100] [--repeats 3]

`learner_update_rows_per_s(num_modules, total_rows, stack=...)` (a float) and
`learner_update_timings(...)` (a dict) are importable (e.g. by multi_module_scale.py).
"""

from __future__ import annotations

import argparse
import time

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import torch
from _common import header, table
from _stacked_setups import learner_update_timings, make_learner, synthetic_batch


def bucket_effect(
    num_modules: int = 1000,
    *,
    short: int = 5,
    long: int = 64,
    num_long: int = 2,
    epochs: int = 3,
    repeats: int = 3,
) -> dict[str, float]:
    """Seconds per update, stacked, when most modules have `short` rows and `num_long`
    have `long` (agents whose episodes ended early): padded whole (one bucket), against
    the buckets `row_buckets` picks (alternating, best of `repeats`)."""
    import rlmod.core.learner_stacks as learner_stacks

    learner, ids = make_learner(num_modules, stack=True)
    learner.config.__dict__["num_epochs"] = epochs  # a built config is frozen; a benchmark knob
    batch = synthetic_batch(ids, long)
    for mid in ids[num_long:]:
        batch[mid] = {c: v[:short].copy() for c, v in batch[mid].items()}
        batch[mid]["seq_ends"][-1] = batch[mid]["terminateds"][-1] = True
    learner.update(batch)
    default = learner_stacks.BUCKET_COST_SLOTS
    times: dict[str, list[float]] = {"whole": [], "buckets": []}
    try:
        for _ in range(repeats):
            for case, cost in (("whole", 2**40), ("buckets", default)):
                learner_stacks.BUCKET_COST_SLOTS = cost
                t = time.perf_counter()
                learner.update(batch)
                times[case].append(time.perf_counter() - t)
    finally:
        learner_stacks.BUCKET_COST_SLOTS = default
    return {k: min(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=64_000)
    parser.add_argument("--modules", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--unstacked-modules", type=int, nargs="*", default=[10, 100])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--uneven",
        action="store_true",
        help="also time 998 modules of 5 rows beside 2 of 64, padded whole vs in buckets",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    header("Learner update throughput: stacked groups vs one module at a time")
    print(
        f"{args.rows} rows in total, FAST_PPO (10 epochs, minibatch 128, [64, 64]), 1 torch thread"
    )
    cases = [(n, True) for n in args.modules] + [(n, False) for n in args.unstacked_modules]
    rows = []
    base = None
    for n, stack in cases:
        r = learner_update_timings(n, args.rows, stack=stack, repeats=args.repeats)
        if base is None:
            base = r["rows_per_s"]
        rows.append(
            {
                "modules": n,
                "stacked": stack,
                "groups": r["groups"],
                "rows": r["rows"],
                "update_s": f"{r['update_s']:.3f}",
                "gae_s": f"{r['gae_s']:.3f}",
                "rows/s": f"{r['rows_per_s']:,.0f}",
                "SGD rows/s": f"{r['sgd_rows_per_s']:,.0f}",
                "vs first": f"{r['rows_per_s'] / base:.2f}",
            }
        )
    table(
        rows,
        [
            "modules",
            "stacked",
            "groups",
            "rows",
            "update_s",
            "gae_s",
            "rows/s",
            "SGD rows/s",
            "vs first",
        ],
    )
    if args.uneven:
        r = bucket_effect(repeats=args.repeats)
        print(
            f"\n1,000 modules, 998 with 5 rows and 2 with 64, 3 epochs: padded whole "
            f"{r['whole']:.3f} s, in buckets {r['buckets']:.3f} s per update "
            f"({r['whole'] / r['buckets']:.2f}x)"
        )


if __name__ == "__main__":
    main()
