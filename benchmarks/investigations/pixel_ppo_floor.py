"""The floor of one PPO iteration on pixels, beside rlmod's and Stable-Baselines3's measured
iteration, in one process: do `minatar_vs_sb3.py`'s and `atari_throughput.py`'s targets fit
on this machine at all?

For each setting (`minatar`: MinAtar/Breakout-v1 with the MinAtar paper's CNN; `atari`:
ALE/Pong-v5 84x84x4 with the Nature CNN), built exactly as those two benchmarks build it
(`rlmod.tuned.TUNED`: 8 envs x 128 steps, 4 epochs of minibatches of 256, the same envs,
the same torch thread count for all), per iteration:

- (a) env loop: the same 8 envs in a gymnasium SyncVectorEnv stepped 128 times with the
  same policy forward pass (the CNN, the policy head, a categorical sample), under
  `torch.inference_mode`; no storage, no GAE;
- (b) update: the same number of epochs x minibatches of forward + backward + Adam with
  gradient clipping (PPO's clipped surrogate, value loss and entropy) on random `uint8`
  (MinAtar: `bool`) tensors of the batch's shapes, through the same CNN and heads;
- (a) and (b) run in three memory layouts (`Net.features`: "view", as rlmod's encoder
  and SB3's MinAtar extractor; "nchw", as SB3's Atari path; "nhwc", channels-last
  throughout); the floor takes the fastest of each;
- (c) value pass: one no-grad value forward over the batch (what GAE needs; listed apart:
  the floor is the fastest (a) + the fastest (b));
- rlmod: `Algorithm.train()` with the benchmark's config (its `sample_time_s` and
  `learn_time_s` timers too);
- SB3: `PPO.learn` for the same number of iterations with the benchmark's model (for
  MinAtar its extractor flattens in (H, W, C) order as rlmod's encoder); for MinAtar
  also with an `nn.Flatten` in (C, H, W) order, to show what the layout alone is worth.

All wall seconds per iteration (1,024 env steps), the median of `--rounds` rounds, each
round timing `--iterations` iterations of every part, interleaved. The verdict lines say
whether the floor leaves room for the targets: MinAtar wall <= 1/2 of SB3's, Atari env
steps/s >= 2x SB3's. `--profile` adds cProfile's top entries of rlmod's `train()`.

    PYTHONPATH=. python benchmarks/investigations/pixel_ppo_floor.py [--settings minatar atari]
        [--threads 1] [--rounds 3] [--iterations 4] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import gymnasium as gym
import numpy as np
import torch
from _common import header, table
from torch import nn

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env.wrappers.atari_wrappers import make_atari_env
from rlmod.tuned import TUNED

SETTINGS = {"minatar": "MinAtar/Breakout-v1", "atari": "ALE/Pong-v5"}


def make_sub_env(setting: str) -> Callable[[], gym.Env]:
    env_id = SETTINGS[setting]
    if setting == "minatar":
        from minatar import gym as minatar_gym

        minatar_gym.register_envs()
        return lambda: gym.make(env_id)
    return lambda: make_atari_env({"id": env_id, "dim": 84, "framestack": 4})


# ------------------------------------------------------------------ the plain network
class Net(nn.Module):
    """The benchmark's network in plain torch: a conv stack over channels-last images
    (scaled as rlmod's encoder does), flattened, shared by a policy and a value head of
    one hidden ReLU layer each."""

    def __init__(self, setting: str, shape: tuple[int, ...], n_actions: int) -> None:
        super().__init__()
        model = TUNED[SETTINGS[setting]]["model_config"]
        hidden = model["head_fcnet_hiddens"][0]
        c = shape[-1]
        if setting == "minatar":
            ((out, k, s, _),) = model["conv_filters"]
            side = (shape[0] - k) // s + 1
            self.cnn = nn.Sequential(nn.Conv2d(c, out, k, s), nn.ReLU())
            features = out * side * side
        else:  # the Nature CNN
            self.cnn = nn.Sequential(
                nn.Conv2d(c, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                nn.Conv2d(64, 64, 3, 1), nn.ReLU(),
            )  # fmt: skip
            features = 64 * 7 * 7
        self.pi = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, n_actions)
        )
        self.vf = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        self.layout = "view"  # how the convolutions get the images (see features)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Images `[B, H, W, C]` to features, in one of three layouts:

        - "view": the permuted view `[B, C, H, W]`, channels-last in memory, so torch runs
          channels-last convolutions; flattened in (C, H, W) order, which copies the
          last output to NCHW order, and whose gradient comes back NCHW (rlmod's encoder
          and the benchmarks' SB3 MinAtar extractor do this);
        - "nchw": the images copied to contiguous `[B, C, H, W]` first: NCHW throughout
          (SB3's Atari path, whose envs hand it channels-first frames);
        - "nhwc": the permuted view as "view", but flattened in (H, W, C) order, a free
          view of a channels-last output: channels-last throughout, gradients included.
        """
        x = obs.float().div_(255.0) if obs.dtype == torch.uint8 else obs.float()
        x = x.permute(0, 3, 1, 2)
        if self.layout == "nchw":
            x = x.contiguous()
        x = self.cnn(x)
        return x.permute(0, 2, 3, 1).flatten(1) if self.layout == "nhwc" else x.flatten(1)


def env_loop(net: Net, envs: gym.vector.VectorEnv, state: dict, steps: int) -> None:
    """(a): `steps` vector steps with the policy forward pass and a categorical sample,
    from the observations in `state["obs"]` (left there for the next call)."""
    obs = state["obs"]
    with torch.inference_mode():
        for _ in range(steps):
            logits = net.pi(net.features(torch.from_numpy(obs)))
            actions = torch.multinomial(logits.softmax(-1), 1).squeeze(-1)
            obs, *_ = envs.step(actions.numpy())
    state["obs"] = obs


def make_update(setting: str, net: Net, shape: tuple[int, ...], dtype: Any, n_actions: int):
    """(b) and (c) on a random batch of `train_batch_size` rows of the observations'
    shape and dtype."""
    tuned = TUNED[SETTINGS[setting]]
    rows, size, epochs = tuned["train_batch_size"], tuned["minibatch_size"], tuned["num_epochs"]
    lr = tuned["lr"][0][1] if isinstance(tuned["lr"], list) else tuned["lr"]
    clip, grad_clip = tuned["clip_param"], tuned["grad_clip"]
    vf_coeff, ent_coeff = tuned["vf_loss_coeff"], tuned["entropy_coeff"]
    gen = torch.Generator().manual_seed(0)
    if dtype == np.bool_:
        obs = torch.randint(0, 2, (rows, *shape), generator=gen).bool()
    else:
        obs = torch.randint(0, 256, (rows, *shape), generator=gen, dtype=torch.uint8)
    actions = torch.randint(0, n_actions, (rows,), generator=gen)
    old_logp = torch.full((rows,), -math.log(n_actions))
    adv, targets = torch.randn(rows, generator=gen), torch.randn(rows, generator=gen)
    params = list(net.parameters())
    optimizer = torch.optim.Adam(params, lr=lr, eps=1e-5)

    def update() -> None:
        for _ in range(epochs):
            perm = torch.randperm(rows, generator=gen)
            for i in range(rows // size):
                idx = perm[i * size : (i + 1) * size]
                feats = net.features(obs[idx])
                logp_all = net.pi(feats).log_softmax(-1)
                logp = logp_all.gather(-1, actions[idx].unsqueeze(-1)).squeeze(-1)
                ratio = torch.exp(logp - old_logp[idx])
                a = adv[idx]
                surrogate = torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
                entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
                vf_loss = (net.vf(feats).squeeze(-1) - targets[idx]).pow(2).mean()
                loss = -surrogate.mean() + vf_coeff * vf_loss - ent_coeff * entropy
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, grad_clip)
                optimizer.step()

    def values() -> None:
        with torch.inference_mode():
            net.vf(net.features(obs)).squeeze(-1)

    return update, values


# ------------------------------------------------------------------ the two libraries
def build_rlmod(setting: str, threads: int):
    env_id = SETTINGS[setting]
    if setting == "minatar":
        config = PPOConfig().environment(env_id)
    else:
        config = PPOConfig().environment(
            make_atari_env, env_config={"id": env_id, "dim": 84, "framestack": 4}
        )
    config = config.debugging(seed=0)
    for k, v in {**TUNED[env_id], "num_threads_per_learner": threads}.items():
        setattr(config, k, v)
    return config.build_algo()


def build_sb3(setting: str, hwc: bool = False):
    from stable_baselines3 import PPO
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import DummyVecEnv

    tuned = TUNED[SETTINGS[setting]]
    n = tuned["num_envs_per_env_runner"]
    (hidden,) = tuned["model_config"]["head_fcnet_hiddens"]
    make = make_sub_env(setting)
    venv = DummyVecEnv([make for _ in range(n)])
    venv.seed(0)

    class Conv(BaseFeaturesExtractor):
        # the benchmarks' extractors: MinAtar's gets channels-last bools, Atari's
        # channels-first uint8 (SB3 transposes images and scales uint8 itself)
        def __init__(self, space: gym.spaces.Box) -> None:
            if setting == "minatar":
                h, _, c = space.shape
                ((out, k, s, _),) = tuned["model_config"]["conv_filters"]
                side = (h - k) // s + 1
                super().__init__(space, features_dim=out * side * side)
                self.cnn = nn.Sequential(nn.Conv2d(c, out, k, s), nn.ReLU(), nn.Flatten())
            else:
                super().__init__(space, features_dim=64 * 7 * 7)
                self.cnn = nn.Sequential(
                    nn.Conv2d(space.shape[0], 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2),
                    nn.ReLU(), nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
                )  # fmt: skip

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            if hwc:  # flattened in (H, W, C) order, as rlmod's encoder
                return self.cnn[:-1](obs.permute(0, 3, 1, 2)).permute(0, 2, 3, 1).flatten(1)
            return self.cnn(obs.permute(0, 3, 1, 2) if setting == "minatar" else obs)

    lr = tuned["lr"][0][1] if isinstance(tuned["lr"], list) else tuned["lr"]
    return PPO(
        "MlpPolicy" if setting == "minatar" else "CnnPolicy", venv,
        n_steps=tuned["train_batch_size"] // n, batch_size=tuned["minibatch_size"],
        n_epochs=tuned["num_epochs"], learning_rate=lr, gamma=tuned["gamma"],
        gae_lambda=tuned["lambda_"], clip_range=tuned["clip_param"],
        ent_coef=tuned["entropy_coeff"], vf_coef=tuned["vf_loss_coeff"],
        max_grad_norm=tuned["grad_clip"],
        policy_kwargs=dict(features_extractor_class=Conv, activation_fn=nn.ReLU,
                           net_arch=dict(pi=[hidden], vf=[hidden])),
        seed=0, device="cpu", verbose=0,
    )  # fmt: skip


# ------------------------------------------------------------------ one setting
def measure(setting: str, args: argparse.Namespace) -> None:
    env_id = SETTINGS[setting]
    tuned = TUNED[env_id]
    n, batch = tuned["num_envs_per_env_runner"], tuned["train_batch_size"]
    vector_steps = batch // n
    torch.set_num_threads(args.threads)
    envs = gym.vector.SyncVectorEnv([make_sub_env(setting) for _ in range(n)])
    state = {"obs": envs.reset(seed=0)[0]}
    shape, dtype = envs.single_observation_space.shape, envs.single_observation_space.dtype
    n_actions = int(envs.single_action_space.n)  # type: ignore[attr-defined]
    torch.manual_seed(0)
    net = Net(setting, shape, n_actions)
    update, values = make_update(setting, net, shape, dtype, n_actions)
    algo = build_rlmod(setting, args.threads)
    sb3 = build_sb3(setting, hwc=setting == "minatar")  # as the benchmarks build it
    torch.set_num_threads(args.threads)
    k = args.iterations

    def rlmod_iters() -> dict[str, float]:
        timers: dict[str, float] = {}
        for _ in range(k):
            r = algo.train()
            for name in ("sample_time_s", "learn_time_s"):
                timers[name] = timers.get(name, 0.0) + r["timers"][name]
        return timers

    def in_layout(layout: str, fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            net.layout = layout
            return fn()

        return run

    loop = lambda: [env_loop(net, envs, state, vector_steps) for _ in range(k)]  # noqa: E731
    upd = lambda: [update() for _ in range(k)]  # noqa: E731
    layouts = ("view", "nchw", "nhwc")
    parts: dict[str, Callable[[], object]] = {
        **{f"(a) env loop, {lay}": in_layout(lay, loop) for lay in layouts},
        **{f"(b) update, {lay}": in_layout(lay, upd) for lay in layouts},
        "(c) value pass": lambda: [values() for _ in range(k)],
        "rlmod train()": rlmod_iters,
        "SB3 learn()": lambda: sb3.learn(k * batch, reset_num_timesteps=False),
    }
    if setting == "minatar":  # SB3 with the extractor's output flattened by nn.Flatten
        sb3_chw = build_sb3(setting, hwc=False)
        parts["SB3 learn(), nn.Flatten (C, H, W) extractor"] = lambda: sb3_chw.learn(
            k * batch, reset_num_timesteps=False
        )
    for fn in parts.values():  # warm-up: one round untimed (first iteration, allocator)
        fn()
    times: dict[str, list[float]] = {name: [] for name in [*parts, "rlmod sample", "rlmod learn"]}
    for _ in range(args.rounds):
        for name, fn in parts.items():
            start = time.perf_counter()
            out = fn()
            times[name].append((time.perf_counter() - start) / k)
            if name == "rlmod train()":
                assert isinstance(out, dict)
                times["rlmod sample"].append(out["sample_time_s"] / k)
                times["rlmod learn"].append(out["learn_time_s"] / k)
    med = {name: statistics.median(v) for name, v in times.items()}
    floor = min(med[f"(a) env loop, {lay}"] for lay in layouts) + min(
        med[f"(b) update, {lay}"] for lay in layouts
    )
    sb3_s, rlmod_s = med["SB3 learn()"], med["rlmod train()"]
    rows = [
        {"part": name, "s / iteration": f"{v:.4f}", "env steps/s": f"{batch / v:,.0f}",
         "of SB3": f"{v / sb3_s:.2f}"}
        for name, v in [*med.items(), ("floor: fastest (a) + fastest (b)", floor),
                        ("floor + (c)", floor + med["(c) value pass"])]
    ]  # fmt: skip
    print(f"\n## {env_id}: {batch:,} env steps per iteration ({n} envs x {vector_steps}), "
          f"{args.threads} torch thread(s), median of {args.rounds} rounds x {k} iterations")  # fmt: skip
    table(rows, ["part", "s / iteration", "env steps/s", "of SB3"])
    if setting == "minatar":
        print(
            f"verdict: floor {floor / sb3_s:.2f} of SB3's iteration (target for rlmod <= 0.50: "
            f"{'reachable' if floor <= 0.5 * sb3_s else 'out of reach'} on this CPU); rlmod "
            f"{rlmod_s / sb3_s:.2f}, {rlmod_s / floor:.2f}x the floor; against SB3 with "
            f"nn.Flatten: floor {floor / med['SB3 learn(), nn.Flatten (C, H, W) extractor']:.2f}"
            f", rlmod {rlmod_s / med['SB3 learn(), nn.Flatten (C, H, W) extractor']:.2f}"
        )
    else:
        print(
            f"verdict: floor {sb3_s / floor:.2f}x SB3's env steps/s (target for rlmod >= 2x: "
            f"{'reachable' if sb3_s / floor >= 2 else 'out of reach'} on this CPU); rlmod "
            f"{sb3_s / rlmod_s:.2f}x SB3, {floor / rlmod_s:.2f} of the floor's throughput"
        )
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(k):
            algo.train()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        print(f"cProfile of rlmod, {k} train() calls, by own time:")
        print("\n".join(out.getvalue().splitlines()[:45]))
    algo.stop()
    envs.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    header("One PPO iteration on pixels: its floor beside rlmod and SB3")
    for setting in args.settings:
        measure(setting, args)


if __name__ == "__main__":
    main()
