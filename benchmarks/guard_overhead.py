"""What the "nothing silently wrong" guards cost: each measured on and off in one process.

- Sampling, CartPole-v1 (16 sub-envs, the tuned setting): the non-finite check of the
  observations and rewards of each `sample()` batch.
- Learning, CartPole-v1 (PPO, tuned: 2048 rows, minibatches of 256, 10 epochs): the
  finiteness check of each module's loss and gradient norm per minibatch, with PPO's
  gradient clipping (the norm is computed anyway) and without it (the guard computes it).
- Multi-agent sampling, MultiAgentCartPole (4 envs x 4 agents, 2 modules): the per-step
  non-finite checks and the per-step shape/dtype check (`check_agent_observations`).

On and off run interleaved, `--rounds` times each, one object toggled between them; the
ratio of the fastest runs is reported (on / off: 1.00 means free). Each sampling run takes
10 training batches' worth of steps, so a run is long against timer noise.

    flock /tmp/bench.lock python benchmarks/guard_overhead.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from _common import header, table

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner, SingleAgentEnvRunner
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import FAST_PPO, TUNED


def _ratio(on: Callable[[], None], off: Callable[[], None], rounds: int) -> tuple[float, float]:
    """Fastest seconds of `on` and `off` over `rounds` each, run alternately, which one goes
    first alternating too (after one warm-up each). The fastest run is the one least hit by
    other load on the machine; a guard's own work is in every run."""
    on(), off()
    t_on, t_off = [], []
    for r in range(rounds):
        pair = ((on, t_on), (off, t_off))
        for fn, times in (pair if r % 2 == 0 else pair[::-1]):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return min(t_on), min(t_off)


def _cartpole() -> PPOConfig:
    config = PPOConfig().environment("CartPole-v1").debugging(seed=0)
    for name, value in TUNED["CartPole-v1"].items():
        setattr(config, name, value)
    return config


def _toggled(obj: object, attr: str, run: Callable[[], object]
             ) -> tuple[Callable[[], None], Callable[[], None]]:
    """`run` with `obj.attr` True and False: one object for both, so nothing but the guard
    differs (two EnvRunners differ in memory layout by a few percent)."""
    def with_value(value: bool) -> Callable[[], None]:
        def go() -> None:
            setattr(obj, attr, value)
            run()
        return go
    return with_value(True), with_value(False)


def sampling(rounds: int) -> tuple[float, float]:
    config = _cartpole()
    runner = SingleAgentEnvRunner(config=config)
    steps = 10 * config.total_train_batch_size
    return _ratio(*_toggled(runner, "_check_finite_data",
                            lambda: runner.sample(num_timesteps=steps)), rounds)


def learning(rounds: int, *, grad_clip: float | None) -> tuple[float, float]:
    config = _cartpole().training(grad_clip=grad_clip)
    algo = config.build_algo()
    batch = algo.env_runner_group.sample()
    learner = algo.learner_group.learner
    state = learner.get_state()

    def update(guard: bool) -> Callable[[], None]:
        def run() -> None:
            learner.set_state(state)  # same start each time: same work
            learner._guard_non_finite = guard
            learner.update(batch)
        return run

    out = _ratio(update(True), update(False), rounds)
    algo.stop()
    return out


def multi_agent(rounds: int, attr: str) -> tuple[float, float]:
    config = (PPOConfig().update_from_dict(FAST_PPO)  # the network measured before
              .environment(MultiAgentCartPole, env_config={"num_agents": 4})
              .env_runners(num_envs_per_env_runner=4)
              .multi_agent(policies={"p0", "p1"},
                           policy_mapping_fn=lambda aid, episode, **kw: f"p{aid % 2}")
              .debugging(seed=0))
    runner = MultiAgentEnvRunner(config=config)
    return _ratio(*_toggled(runner, attr, lambda: runner.sample(num_timesteps=8192)), rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    header("Guard overhead: on / off, fastest of interleaved runs in one process")
    rows = []
    for name, (t_on, t_off) in (
        ("sampling CartPole-v1, non-finite check", sampling(args.rounds)),
        ("learning CartPole-v1 (grad_clip=0.5), loss/grad check", learning(
            args.rounds, grad_clip=0.5)),
        ("learning CartPole-v1 (no grad_clip), loss/grad check", learning(
            args.rounds, grad_clip=None)),
        ("multi-agent sampling, non-finite checks", multi_agent(
            args.rounds, "_check_finite_data")),
        ("multi-agent sampling, shape/dtype check (check_agent_observations)", multi_agent(
            args.rounds, "_check_obs")),
    ):
        rows.append({"what": name, "on / off": f"{t_on / t_off:.3f}"})
    table(rows, ["what", "on / off"])


if __name__ == "__main__":
    main()
