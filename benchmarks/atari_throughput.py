"""ALE at 84x84x4 with the Nature CNN and 8 envs: env steps per second of the whole PPO loop
(sampling and updates) in rlmod and Stable-Baselines3 at equal settings, and the memory each
keeps per stored step.

Both libraries step the same envs: `rlmod.env.wrappers.atari_wrappers.make_atari_env`
(gymnasium's AtariPreprocessing: no-op starts, 4 frames skipped and max-pooled, 84x84
grayscale; 4 frames stacked; uint8), 8 copies in a gymnasium SyncVectorEnv (rlmod) or an
SB3 DummyVecEnv (SB3 moves the frames channels-first itself). Both train the same network,
`rlmod.tuned.TUNED[game]`'s: the Nature CNN's three convolutions shared by a policy and a
value head of one 512-unit ReLU layer each (SB3: a conv-only `BaseFeaturesExtractor` and
`net_arch=dict(pi=[512], vf=[512])`), with CleanRL's ppo_atari.py settings: 128 steps per
env per iteration, 4 epochs of minibatches of 256, the same torch thread count (`--threads`,
default 1, rlmod's default; `--threads 1 2` runs both libraries at each and compares each
at its faster count). Each library runs in a fresh process;
the figure is env steps over the wall time of its training calls (rlmod's `train()` calls,
SB3's `learn()`), construction excluded, the first iteration included for both.

Memory per stored step: the bytes each library holds for one env step of the rollout it
trains on, all columns (rlmod: its EnvRunner's step buffer; SB3: its RolloutBuffer), and
the observation's share of it.

CleanRL's ppo_atari.py is not vendored: pass `--cleanrl-script PATH` to a copy of it and it
runs beside the others at each thread count (its defaults are these settings; its envs are
its own, `PongNoFrameskip-v4` with SB3-style Atari wrappers and gymnasium's resize,
grayscale and frame stack). It needs `tyro`; `--cleanrl-pythonpath DIR` puts DIR on its
PYTHONPATH alone. Its last "SPS" line is its figure; without the script, no CleanRL row.
On gymnasium 1.x the script needs three edits (register ale_py's envs;
`GrayScaleObservation` -> `GrayscaleObservation`; `FrameStack` -> `FrameStackObservation`).

    python benchmarks/atari_throughput.py [--game ALE/Pong-v5] [--env-steps 8192]
        [--seeds 0] [--threads 1 2] [--cleanrl-script PATH] [--cleanrl-pythonpath DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from _common import header, run_timed, summary, table

RLMOD = r"""
import json, sys, time
from rlmod.algorithms.ppo import PPOConfig
from rlmod.env.wrappers.atari_wrappers import make_atari_env
from rlmod.tuned import TUNED
game, seed, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = PPOConfig().environment(
    make_atari_env, env_config={"id": game, "dim": 84, "framestack": 4}
).debugging(seed=seed)
for k, v in {**TUNED[game], "num_threads_per_learner": threads}.items():
    setattr(config, k, v)
algo = config.build_algo()
done, train_s = 0, 0.0
while done < steps:
    start = time.perf_counter()
    r = algo.train()
    train_s += time.perf_counter() - start
    done = r["num_env_steps_sampled_lifetime"]
arrays = algo.env_runner._buffer._arrays  # [T, N, ...] per column
obs = arrays["obs"]
per_step = sum(a.nbytes / (a.shape[0] * a.shape[1]) for a in arrays.values())
print(json.dumps({"steps": done, "train_s": train_s, "bytes_per_step": per_step,
                  "obs_bytes_per_step": obs.nbytes / (obs.shape[0] * obs.shape[1]),
                  "obs_dtype": str(obs.dtype)}))
"""

SB3 = r"""
import json, sys, time
import torch
from torch import nn
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from rlmod.env.wrappers.atari_wrappers import make_atari_env
from rlmod.tuned import TUNED
game, seed, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
tuned = TUNED[game]
n = tuned["num_envs_per_env_runner"]
(hidden,) = tuned["model_config"]["head_fcnet_hiddens"]


