"""SAC on Pendulum: the floor of one gradient step beside rlmod's and Stable-Baselines3's.

The issue's SAC target is at most 1/2 of SB3's wall time to -200 on Pendulum-v1, with the
same settings (256x256 ReLU actor and twin critics, batch 256, one gradient step per env
step). This script times, in one process, interleaved:

- floor: the least torch work of one SAC update with these networks, no framework: the
  actor on new_obs and the two target critics without a graph, the two critics on
  (obs, a), the actor on obs and the critics on its actions, one backward pass for the
  three losses, one fused Adam step over all parameters, one `_foreach_lerp_` of the
  targets; inputs are tensors made in advance (no replay sampling);
- floor, twin critics as one network: the same with both critics (and both targets) as
  one batched MLP (`torch.baddbmm` over a leading dimension of 2), one call per layer
  instead of two;
- rlmod: `Learner.update` on a 256-row replayed batch, and a whole `Algorithm.train()`
  (one env step, one replay sample, one update, the weight sync) with `TUNED_SAC`;
- SB3: `SAC.train(gradient_steps=1, batch_size=256)` (its replay sample included), and
  `SAC.learn` per env step (one env step, one gradient step), with the zoo's settings.

Every case runs at each torch thread count of `--threads` (default 1 and 2), set with
`torch.set_num_threads` just before its timed calls, in the same interleaved rounds, so
that each pairing is fair in one run: all at one thread, all at two, and each library at
its own default (rlmod: `num_threads_per_learner=1`; SB3 sets none, so torch's default,
the number of cores). Wall time per call is the target's measure (a second thread can
cut it while raising the CPU time); CPU time is printed beside it, since on a shared
machine it moves less with the other load.

    python benchmarks/investigations/sac_floor.py [--steps 300] [--rounds 5] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import numpy as np
import torch
from _common import header, table
from torch import nn

OBS, ACT, HIDDEN, BATCH = 3, 1, 256, 256


def _mlp(inp: int, out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inp, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, out),
    )


class TwinMLP(nn.Module):
    """`n` MLPs of one shape as one: weights `[n, in, out]`, inputs `[n, B, in]`."""

    def __init__(self, n: int, inp: int, out: int) -> None:
        super().__init__()
        dims = [inp, HIDDEN, HIDDEN, out]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.randn(n, a, b) / a**0.5)
            for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(n, 1, b)) for b in dims[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [n, B, in] -> [n, B, out]
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = torch.relu(x)
        return x


def _squashed(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tanh-Gaussian sample and log-prob from `[B, 2]` (mean, log_std)."""
    mean, log_std = out.chunk(2, -1)
    log_std = log_std.clamp(-20, 2)
    noise = torch.randn_like(mean)
    u = mean + log_std.exp() * noise
    logp = (-0.5 * noise.pow(2) - log_std - 0.9189385332046727).sum(-1)
    logp = logp - (2 * (0.6931471805599453 - u - nn.functional.softplus(-2 * u))).sum(-1)
    return torch.tanh(u), logp


class FloorSAC:
    """One SAC update with two separate critics, or (`batched=True`) one batched pair."""

    def __init__(self, *, batched: bool) -> None:
        torch.manual_seed(0)
        self.batched = batched
        self.actor = _mlp(OBS, 2 * ACT)
        if batched:
            self.q = TwinMLP(2, OBS + ACT, 1)
            self.q_target = TwinMLP(2, OBS + ACT, 1).requires_grad_(False)
            self.q_target.load_state_dict(self.q.state_dict())
            critics = list(self.q.parameters())
        else:
            self.qs = [_mlp(OBS + ACT, 1) for _ in range(2)]
            self.q_targets = [_mlp(OBS + ACT, 1).requires_grad_(False) for _ in range(2)]
            for t, q in zip(self.q_targets, self.qs, strict=True):
                t.load_state_dict(q.state_dict())
            critics = [p for q in self.qs for p in q.parameters()]
        self.critic_params = critics
        self.target_params = list(
            self.q_target.parameters()
            if batched
            else [p for t in self.q_targets for p in t.parameters()]
        )
        self.log_alpha = nn.Parameter(torch.zeros(()))
        self.params = [*self.actor.parameters(), *critics, self.log_alpha]
        self.opt = torch.optim.Adam(self.params, lr=1e-3, fused=True)
        g = torch.Generator().manual_seed(1)
        self.obs = torch.randn(BATCH, OBS, generator=g)
        self.next_obs = torch.randn(BATCH, OBS, generator=g)
        self.act = torch.rand(BATCH, ACT, generator=g) * 2 - 1
        self.rew = torch.randn(BATCH, generator=g)
        self.done = torch.zeros(BATCH)

    def _q(self, obs: torch.Tensor, act: torch.Tensor, *, target: bool = False) -> torch.Tensor:
        x = torch.cat([obs, act], -1)
        if self.batched:
            net = self.q_target if target else self.q
            return net(x.expand(2, *x.shape)).squeeze(-1)  # [2, B]
        nets = self.q_targets if target else self.qs
        return torch.stack([n(x).squeeze(-1) for n in nets])

    def step(self) -> None:
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_a, next_logp = _squashed(self.actor(self.next_obs))
            q_next = self._q(self.next_obs, next_a, target=True).min(0).values
            target = self.rew + 0.99 * (1 - self.done) * (q_next - alpha * next_logp)
        q = self._q(self.obs, self.act)
        critic_loss = 0.5 * (q - target).pow(2).mean(-1).sum()
        new_a, logp = _squashed(self.actor(self.obs))
        for p in self.critic_params:
            p.requires_grad_(False)
        q_new = self._q(self.obs, new_a).min(0).values
        for p in self.critic_params:
            p.requires_grad_(True)
        actor_loss = (alpha * logp - q_new).mean()
        alpha_loss = -(self.log_alpha * (-ACT - logp.detach())).mean()
        self.opt.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        self.opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.target_params, self.critic_params, 0.005)


