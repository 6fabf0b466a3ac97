"""DQN and SAC against Stable-Baselines3 with rl-baselines3-zoo's settings, in one run.

Each run is a fresh process (interpreter start and imports included in the wall time),
one after the other, never two at once; the CPU time of each process is reported beside
its wall time, since on a shared machine it moves far less with the other load:
- DQN, CartPole-v1, until a greedy evaluation (10 episodes, every 2,560 env steps) has a
  mean >= 475 (the zoo's criterion). rlmod: `rlmod.tuned.TUNED_DQN`; SB3: the zoo's DQN
  hyperparameters for CartPole-v1.
- SAC, Pendulum-v1, until the mean return of the last 10 training episodes is >= -200.
  rlmod: `rlmod.tuned.TUNED_SAC`; SB3: the zoo's SAC entry (lr 1e-3, SB3's defaults).

    python benchmarks/off_policy.py [--seeds 0 1 2] [--only dqn sac] [--base-tree DIR]

`--base-tree DIR` adds a row for the rlmod of another checkout (e.g. a `git worktree` of
the base commit), run with `PYTHONPATH=DIR` beside the others: before and after in one run.
"""

from __future__ import annotations

import argparse
import statistics

from _common import header, run_timed, summary, table

RLMOD_DQN = r"""
import json, sys
from rlmod.algorithms.dqn import DQNConfig
from rlmod.tuned import TUNED_DQN
seed, max_steps = int(sys.argv[1]), int(sys.argv[2])
config = DQNConfig().environment("CartPole-v1").debugging(seed=seed).evaluation(
    evaluation_duration=10, evaluation_config=DQNConfig.overrides(explore=False))
# One fragment (256 steps) per train(), so the check below runs every 2560 steps as SB3's.
config.reporting(min_sample_timesteps_per_iteration=0)
for k, v in TUNED_DQN["CartPole-v1"].items():
    setattr(config, k, v)
algo = config.build_algo()
steps, best = 0, 0.0
while steps < max_steps and best < 475:
    steps = algo.train()["num_env_steps_sampled_lifetime"]
    if steps % 2560 == 0:
        best = algo.evaluate()["env_runners"]["episode_return_mean"]
print(json.dumps({"steps": steps, "reached": bool(best >= 475)}))
"""

SB3_DQN = r"""
import json, sys
import gymnasium as gym, torch
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
torch.set_num_threads(1)
seed, max_steps = int(sys.argv[1]), int(sys.argv[2])

class Stop(BaseCallback):
    def __init__(self):
        super().__init__()
        self.eval_env, self.reached = gym.make("CartPole-v1"), False
    def _on_step(self):
        if self.num_timesteps % 2560 == 0:
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=10)
            self.reached = mean >= 475
        return not self.reached

model = DQN("MlpPolicy", "CartPole-v1", learning_rate=2.3e-3, batch_size=64,
            buffer_size=100_000, learning_starts=1000, gamma=0.99, target_update_interval=10,
            train_freq=256, gradient_steps=128, exploration_fraction=0.16,
            exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]), seed=seed)
cb = Stop()
model.learn(max_steps, callback=cb)
print(json.dumps({"steps": model.num_timesteps, "reached": bool(cb.reached)}))
"""

RLMOD_SAC = r"""
import json, sys
from rlmod.algorithms.sac import SACConfig
from rlmod.tuned import TUNED_SAC
seed, max_steps = int(sys.argv[1]), int(sys.argv[2])
# One fragment per train() (not RLlib's 100 steps / 1 s): the stop is checked every step.
config = SACConfig().environment("Pendulum-v1").debugging(seed=seed).reporting(
    metrics_num_episodes_for_smoothing=10, min_sample_timesteps_per_iteration=0,
    min_time_s_per_iteration=None)
for k, v in TUNED_SAC["Pendulum-v1"].items():
    setattr(config, k, v)
algo = config.build_algo()
while True:
    r = algo.train()
    steps = r["num_env_steps_sampled_lifetime"]
    reached = r["num_episodes_lifetime"] >= 10 and r["env_runners"]["episode_return_mean"] >= -200
    if reached or steps >= max_steps:
        break
print(json.dumps({"steps": steps, "reached": bool(reached)}))
"""