class NatureConv(BaseFeaturesExtractor):
    # the Nature CNN's convolutions, flattened (3,136 features): rlmod's 84x84 encoder
    def __init__(self, space):
        super().__init__(space, features_dim=64 * 7 * 7)
        c = space.shape[0]  # SB3 hands images over channels-first
        self.cnn = nn.Sequential(
            nn.Conv2d(c, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten())

    def forward(self, obs):
        return self.cnn(obs)


def make(i):
    return lambda: make_atari_env({"id": game, "dim": 84, "framestack": 4})


venv = DummyVecEnv([make(i) for i in range(n)])
venv.seed(seed)
model = PPO(
    "CnnPolicy", venv, n_steps=tuned["train_batch_size"] // n,
    batch_size=tuned["minibatch_size"], n_epochs=tuned["num_epochs"],
    learning_rate=tuned["lr"][0][1], gamma=tuned["gamma"], gae_lambda=tuned["lambda_"],
    clip_range=tuned["clip_param"], ent_coef=tuned["entropy_coeff"],
    vf_coef=tuned["vf_loss_coeff"], max_grad_norm=tuned["grad_clip"],
    policy_kwargs=dict(features_extractor_class=NatureConv, activation_fn=nn.ReLU,
                       net_arch=dict(pi=[hidden], vf=[hidden])),
    seed=seed, device="cpu", verbose=0,
)
start = time.perf_counter()
model.learn(total_timesteps=steps)
train_s = time.perf_counter() - start
buf = model.rollout_buffer
rows = buf.buffer_size * buf.n_envs
names = ("observations", "actions", "rewards", "returns", "episode_starts", "values",
         "log_probs", "advantages")
print(json.dumps({"steps": int(model.num_timesteps), "train_s": train_s,
                  "bytes_per_step": sum(getattr(buf, k).nbytes for k in names) / rows,
                  "obs_bytes_per_step": buf.observations.nbytes / rows,
                  "obs_dtype": str(buf.observations.dtype)}))
"""


CLEANRL_BYTES_PER_STEP = 4 * (84 * 84 * 4) + 5 * 4
"""ppo_atari.py's storage per env step: float32 observations and float32 actions, log-probs,
rewards, dones and values (its `torch.zeros(...)` buffers)."""


def run_cleanrl(script: str, steps: int, seed: int, threads: int, pythonpath: str | None) -> dict:
    """CleanRL's ppo_atari.py at its own defaults (8 envs, 128 steps, 4 epochs of 4
    minibatches) for `steps` env steps, on `threads` torch threads (OMP_NUM_THREADS,
    which sets torch's default) in a scratch directory (it writes TensorBoard runs/);
    `pythonpath` is prepended for it alone (e.g. where `tyro` was installed). Its
    figure is its last "SPS" line: env steps over the wall time of its training loop,
    construction excluded, as the other libraries' figures."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        out = subprocess.run(
            [sys.executable, os.path.abspath(script), "--num-envs", "8",
             "--total-timesteps", str(steps), "--seed", str(seed),
             "--env-id", "PongNoFrameskip-v4"],
            capture_output=True, text=True, env=env, cwd=scratch,
        )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{out.stderr[-2000:]}")
    sps = re.findall(r"SPS:\s*(\d+)", out.stdout)
    return {"steps": steps, "sps": float(sps[-1]), "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--game", default="ALE/Pong-v5")
    parser.add_argument("--env-steps", type=int, default=8192)
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1],
        help="torch threads of both libraries' runs, one pair of runs per count (rlmod's "
        "num_threads_per_learner, SB3's torch.set_num_threads); 1 is rlmod's default",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--cleanrl-script",
        default=None,
        metavar="PATH",
        help="a copy of CleanRL's ppo_atari.py, run at each thread count beside the others",
    )
    parser.add_argument(
        "--cleanrl-pythonpath",
        default=None,
        metavar="DIR",
        help="prepended to PYTHONPATH for the CleanRL runs only (where tyro is installed)",
    )
    args = parser.parse_args()
    header(f"{args.game} 84x84x4, Nature CNN, 8 envs: PPO env steps/s, {args.env_steps:,} steps")
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
            r = run_timed(code, args.game, seed, args.env_steps, *extra, pythonpath=here)
            r["sps"] = r["steps"] / r["train_s"]
            results[name].append(r)
            rows.append(
                {
                    "library": name,
                    "seed": seed,
                    "env steps": f"{r['steps']:,}",
                    "steps/s": f"{r['sps']:.0f}",
                    "bytes/step": f"{r['bytes_per_step']:,.0f}",
                    "obs bytes/step": f"{r['obs_bytes_per_step']:,.0f} ({r['obs_dtype']})",
                    "wall s": f"{r['wall_s']:.1f}",
                }
            )
        for t in args.threads if args.cleanrl_script else []:
            name = f"CleanRL, {t} thread{'s' if t != 1 else ''}"
            r = run_cleanrl(args.cleanrl_script, args.env_steps, seed, t, args.cleanrl_pythonpath)
            results.setdefault(name, []).append(r)
            rows.append(
                {
                    "library": f"{name} (ppo_atari.py)",
                    "seed": seed,
                    "env steps": f"{r['steps']:,}",
                    "steps/s": f"{r['sps']:.0f}",
                    "bytes/step": f"{CLEANRL_BYTES_PER_STEP:,}",
                    "obs bytes/step": f"{4 * 84 * 84 * 4:,} (float32)",
                    "wall s": f"{r['wall_s']:.1f}",
                }
            )
    table(
        rows, ["library", "seed", "env steps", "steps/s", "bytes/step", "obs bytes/step", "wall s"]
    )
    sps = {n: statistics.median(r["sps"] for r in rs) for n, rs in results.items()}
    for name, value in sps.items():
        print(f"median env steps/s, {name}: {value:.0f}")
    # each library at its fastest thread count
    best = max((n for n in libs if n.startswith("rlmod")), key=sps.__getitem__)
    sb3 = max((n for n in libs if n.startswith("SB3")), key=sps.__getitem__)
    ratio = sps[best] / sps[sb3]
    clean = max((n for n in sps if n.startswith("CleanRL")), key=sps.__getitem__, default=None)
    cleanrl = f"; {sps[best] / sps[clean]:.2f}x CleanRL" if clean else "; CleanRL not run"
    print(f"ratio {best} / {sb3}: {ratio:.2f} (target >= 2){cleanrl}")
    mem = {n: results[n][0]["bytes_per_step"] for n in libs}  # the same for every seed
    summary(
        f"{args.game} 84x84x4 Nature CNN, 8 envs, PPO loop env steps/s (median of "
        f"{len(args.seeds)}); bytes per stored step",
        rlmod=f"{best} {sps[best]:.0f}; {mem[best]:,.0f} B",
        peer=f"{sb3} {sps[sb3]:.0f}; {mem[sb3]:,.0f} B"
        + (f"; {clean} {sps[clean]:.0f}; {CLEANRL_BYTES_PER_STEP:,} B" if clean else ""),
        ratio=f"{ratio:.2f}x SB3{cleanrl}; memory {mem[best] / mem[sb3]:.2f} of SB3",
    )


if __name__ == "__main__":
    main()