def _rlmod() -> tuple[Callable[[], None], Callable[[], None]]:
    from rlmod.algorithms.sac import SACConfig
    from rlmod.tuned import TUNED_SAC

    config = SACConfig().environment("Pendulum-v1").debugging(seed=0)
    config.reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
    for k, v in TUNED_SAC["Pendulum-v1"].items():
        setattr(config, k, v)
    algo = config.build_algo()
    while algo.metrics.num_env_steps_lifetime < 600:
        algo.train()
    ts = {"num_env_steps_sampled_lifetime": 600}
    batch, _ = algo.replay_buffer.sample(config.train_batch_size)
    return (lambda: algo.learner_group.update(batch, timesteps=ts)), (lambda: algo.train())


def _sb3() -> tuple[Callable[[], None], Callable[[], None]]:
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", "Pendulum-v1", learning_rate=1e-3, seed=0)
    model.learn(600)

    def learn_one() -> None:
        model.learn(1, reset_num_timesteps=False)

    return (lambda: model.train(gradient_steps=1, batch_size=256)), learn_one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    torch_default = torch.get_num_threads()  # what SB3 runs with (it sets none)
    torch.set_num_threads(1)
    header(
        f"SAC update floor: 256x256 actor and twin critics, batch {BATCH}, torch threads "
        f"{args.threads} (torch's default here: {torch_default})"
    )
    floor, floor_bmm = FloorSAC(batched=False), FloorSAC(batched=True)
    rlmod_update, rlmod_train = _rlmod()
    sb3_train, sb3_learn = _sb3()
    cases: dict[str, Callable[[], object]] = {
        "floor: plain torch, one backward, one Adam": floor.step,
        "floor: twin critics batched (baddbmm)": floor_bmm.step,
        "rlmod Learner.update (256 rows)": rlmod_update,
        "SB3 SAC.train(gradient_steps=1)": sb3_train,
        "rlmod Algorithm.train() (1 env step + 1 update)": rlmod_train,
        "SB3 SAC.learn per env step (1 env step + 1 update)": sb3_learn,
    }
    runs = [(name, n) for name in cases for n in args.threads]
    for name, n in runs:  # warm-up
        torch.set_num_threads(n)
        for _ in range(20):
            cases[name]()
    wall: dict[tuple[str, int], list[float]] = {r: [] for r in runs}
    cpu: dict[tuple[str, int], list[float]] = {r: [] for r in runs}
    for r in range(args.rounds):
        for name, n in runs if r % 2 == 0 else list(reversed(runs)):
            fn = cases[name]
            torch.set_num_threads(n)
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                fn()
            wall[name, n].append((time.perf_counter() - start) / args.steps * 1e3)
            cpu[name, n].append((time.process_time() - start_cpu) / args.steps * 1e3)
    torch.set_num_threads(1)
    floor_name, sb3_train_name = (
        "floor: plain torch, one backward, one Adam",
        "SB3 SAC.train(gradient_steps=1)",
    )
    sb3_step = "SB3 SAC.learn per env step (1 env step + 1 update)"
    rows = []
    for name, n in runs:
        w = statistics.median(wall[name, n])
        rows.append(
            {
                "what": name,
                "threads": n,
                "wall ms (median)": f"{w:.2f}",
                "CPU ms (median)": f"{statistics.median(cpu[name, n]):.2f}",
                "vs floor": f"{w / statistics.median(wall[floor_name, n]):.2f}",
                "vs SB3 train": f"{w / statistics.median(wall[sb3_train_name, n]):.2f}",
                "vs SB3 env step": f"{w / statistics.median(wall[sb3_step, n]):.2f}",
            }
        )
    table(
        rows,
        [
            "what",
            "threads",
            "wall ms (median)",
            "CPU ms (median)",
            "vs floor",
            "vs SB3 train",
            "vs SB3 env step",
        ],
    )
    print(
        f"Per call, median of {args.rounds} interleaved rounds of {args.steps} calls; the "
        f"ratios against the same thread count (np {np.__version__}, torch "
        f"{torch.__version__})."
    )
    if torch_default in args.threads and 1 in args.threads:
        sb3 = statistics.median(wall[sb3_step, torch_default])
        print(
            f"Each at its default (rlmod 1 thread, SB3 {torch_default}), wall per env step "
            "against SB3's:"
        )
        for name in (
            floor_name,
            "floor: twin critics batched (baddbmm)",
            "rlmod Learner.update (256 rows)",
            "rlmod Algorithm.train() (1 env step + 1 update)",
        ):
            best = min(statistics.median(wall[name, n]) for n in args.threads)
            print(
                f"  {name}: {statistics.median(wall[name, 1]) / sb3:.2f} at 1 thread, "
                f"{best / sb3:.2f} at its best thread count"
            )


if __name__ == "__main__":
    main()
