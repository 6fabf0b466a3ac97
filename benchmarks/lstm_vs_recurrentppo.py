"""Memory task: rlmod PPO with `use_lstm` vs sb3-contrib's RecurrentPPO on CartPole without
velocities (rlmod.testing.StatelessCartPole, rl-baselines3-zoo's CartPoleNoVel-v1).

Both train for the same env steps (the zoo's n_timesteps, 100k); each run is a fresh
Python process timed by this parent (imports included), libraries alternating per seed so
that load hits both alike. Reported per library: the mean return of the last 100 training
episodes at the end, and the wall time; the table gives the medians over the seeds and
rlmod's wall time as a fraction of RecurrentPPO's.

RecurrentPPO uses rl-baselines3-zoo's hyperparams/ppo_lstm.yml for CartPoleNoVel-v1 (8
envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, lambda 0.8, linear lr 1e-3 and clip
0.2, LSTM 64 with a critic LSTM, pi/vf [64], ReLU, no orthogonal init; `normalize: true`,
which the zoo turns into VecNormalize of observations and rewards with the algorithm's
gamma), on one torch thread as rlmod. rlmod runs the same settings where it has them: 8
envs, 256-step batches as one minibatch for 20 epochs, gamma 0.98, lambda 0.8, lr 1e-3
decayed linearly to 0, clip 0.2 (constant: rlmod has no clip schedule), an LSTM of 64 on the
observations (and, unlike RecurrentPPO, on the previous action: RLlib's
`lstm_use_prev_action`) followed by a 64-unit ReLU layer per head, the value function with
its own LSTM (`vf_share_layers=False`), `max_seq_len` 32 (each env's whole 32-step fragment),
and VecNormalize's two halves as connectors: MeanStdFilter on observations and
NormalizeRewards (rewards divided by the running std of the discounted return) on the
Learner's batch. Measured 2026-12-07 (seeds 0-4, median env steps to a mean return of 200;
RecurrentPPO 25.5k): these settings without the previous action needed 32.5k without
reward normalization and 25.5k with it; with the previous action as well 24.1k (fewer than
RecurrentPPO on every seed). rlmod's earlier settings (16 envs, batch 1024 in minibatches of
256, 8 epochs, LSTM 32 after a 64-unit layer, `max_seq_len` 20) needed 44k, and 33k with
reward normalization. The rewards' scale matters because unnormalized value targets reach
1 / (1 - gamma) = 50: a constant factor of 0.05-0.2 on the rewards helped as much.

`--target-return R` measures instead the env steps each run needs until the mean return of
its last 100 episodes reaches R (rlmod checks after each 256-step iteration, RecurrentPPO
after every 8-env step), capped at `--steps`.

    python benchmarks/lstm_vs_recurrentppo.py [--seeds 0 1 2] [--steps 100000]
        [--target-return 200]
"""

from __future__ import annotations

import argparse
import statistics

from _common import header, run_timed, summary, table

RLMOD = r"""
import json, sys
from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors import MeanStdFilter, NormalizeRewards
from rlmod.testing import StatelessCartPole
from rlmod.tuned import FAST_PPO
seed, steps, target = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
settings = {k: v for k, v in FAST_PPO.items() if k != "model_config"}
config = (
    PPOConfig()
    .environment(StatelessCartPole)
    .env_runners(num_envs_per_env_runner=8, env_to_module_connector=lambda env: MeanStdFilter())
    .training(**{**settings, "train_batch_size_per_learner": 256, "minibatch_size": 256,
                 "num_epochs": 20, "lr": [[0, 1e-3], [steps, 0.0]], "gamma": 0.98,
                 "lambda_": 0.8},
              learner_connector=lambda obs_space, act_space: NormalizeRewards(gamma=0.98))
    .rl_module(model_config={"use_lstm": True, "lstm_cell_size": 64, "fcnet_hiddens": [],
                             "head_fcnet_hiddens": [64], "max_seq_len": 32,
                             "lstm_use_prev_action": True})
    .debugging(seed=seed)
)
algo = config.build_algo()
done, reached = 0, None
while done < steps and reached is None:
    r = algo.train()
    done = r["num_env_steps_sampled_lifetime"]
    if r["num_episodes_lifetime"] >= 100 and r["env_runners"]["episode_return_mean"] >= target:
        reached = done  # the mean of the last 100 episodes (a full window) reached the target
print(json.dumps({"steps": done, "return": r["env_runners"]["episode_return_mean"],
                  "reached": reached}))
"""

