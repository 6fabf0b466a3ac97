"""Time to solve CartPole-v1 from process start: rlmod PPO vs Stable-Baselines3 PPO.

Solved: mean return >= 475 over the last 100 episodes. Each run is a fresh Python process
(imports included) timed by this parent; runs alternate between libraries so load hits
both alike. SB3 uses its tuned rl-baselines3-zoo CartPole-v1 hyperparameters; rlmod uses
`rlmod.tuned.TUNED["CartPole-v1"]` (what `rlmod train` uses).

    python benchmarks/solve_cartpole.py [--seeds 0 1 2] [--max-steps 500000]
"""

from __future__ import annotations

import argparse
import json
import statistics

from _common import TRAIN_UNTIL, header, run_timed, table

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
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                        help="also run rlmod with these settings over TUNED['CartPole-v1'], "
                        "e.g. 'lrdecay={\"lr\": [[0, 0.001], [100000, 0.0]]}' (repeatable)")
    args = parser.parse_args()
    header("Time to solve CartPole-v1 (mean return >= 475 over 100 episodes), from process start")
    # name -> (code, arguments before seed and max steps, arguments after them)
    libs: dict[str, tuple[str, tuple, tuple]] = {
        "rlmod": (TRAIN_UNTIL, ("CartPole-v1", 475), ())}
    for variant in args.variant:
        name, _, settings = variant.partition("=")
        json.loads(settings)  # fail here, not in every child process
        libs[f"rlmod {name}"] = (TRAIN_UNTIL, ("CartPole-v1", 475), (settings,))
    if not args.skip_sb3:
        libs["stable-baselines3"] = (SB3, (), ())
    results: dict[str, list[dict]] = {name: [] for name in libs}
    rows = []
    for seed in args.seeds:
        for name, (code, lead, tail) in libs.items():
            r = run_timed(code, *lead, seed, args.max_steps, *tail)
            results[name].append(r)
            rows.append({"library": name, "seed": seed, "solved": r["reached"],
                         "env steps": f"{r['steps']:,}", "wall s": f"{r['wall_s']:.1f}",
                         "return": f"{r['return']:.1f}"})
    table(rows, ["library", "seed", "solved", "env steps", "wall s", "return"])
    medians = {n: statistics.median(r["wall_s"] for r in rs) for n, rs in results.items()}
    for name, med in medians.items():
        print(f"median wall s, {name}: {med:.1f}")
    if "stable-baselines3" in medians:
        print(f"ratio rlmod / SB3 (median wall): {medians['rlmod'] / medians['stable-baselines3']:.2f}")
    try:
        import ray  # noqa: F401

        print("RLlib: installed but not run by this script")
    except ImportError:
        print("RLlib: not installed here (no side-by-side RLlib number)")


if __name__ == "__main__":
    main()
