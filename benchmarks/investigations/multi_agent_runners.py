"""The plain multi-agent EnvRunner against the vectorized one: env steps/s of `sample()`.

ReferenceMultiAgentEnvRunner (a Python loop per agent, one forward pass per module) and
MultiAgentEnvRunner (flat arrays over all agents, one forward pass per execution group)
sample MultiAgentCartPole with the same config, in this process, one torch thread,
alternating call by call (the order flips each round), after one untimed warm-up call
each. A call steps every sub-env `--steps` times (`num_timesteps=steps * num_envs`). The
figure per runner is the median over rounds of env steps/s (each sub-env's `step()`
counts one); the ratio is the median over rounds of reference rate / vectorized rate
(above 1: the reference is faster).

Cases: 2, 4, 10, 100 agents, each with one module per agent (stacked by the vectorized
runner from rlmod.core.stacked.MIN_STACK_SIZE modules on, as by default) and with one
module shared by all; `num_envs_per_env_runner` 1 and 8.

    python benchmarks/investigations/multi_agent_runners.py [--agents 2 4 10 100]
        [--num-envs 1 8] [--rounds 7] [--steps 64]

`measure(...)` (a dict) is importable.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import torch
from _common import header, table

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner
from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole


def make_config(num_agents: int, *, shared: bool, num_envs: int) -> PPOConfig:
    if shared:
        policies, mapping = {"shared"}, (lambda aid, episode, **kw: "shared")
    else:
        policies, mapping = {f"p{i}" for i in range(num_agents)}, (lambda aid, ep, **kw: f"p{aid}")
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": num_agents})
        .env_runners(num_envs_per_env_runner=num_envs)
        .multi_agent(policies=policies, policy_mapping_fn=mapping)
        .debugging(seed=0)
    )


def measure(
    num_agents: int, *, shared: bool, num_envs: int, rounds: int = 7, steps: int = 64
) -> dict[str, float]:
    """Env steps/s of both runners (medians over rounds) and the median per-round ratio
    reference / vectorized."""
    config = make_config(num_agents, shared=shared, num_envs=num_envs)
    runners = {
        "vectorized": MultiAgentEnvRunner(config=config),
        "reference": ReferenceMultiAgentEnvRunner(config=config),
    }
    n = steps * num_envs
    for runner in runners.values():
        runner.sample(num_timesteps=n)  # first-call costs
    rates: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(rounds):
        for name in list(runners) if r % 2 == 0 else list(runners)[::-1]:
            start = time.perf_counter()
            runners[name].sample(num_timesteps=n)
            rates[name].append(n / (time.perf_counter() - start))
    for runner in runners.values():
        runner.stop()
    ratios = [a / b for a, b in zip(rates["reference"], rates["vectorized"], strict=True)]
    return {
        "vectorized": statistics.median(rates["vectorized"]),
        "reference": statistics.median(rates["reference"]),
        "ratio": statistics.median(ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 4, 10, 100])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=64, help="env steps per sub-env per call")
    args = parser.parse_args()
    torch.set_num_threads(1)
    header("Multi-agent sampling: reference (plain) runner against the vectorized one")
    rows = []
    for num_agents in args.agents:
        for shared in (False, True):
            for num_envs in args.num_envs:
                got = measure(
                    num_agents,
                    shared=shared,
                    num_envs=num_envs,
                    rounds=args.rounds,
                    steps=args.steps,
                )
                rows.append(
                    {
                        "agents": num_agents,
                        "modules": 1 if shared else num_agents,
                        "envs": num_envs,
                        "agents x envs": num_agents * num_envs,
                        "vectorized env steps/s": f"{got['vectorized']:,.0f}",
                        "reference env steps/s": f"{got['reference']:,.0f}",
                        "reference / vectorized": f"{got['ratio']:.2f}",
                    }
                )
                print(rows[-1], flush=True)
    print()
    table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