SB3 = r"""
import json, sys
import numpy as np
import torch
import torch.nn as nn
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
from rlmod.testing import StatelessCartPole
seed, steps, target = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
torch.set_num_threads(1)  # as rlmod's Learner (num_threads_per_learner=None: 1)

def lin(v):
    return lambda progress: progress * v

# the zoo's `normalize: true`: observations and rewards, with the algorithm's gamma
env = VecNormalize(make_vec_env(StatelessCartPole, n_envs=8, seed=seed), gamma=0.98)
# rl-baselines3-zoo hyperparams/ppo_lstm.yml, CartPoleNoVel-v1
model = RecurrentPPO(
    "MlpLstmPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
    n_epochs=20, ent_coef=0.0, learning_rate=lin(0.001), clip_range=lin(0.2),
    policy_kwargs=dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64,
                       enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])),
    seed=seed, verbose=0, device="cpu",
)


class UntilTarget(BaseCallback):
    # stops at the first vector step where the mean of the last 100 episodes (a full
    # ep_info_buffer) reaches the target
    reached = None

    def _on_step(self):
        buf = self.model.ep_info_buffer
        if len(buf) == buf.maxlen and np.mean([e["r"] for e in buf]) >= target:
            UntilTarget.reached = int(self.model.num_timesteps)
            return False
        return True


model.learn(total_timesteps=steps, callback=UntilTarget() if target < float("inf") else None)
ret = float(np.mean([e["r"] for e in model.ep_info_buffer]))
print(json.dumps({"steps": int(model.num_timesteps), "return": ret,
                  "reached": UntilTarget.reached}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument(
        "--target-return",
        type=float,
        default=None,
        help="stop each run once the mean return of its last 100 episodes reaches this and "
        "compare the env steps it took (--steps is then the cap; the lr schedules still "
        "run over --steps)",
    )
    args = parser.parse_args()
    if args.target_return is not None:
        to_target(args)
        return
    header("PPO + LSTM on StatelessCartPole (CartPoleNoVel): rlmod vs sb3-contrib RecurrentPPO")
    runs: dict[str, list[dict]] = {"rlmod": [], "RecurrentPPO": []}
    rows = []
    for seed in args.seeds:
        for name, code in (("rlmod", RLMOD), ("RecurrentPPO", SB3)):
            out = run_timed(code, seed, args.steps, float("inf"))
            runs[name].append(out)
            rows.append(
                {
                    "library": name,
                    "seed": seed,
                    "env steps": out["steps"],
                    "mean return": f"{out['return']:.1f}",
                    "wall s": f"{out['wall_s']:.1f}",
                    "cpu s": f"{out['cpu_s']:.1f}",
                }
            )
    table(rows, ["library", "seed", "env steps", "mean return", "wall s", "cpu s"])
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in ("steps", "return", "wall_s")}
        for name, rs in runs.items()
    }
    ratio = med["rlmod"]["wall_s"] / med["RecurrentPPO"]["wall_s"]
    print()
    table(
        [
            {
                "library": name,
                "env steps": int(m["steps"]),
                "median mean return": f"{m['return']:.1f}",
                "median wall s": f"{m['wall_s']:.1f}",
                "wall ratio": f"{m['wall_s'] / med['RecurrentPPO']['wall_s']:.2f}",
            }
            for name, m in med.items()
        ],
        ["library", "env steps", "median mean return", "median wall s", "wall ratio"],
    )
    summary(
        f"StatelessCartPole PPO+LSTM, {args.steps} env steps, median of {len(args.seeds)} seeds",
        rlmod=f"return {med['rlmod']['return']:.0f} in {med['rlmod']['wall_s']:.1f} s",
        peer=f"return {med['RecurrentPPO']['return']:.0f} in "
        f"{med['RecurrentPPO']['wall_s']:.1f} s (RecurrentPPO)",
        ratio=f"{ratio:.2f} of RecurrentPPO's wall time",
    )


def to_target(args: argparse.Namespace) -> None:
    """Env steps each library needs until the mean return of its last 100 episodes reaches
    `--target-return`, per seed and the median (a run that never reaches it counts as
    `--steps`, and the count of runs that reached it is shown)."""
    target = args.target_return
    header(
        f"PPO + LSTM on StatelessCartPole: env steps to a mean return of {target:g} over the "
        "last 100 episodes, rlmod vs sb3-contrib RecurrentPPO"
    )
    runs: dict[str, list[dict]] = {"rlmod": [], "RecurrentPPO": []}
    rows = []
    for seed in args.seeds:
        for name, code in (("rlmod", RLMOD), ("RecurrentPPO", SB3)):
            out = run_timed(code, seed, args.steps, target)
            runs[name].append(out)
            rows.append(
                {
                    "library": name,
                    "seed": seed,
                    "env steps to target": "not reached" if out["reached"] is None else
                    f"{out['reached']:,}",
                    "wall s": f"{out['wall_s']:.1f}",
                }
            )  # fmt: skip
    table(rows, ["library", "seed", "env steps to target", "wall s"])
    steps = {
        n: statistics.median(args.steps if r["reached"] is None else r["reached"] for r in rs)
        for n, rs in runs.items()
    }
    wall = {n: statistics.median(r["wall_s"] for r in rs) for n, rs in runs.items()}
    hits = {n: sum(r["reached"] is not None for r in rs) for n, rs in runs.items()}
    n = len(args.seeds)
    summary(
        f"StatelessCartPole PPO+LSTM: env steps to a mean return of {target:g} (last 100 "
        f"episodes), median of {n} seeds (cap {args.steps:,})",
        rlmod=f"{steps['rlmod']:,.0f} ({hits['rlmod']}/{n}) in {wall['rlmod']:.1f} s",
        peer=f"RecurrentPPO {steps['RecurrentPPO']:,.0f} ({hits['RecurrentPPO']}/{n}) in "
        f"{wall['RecurrentPPO']:.1f} s",
        ratio=f"env steps {steps['rlmod'] / steps['RecurrentPPO']:.2f} of RecurrentPPO's; wall "
        f"{wall['rlmod'] / wall['RecurrentPPO']:.2f}",
    )


if __name__ == "__main__":
    main()
