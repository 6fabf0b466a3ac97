"""Time to solve CartPole-v1 with 2 remote EnvRunners: rlmod against RLlib, from process start.

Solved = mean return >= 475 over the last 100 episodes. Every run is a fresh process timed
from spawn (interpreter start, imports and `ray.init()` included), one after the other:
rlmod in-process (`rlmod.tuned.TUNED["CartPole-v1"]`), rlmod with 2 remote EnvRunners (the
same settings, the 16 sub-envs split 8 + 8), and, with `--rllib-python`, RLlib's PPO with
2 EnvRunners and its tuned CartPole settings (rllib/examples/algorithms/ppo/cartpole_ppo.py:
lr 3e-4, 6 epochs, vf_loss_coeff 0.01, a shared 32-unit linear net) from a separate venv.

    flock /tmp/bench.lock python benchmarks/investigations/ray_solve_cartpole.py --seeds 0 \
        [--rllib-python /tmp/rllib-venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
from _common import header, table

RLMOD = r"""
import json, sys
from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED
seed, max_steps, runners = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
config = PPOConfig().environment("CartPole-v1").debugging(seed=seed)
for k, v in TUNED["CartPole-v1"].items():
    setattr(config, k, v)
if runners:
    config.env_runners(num_env_runners=runners,
                       num_envs_per_env_runner=config.num_envs_per_env_runner // runners)
algo = config.build_algo()
while True:
    r = algo.train()
    ret, steps = r["env_runners"]["episode_return_mean"], r["num_env_steps_sampled_lifetime"]
    if (r["num_episodes_lifetime"] >= 100 and ret >= 475) or steps >= max_steps:
        break
algo.stop()
print(json.dumps({"steps": steps, "return": ret, "solved": bool(ret >= 475)}))
"""

RLLIB = r"""
import json, sys
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
seed, max_steps, runners = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ray.init(include_dashboard=False, log_to_driver=False)
config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=runners)
          .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01)
          .rl_module(model_config=DefaultModelConfig(
              fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True))
          .debugging(seed=seed))
algo = config.build_algo()
while True:
    r = algo.train()
    er = r["env_runners"]
    ret = er.get("episode_return_mean", float("nan"))
    steps = r.get("num_env_steps_sampled_lifetime", er.get("num_env_steps_sampled_lifetime", 0))
    if ret >= 475 or steps >= max_steps:
        break
algo.stop()
print(json.dumps({"steps": int(steps), "return": float(ret), "solved": bool(ret >= 475)}))
"""


def run(python: str, code: str, *args: object) -> dict:
    start = time.perf_counter()
    out = subprocess.run([python, "-c", code, *map(str, args)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max-steps", type=int, default=500_000)
    parser.add_argument("--rllib-python", default=None)
    args = parser.parse_args()
    header("Time to solve CartPole-v1 (mean return >= 475 over 100 episodes), from process start")
    setups = [
        ("rlmod in-process", sys.executable, RLMOD, 0),
        ("rlmod, 2 remote EnvRunners", sys.executable, RLMOD, 2),
    ]
    if args.rllib_python:
        setups.append(("RLlib 2.60, 2 EnvRunners", args.rllib_python, RLLIB, 2))
    rows, walls = [], {}
    for seed in args.seeds:
        for name, python, code, runners in setups:
            r = run(python, code, seed, args.max_steps, runners)
            walls.setdefault(name, []).append(r["wall_s"])
            rows.append(
                {
                    "setup": name,
                    "seed": seed,
                    "solved": r["solved"],
                    "env steps": f"{r['steps']:,}",
                    "wall s": f"{r['wall_s']:.1f}",
                    "return": f"{r['return']:.1f}",
                }
            )
            print(rows[-1], flush=True)
    table(rows, ["setup", "seed", "solved", "env steps", "wall s", "return"])
    for name, w in walls.items():
        print(f"median wall s, {name}: {statistics.median(w):.1f}")
    if "RLlib 2.60, 2 EnvRunners" in walls:
        ratio = statistics.median(walls["rlmod, 2 remote EnvRunners"]) / statistics.median(
            walls["RLlib 2.60, 2 EnvRunners"]
        )
        print(f"ratio rlmod (2 remote) / RLlib (2 EnvRunners), median wall: {ratio:.2f}")


if __name__ == "__main__":
    main()