SB3_SAC = r"""
import json, sys
import numpy as np, torch
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
torch.set_num_threads(1)
seed, max_steps = int(sys.argv[1]), int(sys.argv[2])

class Stop(BaseCallback):
    reached = False
    def _on_step(self):
        buf = self.model.ep_info_buffer
        if len(buf) >= 10 and any(self.locals["dones"]):
            self.reached = np.mean([e["r"] for e in list(buf)[-10:]]) >= -200
        return not self.reached

model = SAC("MlpPolicy", "Pendulum-v1", learning_rate=1e-3, seed=seed)
cb = Stop()
model.learn(max_steps, callback=cb)
print(json.dumps({"steps": model.num_timesteps, "reached": bool(cb.reached)}))
"""

TASKS = {
    "dqn": ("DQN, CartPole-v1, greedy eval >= 475", RLMOD_DQN, SB3_DQN, 60_000),
    "sac": ("SAC, Pendulum-v1, last-10 mean >= -200", RLMOD_SAC, SB3_SAC, 20_000),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument(
        "--base-tree",
        default=None,
        help="another checkout whose rlmod gets its own row ('rlmod base')",
    )
    args = parser.parse_args()
    header(
        "Off-policy: rlmod vs Stable-Baselines3 (rl-baselines3-zoo settings), one process "
        "per run, interleaved"
    )
    rows = []
    cells: dict[str, list[str]] = {"rlmod": [], "peer": [], "ratio": []}
    for task in args.only:
        title, ours_code, sb3_code, max_steps = TASKS[task]
        runs: dict[str, list[dict]] = {"rlmod": [], "sb3": []}
        who_code: list[tuple[str, str, str | None]] = [
            ("rlmod", ours_code, None),
            ("sb3", sb3_code, None),
        ]
        if args.base_tree:
            runs["rlmod base"] = []
            who_code.append(("rlmod base", ours_code, args.base_tree))
        for seed in args.seeds:
            for who, code, tree in who_code:
                out = run_timed(code, seed, max_steps, pythonpath=tree)
                runs[who].append(out)
                print(f"{task} {who} seed {seed}: {out}", flush=True)
        med = {
            w: {k: statistics.median(r[k] for r in rs) for k in ("steps", "wall_s", "cpu_s")}
            for w, rs in runs.items()
        }
        ours, sb3 = med["rlmod"], med["sb3"]
        reached = sum(r["reached"] for r in runs["rlmod"])
        cells["rlmod"].append(
            f"{task.upper()} {ours['wall_s']:.1f} ({reached}/{len(args.seeds)}, "
            f"{ours['steps']:,.0f} env steps)"
        )
        cells["peer"].append(f"{task.upper()} {sb3['wall_s']:.1f} ({sb3['steps']:,.0f})")
        cells["ratio"].append(f"{task.upper()} {ours['wall_s'] / sb3['wall_s']:.2f}")
        for who, rs in runs.items():
            m, sb3 = med[who], med["sb3"]
            rows.append(
                {
                    "task": title,
                    "library": who,
                    "reached": f"{sum(r['reached'] for r in rs)}/{len(rs)}",
                    "env steps (median)": f"{m['steps']:,.0f}",
                    "wall s (median)": f"{m['wall_s']:.1f}",
                    "wall vs SB3": f"{m['wall_s'] / sb3['wall_s']:.2f}",
                    "CPU s (median)": f"{m['cpu_s']:.1f}",
                    "CPU vs SB3": f"{m['cpu_s'] / sb3['cpu_s']:.2f}",
                }
            )
    table(
        rows,
        [
            "task",
            "library",
            "reached",
            "env steps (median)",
            "wall s (median)",
            "wall vs SB3",
            "CPU s (median)",
            "CPU vs SB3",
        ],
    )
    summary(
        "off-policy: DQN CartPole-v1 (greedy eval 475) / SAC Pendulum-v1 (-200), median wall "
        "s from process start",
        rlmod="; ".join(cells["rlmod"]),
        peer="SB3 " + "; ".join(cells["peer"]),
        ratio="; ".join(cells["ratio"]) + " of SB3",
    )


if __name__ == "__main__":
    main()
