"""Stacked against unstacked `train()`: the default (`stack_modules=True`, groups of at least
rlmod.core.stacked.MIN_STACK_SIZE) must be within 5% of the faster of the two at every
point, and within 20% with a CPU-bound torch process running on each core (`--busy`).

MultiAgentCartPole with 2 agents per module, PPO's defaults except `num_epochs`; each
case is a fresh child process that builds the Algorithm, runs one untimed `train()`
(first-call costs) and times the second; default and unstacked alternate in each round and
share its seed (round r: `seed=r`), so both train on the same batches, and each is given as
its mean over the rounds (the same seeds for both). A batch's rows vary a lot with the seed
at 1,000 modules (one agent each: a call late in the env's episode has few agents alive, 20x
fewer rows at seed 0), so the least of a few unseeded rounds compared batch sizes more than
layouts.
From 1,000 modules on (`--small-from`), one agent per module and a 64-env-step batch
(64 rows per module, one minibatch): PPO's 4,000-env-step default there is 8 million agent steps.

    python benchmarks/stacking_default.py [--modules 2 10 100 1000] [--epochs 1 5 30]
        [--rounds 2] [--busy]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _common import header, summary, table

CHILD = r"""
import sys, time
from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole
stack, m, epochs, small = sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
seed = int(sys.argv[5])
config = (
    PPOConfig()
    .environment(MultiAgentCartPole, env_config={"num_agents": m if small else 2 * m})
    .multi_agent(
        policies={f"p{i}" for i in range(m)},
        policy_mapping_fn=lambda aid, ep, m=m, **kw: f"p{aid % m}",
        stack_modules=stack,
    )
    .training(num_epochs=epochs)
    .debugging(seed=seed)
)
if small:
    config.training(train_batch_size=64, minibatch_size=64)
algo = config.build_algo()
algo.train()
start = time.perf_counter()
algo.train()
print(time.perf_counter() - start)
"""

HOG = "import torch\ntorch.set_num_threads(1)\na = torch.randn(256, 256)\nwhile True: a = torch.tanh(a @ a)"


def timed(stack: bool, modules: int, epochs: int, small: bool, seed: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, (int(stack), modules, epochs, int(small), seed))],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--modules", type=int, nargs="+", default=[2, 10, 100])
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 5, 30])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--small-from", type=int, default=1000, help="modules from which batches are small"
    )
    parser.add_argument("--busy", action="store_true", help="a CPU-bound process per core")
    args = parser.parse_args()
    header("Stacked vs unstacked train(): the default against the faster of the two")
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)] if args.busy else []
    rows, worst = [], 0.0
    try:
        for m in args.modules:
            for epochs in args.epochs:
                times: dict[bool, list[float]] = {True: [], False: []}
                for r in range(args.rounds):
                    for stack in (True, False) if r % 2 == 0 else (False, True):
                        times[stack].append(timed(stack, m, epochs, m >= args.small_from, seed=r))
                default, alone = (sum(times[s]) / args.rounds for s in (True, False))
                ratio = default / min(default, alone)
                worst = max(worst, ratio)
                print(f"{m} modules, {epochs} epochs: {times}", file=sys.stderr, flush=True)
                rows.append(
                    {
                        "modules": f"{m}*" if m >= args.small_from else m,
                        "epochs": epochs,
                        "default s": f"{default:.2f}",
                        "unstacked s": f"{alone:.2f}",
                        "default / faster": f"{ratio:.2f}",
                    }
                )
    finally:
        for hog in hogs:
            hog.kill()
    load = "beside 2 CPU-bound processes" if args.busy else "quiet"
    table(rows, ["modules", "epochs", "default s", "unstacked s", "default / faster"])
    print(
        f"second train(), mean of {args.rounds} rounds (seeds 0..{args.rounds - 1}), {load}; target <= "
        f"{1.20 if args.busy else 1.05}; *: one agent per module, 64-env-step batches"
    )
    summary(
        "stacked vs unstacked train(), the default against the faster",
        rlmod=f"default, worst point {worst:.2f} of the faster",
        peer="-",
        limit="the faster of stacked / unstacked",
        ratio=f"{worst:.2f}",
    )


if __name__ == "__main__":
    main()
