"""Time to solve CartPole-v1 from process start: rlmod PPO vs Stable-Baselines3 PPO.

Solved: mean return >= 475 over the last 100 episodes. Each run is a fresh Python process
(imports included) timed by this parent; runs alternate between libraries so load hits
both alike. SB3 uses its tuned rl-baselines3-zoo CartPole-v1 hyperparameters; rlmod uses
`rlmod.tuned.TUNED["CartPole-v1"]` (what `rlmod train` uses).

    python benchmarks/solve_cartpole.py [--seeds 0 1 2] [--max-steps 500000]
        [--compare-tree /tmp/before]  # also rlmod TUNED from another checkout, same run
        [--source-imports]  # do not byte-compile the rlmod trees first (see below)

Bytecode: torch, gymnasium and SB3 load from the .pyc files pip wrote at install. Each
rlmod tree is byte-compiled first (`compileall`, into its own __pycache__), so that its
modules load the same way; without that, in a shell with PYTHONDONTWRITEBYTECODE=1 (as
this project's sandbox sets), every rlmod process compiled its ~75 modules from source
(0.11 s more than from bytecode on the 2-core Xeon, 2026-12-05).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _common import TRAIN_UNTIL, header, run_timed, summary, table

SB3 = r"""
import json, sys
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
seed, max_steps = int(sys.argv[1]), int(sys.argv[2])

def lin(v):
    return lambda progress: progress * v

class Solved(BaseCallback):
    def _on_step(self):
        buf = self.model.ep_info_buffer  # the last 100 episodes
        return not (len(buf) == 100 and np.mean([e["r"] for e in buf]) >= 475)

env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
# rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
            n_epochs=20, ent_coef=0.0, learning_rate=lin(0.001), clip_range=lin(0.2),
            seed=seed, verbose=0, device="cpu")
model.learn(total_timesteps=max_steps, callback=Solved())
buf = model.ep_info_buffer
ret = float(np.mean([e["r"] for e in buf]))
print(json.dumps({"steps": int(model.num_timesteps), "return": ret,
                  "reached": bool(len(buf) == 100 and ret >= 475)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=500_000)
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument(
        "--source-imports",
        action="store_true",
        help="do not byte-compile the rlmod trees first: with "
        "PYTHONDONTWRITEBYTECODE=1 each run then compiles rlmod from source",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="also run rlmod with these settings over TUNED['CartPole-v1'], "
        "e.g. 'lrdecay={\"lr\": [[0, 0.001], [100000, 0.0]]}' (repeatable)",
    )
    parser.add_argument(
        "--compare-tree",
        action="append",
        default=[],
        metavar="DIR",
        help="also run rlmod TUNED from this checkout (on PYTHONPATH), in "
        "the same alternating loop, e.g. a `git worktree` of the commit "
        "before a change (repeatable)",
    )
    args = parser.parse_args()
    header("Time to solve CartPole-v1 (mean return >= 475 over 100 episodes), from process start")
    # name -> (code, arguments before seed and max steps, arguments after them, PYTHONPATH)
    libs: dict[str, tuple[str, tuple, tuple, str | None]] = {}
    for tree in args.compare_tree:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=tree
        ).stdout.strip() or os.path.basename(tree)
        libs[f"rlmod@{rev}"] = (TRAIN_UNTIL, ("CartPole-v1", 475), (), os.path.abspath(tree))
    # This checkout's rlmod, whatever PYTHONPATH the parent had (an installed rlmod may be
    # another checkout's).
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libs["rlmod"] = (TRAIN_UNTIL, ("CartPole-v1", 475), (), here)
    for variant in args.variant:
        name, _, settings = variant.partition("=")
        json.loads(settings)  # fail here, not in every child process
        libs[f"rlmod {name}"] = (TRAIN_UNTIL, ("CartPole-v1", 475), (settings,), here)
    if not args.skip_sb3:
        libs["stable-baselines3"] = (SB3, (), (), None)
    if not args.source_imports:
        for tree in sorted({t for _, _, _, t in libs.values() if t is not None}):
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", os.path.join(tree, "rlmod")], check=True
            )
    print(
        "rlmod imports: "
        + ("from source" if args.source_imports else "from bytecode (trees byte-compiled first)")
    )
    results: dict[str, list[dict]] = {name: [] for name in libs}
    rows = []
    for seed in args.seeds:
        for name, (code, lead, tail, tree) in libs.items():
            r = run_timed(code, *lead, seed, args.max_steps, *tail, pythonpath=tree)
            results[name].append(r)
            rows.append(
                {
                    "library": name,
                    "seed": seed,
                    "solved": r["reached"],
                    "env steps": f"{r['steps']:,}",
                    "wall s": f"{r['wall_s']:.2f}",
                    "cpu s": f"{r['cpu_s']:.2f}",
                    "return": f"{r['return']:.1f}",
                }
            )
    table(rows, ["library", "seed", "solved", "env steps", "wall s", "cpu s", "return"])
    medians = {n: statistics.median(r["wall_s"] for r in rs) for n, rs in results.items()}
    cpus = {n: statistics.median(r["cpu_s"] for r in rs) for n, rs in results.items()}
    steps = {n: statistics.median(r["steps"] for r in rs) for n, rs in results.items()}
    for name, med in medians.items():
        print(
            f"median wall s, {name}: {med:.2f}; median CPU s: {cpus[name]:.2f}; "
            f"median env steps: {steps[name]:,.0f}"
        )
    if "stable-baselines3" in medians:
        sb3 = "stable-baselines3"
        for name in (n for n in libs if n.startswith("rlmod") and " " not in n):
            print(
                f"ratio {name} / SB3: median wall {medians[name] / medians[sb3]:.3f}, "
                f"median CPU {cpus[name] / cpus[sb3]:.3f}, "
                f"median env steps {steps[name] / steps[sb3]:.2f}"
            )
    try:
        import ray  # noqa: F401

        print("RLlib: installed but not run by this script")
    except ImportError:
        print("RLlib: not installed here (no side-by-side RLlib number)")
    sb3 = medians.get("stable-baselines3")
    solved = sum(r["reached"] for r in results["rlmod"])
    summary(
        f"CartPole-v1 solve (475), median wall s from process start, {len(args.seeds)} seeds",
        rlmod=f"{medians['rlmod']:.1f} ({solved}/{len(args.seeds)} solved, "
        f"{steps['rlmod']:,.0f} env steps)",
        peer="-" if sb3 is None else f"SB3 {sb3:.1f} ({steps['stable-baselines3']:,.0f} env steps)",
        ratio="-" if sb3 is None else f"{medians['rlmod'] / sb3:.2f} of SB3",
    )


if __name__ == "__main__":
    main()
