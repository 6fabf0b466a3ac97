"""What the "nothing silently wrong" guards cost: each measured on and off in one process.

- Sampling, CartPole-v1 (16 sub-envs, the tuned setting): the non-finite check of the
  observations and rewards of each `sample()` batch.
- Sampling, FrozenLake-v1 (1 and 16 sub-envs): the per-step check that Discrete
  observations lie inside their space (`out_of_space_rows`, before the one-hot).
- Learning, CartPole-v1 (PPO, tuned: 2048 rows, minibatches of 256, 10 epochs): the
  finiteness check of each module's loss and gradient norm per minibatch, with PPO's
  gradient clipping (the norm is computed anyway) and without it (the guard computes it).
- Multi-agent sampling, MultiAgentCartPole (4 envs x 4 agents, 2 modules): the per-step
  non-finite checks and the per-step shape/dtype check (`check_agent_observations`).
- Multi-agent sampling, 4 FrozenLake-v1 agents per env (4 envs, 2 modules): the per-step
  check that Discrete observations lie inside their space.

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

import gymnasium as gym
import torch
from _common import header, median_ci, summary, table

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnv, MultiAgentEnvRunner, SingleAgentEnvRunner
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
        out |= {
            f"{clock}: on / off (median)": f"{median:.3f}",
            f"{clock}: 95% CI": f"{low:.3f}-{high:.3f}",
            f"{clock}: IQR": f"{q1:.3f}-{q3:.3f}",
        }
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


def sampling_discrete(rounds: int, num_envs: int) -> dict[str, str]:
    config = (
        PPOConfig()
        .environment("FrozenLake-v1", env_config={"is_slippery": True})
        .env_runners(num_envs_per_env_runner=num_envs)
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=config)

    def run(guard: bool) -> None:
        runner._check_obs_space = guard
        runner.sample(num_timesteps=2048)

    return _rounds(run, rounds)


def learning(rounds: int, *, grad_clip: float | None) -> dict[str, str]:
    config = _cartpole().training(grad_clip=grad_clip)
    algo = config.build_algo()
    batch = algo.env_runner_group.sample()
    learner = algo.learner_group.learner
    state = learner.get_state()

    def run(guard: bool) -> None:
        learner.set_state(state)  # same start each time: same work (restoring is ~1% of it)
        learner.guard.enabled = guard
        learner.update(batch)

    out = _rounds(run, rounds)
    algo.stop()
    return out


def multi_agent(rounds: int, attr: str) -> dict[str, str]:
    config = (
        PPOConfig()
        .update_from_dict(FAST_PPO)  # the network measured before
        .environment(MultiAgentCartPole, env_config={"num_agents": 4})
        .env_runners(num_envs_per_env_runner=4)
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)

    def run(guard: bool) -> None:
        setattr(runner._intake, attr, guard)  # the guard switches live on the intake
        runner.sample(num_timesteps=2048)

    return _rounds(run, rounds)


class _MultiAgentFrozenLake(MultiAgentEnv):
    """`num_agents` FrozenLake-v1 lakes, one per agent (Discrete(16) observations); the
    episode ends for all when every agent's lake has ended."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        n = (config or {}).get("num_agents", 4)
        self.lakes = [gym.make("FrozenLake-v1") for _ in range(n)]
        self.possible_agents = list(range(n))
        self.observation_spaces = {a: self.lakes[a].observation_space for a in range(n)}
        self.action_spaces = {a: self.lakes[a].action_space for a in range(n)}
        self.live: set[int] = set()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.live = set(self.possible_agents)
        return {
            a: lake.reset(seed=None if seed is None else seed + a)[0]
            for a, lake in enumerate(self.lakes)
        }, {}

    def step(self, action_dict: dict):
        obs, rew, term, trunc = {}, {}, {}, {}
        for a, action in action_dict.items():
            obs[a], rew[a], term[a], trunc[a], _ = self.lakes[a].step(action)
            if term[a] or trunc[a]:
                self.live.discard(a)
        term["__all__"] = not self.live
        trunc["__all__"] = False
        return obs, rew, term, trunc, {}


def multi_agent_discrete(rounds: int) -> dict[str, str]:
    config = (
        PPOConfig()
        .update_from_dict(FAST_PPO)
        .environment(_MultiAgentFrozenLake, env_config={"num_agents": 4})
        .env_runners(num_envs_per_env_runner=4)
        .multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}"
        )
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)

    def run(guard: bool) -> None:
        runner._intake.check_in_space = guard
        runner.sample(num_timesteps=2048)

    return _rounds(run, rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument(
        "--only",
        choices=["sampling", "learning", "multi-agent"],
        default=None,
        help="measure one group of rows only",
    )
    parser.add_argument(
        "--aa", action="store_true", help="A/A test: the guard off in both arms (shows the noise)"
    )
    args = parser.parse_args()
    global AA
    AA = args.aa
    torch.set_num_threads(1)
    header("Guard overhead: on / off, median of per-round ratios (on,off,off,on rounds)")
    cases: list[tuple[str, str, Callable[[], dict[str, str]]]] = [
        ("sampling", "sampling CartPole-v1, non-finite check", lambda: sampling(args.rounds)),
        (
            "sampling",
            "sampling FrozenLake-v1 (1 sub-env), Discrete observation check",
            lambda: sampling_discrete(args.rounds, 1),
        ),
        (
            "sampling",
            "sampling FrozenLake-v1 (16 sub-envs), Discrete observation check",
            lambda: sampling_discrete(args.rounds, 16),
        ),
        (
            "learning",
            "learning CartPole-v1 (grad_clip=0.5), loss/grad check",
            lambda: learning(args.rounds, grad_clip=0.5),
        ),
        (
            "learning",
            "learning CartPole-v1 (no grad_clip), loss/grad check",
            lambda: learning(args.rounds, grad_clip=None),
        ),
        (
            "multi-agent",
            "multi-agent sampling, non-finite checks",
            lambda: multi_agent(args.rounds, "check_finite"),
        ),
        (
            "multi-agent",
            "multi-agent sampling, shape/dtype check (check_agent_observations)",
            lambda: multi_agent(args.rounds, "check_obs"),
        ),
        (
            "multi-agent",
            "multi-agent sampling FrozenLake-v1 agents, Discrete observation check",
            lambda: multi_agent_discrete(args.rounds),
        ),
    ]
    rows = [
        {"what": name, **measure()} for group, name, measure in cases if args.only in (None, group)
    ]
    table(
        rows,
        [
            "what",
            *(
                f"{clock}: {col}"
                for clock in ("wall", "cpu")
                for col in ("on / off (median)", "95% CI", "IQR")
            ),
            "rounds",
        ],
    )
    worst = max(rows, key=lambda r: float(r["cpu: on / off (median)"]))
    summary(
        "guard overhead: the costliest guard, on / off (CPU clock, median of rounds)",
        rlmod=f"{worst['cpu: on / off (median)']} (95% CI {worst['cpu: 95% CI']}): {worst['what']}",
        limit="guards off = 1.000",
        ratio=f"{worst['cpu: on / off (median)']} of off",
    )


if __name__ == "__main__":
    main()
