"""Curiosity: PPO with and without a learner-only ICM on 12x12 FrozenLake and MountainCar-v0.

Each run is a fresh process of `examples/curiosity/inverse_dynamics_model_based_curiosity.py
--as-test`, timed by this parent from spawn to exit (imports included); with and without
curiosity alternate per seed so that load hits both alike. Budgets and goals are the
example's: FrozenLake episode_return_mean >= 0.9 within 70,000 env steps (RLlib 2.60 needed
70k steps and about 70 s on this task), MountainCar a mean above -200 within 150,000.
Targets: FrozenLake >= 4/5 seeds with curiosity and 0/5 without, at most ~14 s (1/5 of
RLlib's wall time) and 70k env steps; MountainCar >= 3/5 with, 0/5 without.

    python benchmarks/curiosity_frozenlake.py [--envs FrozenLake MountainCar] [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import header, summary, table

RLLIB_S = 70.0
"""RLlib 2.60's wall time on the FrozenLake task (issue 5, quoted, not run here)."""

EXAMPLE = (
    Path(__file__).resolve().parents[1]
    / "examples"
    / "curiosity"
    / "inverse_dynamics_model_based_curiosity.py"
)


def run_one(env: str, seed: int, curiosity: bool) -> dict:
    cmd = [
        sys.executable,
        str(EXAMPLE),
        "--env",
        env,
        "--seed",
        str(seed),
        "--as-test",
        "--quiet",
    ] + ([] if curiosity else ["--no-curiosity"])
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} printed no RESULT line:\n{proc.stderr[-2000:]}")
    out = json.loads(lines[-1][len("RESULT ") :])
    if (proc.returncode == 0) != out["reached"]:
        raise RuntimeError(f"--as-test exit code {proc.returncode} disagrees with {out}")
    return {
        "env": env,
        "seed": seed,
        "curiosity": "ICM" if curiosity else "none",
        "reached": "yes" if out["reached"] else "no",
        "env_steps": out["env_steps"],
        "wall_s": f"{wall:.1f}",
        "final_return_mean": f"{out['episode_return_mean']:.2f}",
        "budget_steps": out["stop_timesteps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["FrozenLake", "MountainCar"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    header("Curiosity (ICM) vs plain PPO, sparse rewards; wall time from process start")
    rows = []
    for env in args.envs:
        for seed in args.seeds:
            for curiosity in (True, False):
                rows.append(run_one(env, seed, curiosity))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    table(
        rows,
        [
            "env",
            "curiosity",
            "seed",
            "reached",
            "env_steps",
            "wall_s",
            "final_return_mean",
            "budget_steps",
        ],
    )
    print()
    for env in args.envs:
        for kind in ("ICM", "none"):
            mine = [r for r in rows if r["env"] == env and r["curiosity"] == kind]
            hits = [r for r in mine if r["reached"] == "yes"]
            line = f"{env} {kind}: {len(hits)}/{len(mine)} reached the goal"
            if hits:
                steps = sorted(r["env_steps"] for r in hits)
                walls = sorted(float(r["wall_s"]) for r in hits)
                line += (
                    f"; env steps {steps[0]}-{steps[-1]} (median {steps[len(steps) // 2]}),"
                    f" wall {walls[0]:.1f}-{walls[-1]:.1f} s (median "
                    f"{walls[len(walls) // 2]:.1f} s)"
                )
            print(line)
    env = args.envs[0]
    icm = [r for r in rows if r["env"] == env and r["curiosity"] == "ICM"]
    plain = [r for r in rows if r["env"] == env and r["curiosity"] == "none"]
    hits = [float(r["wall_s"]) for r in icm if r["reached"] == "yes"]
    wall = statistics.median(hits) if hits else None
    summary(
        f"curiosity: {env} goal reached, ICM vs plain PPO; median wall s of the ICM runs that "
        "reached it",
        rlmod=f"ICM {len(hits)}/{len(icm)}"
        + ("" if wall is None else f", {wall:.1f} s")
        + f" (plain PPO {sum(r['reached'] == 'yes' for r in plain)}/{len(plain)})",
        peer=f"RLlib 2.60 ~{RLLIB_S:.0f} s (quoted)" if env == "FrozenLake" else "-",
        ratio=f"{wall / RLLIB_S:.2f} of RLlib" if env == "FrozenLake" and wall else "-",
    )


if __name__ == "__main__":
    main()
