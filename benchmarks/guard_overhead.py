"""What the "nothing silently wrong" guards cost: each measured on and off in one process.

- Sampling, CartPole-v1 (16 sub-envs, the tuned setting): the non-finite check of the
  observations and rewards of each `sample()` batch.
- Learning, CartPole-v1 (PPO, tuned: 2048 rows, minibatches of 256, 10 epochs): the
  finiteness check of each module's loss and gradient norm per minibatch, with PPO's
  gradient clipping (the norm is computed anyway) and without it (the guard computes it).
- Multi-agent sampling, MultiAgentCartPole (4 envs x 4 agents, 2 modules): the per-step
  non-finite checks and the per-step shape/dtype check (`check_agent_observations`).

How a 2% difference is resolved on a shared 2-core machine whose speed drifts by 10% and
more between runs: one object is toggled between on and off (nothing else differs), and
each round runs on, off, off, on (or off, on, on, off: the order alternates), each run short
(one `update()`, or one training batch of sampling), so that a round's four runs see the
same load and a linear drift cancels. A round's ratio is (on + on) / (off + off); the table
reports the median over `--rounds` rounds with a 95% confidence interval of that median
(distribution-free: order statistics of the rounds' ratios) and the interquartile range.
1.000 means free; a guard's cost below 2% is shown when the interval's upper end is below
1.02. Each run is timed on two clocks: wall time, and the thread's CPU time
(`time.thread_time`, torch runs one thread here), which leaves out the time the run waits
while other processes hold the shared cores (on a loaded machine the wall-clock ratios
spread several times wider: the IQR columns show it).

    flock /tmp/bench.lock python benchmarks/guard_overhead.py [--rounds 61]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from _common import header, median_ci, table

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner, SingleAgentEnvRunner
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import FAST_PPO, TUNED

AA = False
"""`--aa`: every run with the guard off, "on" included: the ratios then show the method's
own bias and spread on this machine at this load (an A/A test)."""


def _rounds(run: Callable[[bool], None], rounds: int) -> dict[str, str]:
    """`rounds` rounds of on/off/off/on runs (the order flips every other round) of
    `run(guard)`, after one warm-up each; the per-round ratios summarized."""
    if AA:
        real = run
        run = lambda guard: real(False)  # noqa: E731
    run(True), run(False)
    ratios: dict[str, list[float]] = {"wall": [], "cpu": []}
    for r in range(rounds):
        order = (True, False, False, True) if r % 2 == 0 else (False, True, True, False)
        spent = {(clock, guard): 0.0 for clock in ratios for guard in (True, False)}
        for guard in order:
            start, start_cpu = time.perf_counter(), time.thread_time()
            run(guard)
            spent["cpu", guard] += time.thread_time() - start_cpu
            spent["wall", guard] += time.perf_counter() - start
        for clock, values in ratios.items():
            values.append(spent[clock, True] / spent[clock, False])
    out = {}
    for clock, values in ratios.items():
        median, low, high = median_ci(values)
        xs = sorted(values)
        q1, q3 = xs[len(xs) // 4], xs[(3 * len(xs)) // 4]
        out |= {f"{clock}: on / off (median)": f"{median:.3f}",
                f"{clock}: 95% CI": f"{low:.3f}-{high:.3f}", f"{clock}: IQR": f"{q1:.3f}-{q3:.3f}"}
    return out | {"rounds": str(rounds)}


def _cartpole() -> PPOConfig:
    config = PPOConfig().environment("CartPole-v1").debugging(seed=0)
    for name, value in TUNED["CartPole-v1"].items():
        setattr(config, name, value)
    return config


def sampling(rounds: int) -> dict[str, str]:
    config = _cartpole()
    runner = SingleAgentEnvRunner(config=config)
    steps = config.total_train_batch_size

    def run(guard: bool) -> None:
        runner._check_finite_data = guard
        runner.sample(num_timesteps=steps)
    return _rounds(run, rounds)


def learning(rounds: int, *, grad_clip: float | None) -> dict[str, str]:
    config = _cartpole().training(grad_clip=grad_clip)
    algo = config.build_algo()
    batch = algo.env_runner_group.sample()
    learner = algo.learner_group.learner
    state = learner.get_state()

    def run(guard: bool) -> None:
        learner.set_state(state)  # same start each time: same work (restoring is ~1% of it)
        learner._guard_non_finite = guard
        learner.update(batch)
    out = _rounds(run, rounds)
    algo.stop()
    return out


def multi_agent(rounds: int, attr: str) -> dict[str, str]:
    config = (PPOConfig().update_from_dict(FAST_PPO)  # the network measured before
              .environment(MultiAgentCartPole, env_config={"num_agents": 4})
              .env_runners(num_envs_per_env_runner=4)
              .multi_agent(policies={"p0", "p1"},
                           policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}")
              .debugging(seed=0))
    runner = MultiAgentEnvRunner(config=config)

    def run(guard: bool) -> None:
        setattr(runner._intake, attr, guard)  # the guard switches live on the intake
        runner.sample(num_timesteps=2048)
    return _rounds(run, rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--only", choices=["sampling", "learning", "multi-agent"],
                        default=None, help="measure one group of rows only")
    parser.add_argument("--aa", action="store_true",
                        help="A/A test: the guard off in both arms (shows the noise)")
    args = parser.parse_args()
    global AA
    AA = args.aa
    torch.set_num_threads(1)
    header("Guard overhead: on / off, median of per-round ratios (on,off,off,on rounds)")
    cases: list[tuple[str, str, Callable[[], dict[str, str]]]] = [
        ("sampling", "sampling CartPole-v1, non-finite check",
         lambda: sampling(args.rounds)),
        ("learning", "learning CartPole-v1 (grad_clip=0.5), loss/grad check",
         lambda: learning(args.rounds, grad_clip=0.5)),
        ("learning", "learning CartPole-v1 (no grad_clip), loss/grad check",
         lambda: learning(args.rounds, grad_clip=None)),
        ("multi-agent", "multi-agent sampling, non-finite checks",
         lambda: multi_agent(args.rounds, "check_finite")),
        ("multi-agent", "multi-agent sampling, shape/dtype check (check_agent_observations)",
         lambda: multi_agent(args.rounds, "check_obs")),
    ]
    rows = [{"what": name, **measure()} for group, name, measure in cases
            if args.only in (None, group)]
    table(rows, ["what", *(f"{clock}: {col}" for clock in ("wall", "cpu")
                           for col in ("on / off (median)", "95% CI", "IQR")), "rounds"])


if __name__ == "__main__":
    main()
