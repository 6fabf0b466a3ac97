"""MinAtar Breakout-v1: rlmod PPO against Stable-Baselines3 PPO, the same small CNN, the
same settings and the same env steps; mean return and wall time, median of the seeds.

The network is the MinAtar paper's (Young & Tian 2019), `rlmod.tuned.MINATAR_MODEL`: one
16-channel 3x3 convolution over the 10x10x4 boolean grid (8x8x16 = 1,024 features), shared
by the policy and the value head, each a 128-unit ReLU layer. SB3 gets the same layers as a
custom `BaseFeaturesExtractor` (the convolution, flattened in rlmod's (H, W, C) order) with `net_arch=dict(pi=[128],
vf=[128])`. Both use `rlmod.tuned.TUNED["MinAtar/Breakout-v1"]`: 8 envs x 128 steps, 4
epochs of minibatches of 256, lr 3e-4, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01,
value loss 0.5, gradient norm 0.5, no value clipping, and the same torch thread count
(`--threads`, default 1, rlmod's default; `--threads 1 2` runs both libraries at each and
compares each at its faster count). Each run is a fresh process timed from
spawn (imports included); runs alternate between the libraries so load hits both alike.
The return is the mean over the last 100 episodes (rlmod's `episode_return_mean` with a
100-episode window, SB3's `ep_info_buffer`).

    python benchmarks/minatar_vs_sb3.py [--seeds 0 1 2] [--env-steps 100000] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import os
import statistics

from _common import header, run_timed, summary, table

RLMOD = r"""
import json, sys
from rlmod.algorithms.ppo import PPOConfig
from rlmod.tuned import TUNED
env, seed, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = PPOConfig().environment(env).debugging(seed=seed)
settings = {"metrics_num_episodes_for_smoothing": 100, "num_threads_per_learner": threads}
for k, v in {**TUNED[env], **settings}.items():
    setattr(config, k, v)
algo = config.build_algo()
done = 0
while done < steps:
    r = algo.train()
    done = r["num_env_steps_sampled_lifetime"]
print(json.dumps({"steps": done, "return": r["env_runners"]["episode_return_mean"]}))
"""

SB3 = r"""
import json, sys
import gymnasium as gym
import numpy as np
import torch
from torch import nn
from minatar import gym as minatar_gym
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from rlmod.tuned import TUNED

env_id, seed, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
minatar_gym.register_envs()
tuned = TUNED[env_id]
(out, kernel, stride, _), = tuned["model_config"]["conv_filters"]
(hidden,) = tuned["model_config"]["head_fcnet_hiddens"]


class MinAtarCNN(BaseFeaturesExtractor):
    # rlmod's CNN encoder for the same filters: channels-last bool -> float, conv, ReLU,
    # flattened in (H, W, C) order as rlmod's (channels-last in memory throughout; an
    # nn.Flatten in (C, H, W) order would cost SB3 a layout conversion rlmod does not pay)
    def __init__(self, space):
        h, w, c = space.shape
        side = (h - kernel) // stride + 1
        super().__init__(space, features_dim=out * side * side)
        self.conv = nn.Sequential(nn.Conv2d(c, out, kernel, stride), nn.ReLU())

    def forward(self, obs):
        return self.conv(obs.permute(0, 3, 1, 2)).permute(0, 2, 3, 1).flatten(1)


venv = make_vec_env(env_id, n_envs=tuned["num_envs_per_env_runner"], seed=seed)
model = PPO(
    "MlpPolicy", venv,
    n_steps=tuned["train_batch_size"] // tuned["num_envs_per_env_runner"],
    batch_size=tuned["minibatch_size"], n_epochs=tuned["num_epochs"],
    learning_rate=tuned["lr"], gamma=tuned["gamma"], gae_lambda=tuned["lambda_"],
    clip_range=tuned["clip_param"], ent_coef=tuned["entropy_coeff"],
    vf_coef=tuned["vf_loss_coeff"], max_grad_norm=tuned["grad_clip"],
    policy_kwargs=dict(features_extractor_class=MinAtarCNN, activation_fn=nn.ReLU,
                       net_arch=dict(pi=[hidden], vf=[hidden])),
    seed=seed, device="cpu", verbose=0,
)
model.learn(total_timesteps=steps)
ret = float(np.mean([e["r"] for e in model.ep_info_buffer]))
print(json.dumps({"steps": int(model.num_timesteps), "return": ret}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="MinAtar/Breakout-v1")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1],
        help="torch threads of both libraries' runs, one pair of runs per count (rlmod's "
        "num_threads_per_learner, SB3's torch.set_num_threads); 1 is rlmod's default",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--env-steps", type=int, default=100_000)
    args = parser.parse_args()
    header(f"{args.env}: PPO, the same CNN and settings, {args.env_steps:,} env steps")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # this checkout first, then whatever else the parent's PYTHONPATH held
    here = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    libs: dict[str, tuple[str, tuple[int, ...]]] = {}
    for t in args.threads:
        suffix = f", {t} thread{'s' if t != 1 else ''}"
        libs[f"rlmod{suffix}"] = (RLMOD, (t,))
        libs[f"SB3{suffix}"] = (SB3, (t,))
    results: dict[str, list[dict]] = {name: [] for name in libs}
    rows = []
    for seed in args.seeds:
        for name, (code, extra) in libs.items():
            r = run_timed(code, args.env, seed, args.env_steps, *extra, pythonpath=here)
            results[name].append(r)
            rows.append(
                {
                    "library": name,
                    "seed": seed,
                    "env steps": f"{r['steps']:,}",
                    "return (last 100)": f"{r['return']:.2f}",
                    "wall s": f"{r['wall_s']:.1f}",
                    "cpu s": f"{r['cpu_s']:.1f}",
                }
            )
    table(rows, ["library", "seed", "env steps", "return (last 100)", "wall s", "cpu s"])
    ret = {n: statistics.median(r["return"] for r in rs) for n, rs in results.items()}
    wall = {n: statistics.median(r["wall_s"] for r in rs) for n, rs in results.items()}
    for name in libs:
        print(f"median return, {name}: {ret[name]:.2f}; median wall s: {wall[name]:.1f}")
    # each library at its fastest thread count
    best = min((n for n in libs if n.startswith("rlmod")), key=wall.__getitem__)
    sb3 = min((n for n in libs if n.startswith("SB3")), key=wall.__getitem__)
    print(
        f"ratio {best} / {sb3}: median wall {wall[best] / wall[sb3]:.2f}; median return "
        f"{ret[best]:.2f} vs {ret[sb3]:.2f} (target: return >= SB3's, wall <= 1/2)"
    )
    summary(
        f"{args.env} PPO, {args.env_steps:,} env steps, median of {len(args.seeds)} seeds: "
        "return / wall s",
        rlmod=f"{best} {ret[best]:.2f} / {wall[best]:.1f}",
        peer=f"{sb3} {ret[sb3]:.2f} / {wall[sb3]:.1f}",
        ratio=f"wall {wall[best] / wall[sb3]:.2f} of SB3",
    )


if __name__ == "__main__":
    main()
