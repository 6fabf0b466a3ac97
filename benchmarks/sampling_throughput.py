"""EnvRunner sampling throughput on CartPole-v1 vs the raw loop it cannot beat.

The raw loop: gymnasium's native vectorized CartPole (`vector_entry_point`), the same MLP
forward pass and action sampling, nothing around it. The EnvRunner adds connectors, the
log-prob, and the batch it returns. Both are timed in steady state (after one untimed run
of the same size, as in training, where every iteration samples the same amount) in this
process, interleaved, best of `--repeats`, so the ratio is fair even on a loaded machine.

    python benchmarks/sampling_throughput.py [--steps 200000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch
from _common import header, table

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.columns import Columns
from rlmod.core.distributions import Categorical
from rlmod.env import SingleAgentEnvRunner


def raw_loop(num_envs: int, steps: int, policy: torch.nn.Module) -> float:
    env = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="vector_entry_point")
    obs, _ = env.reset(seed=0)
    start = time.perf_counter()
    with torch.inference_mode():
        for _ in range(max(1, steps // num_envs)):
            logits = policy(torch.from_numpy(obs))
            actions = Categorical(logits).sample().numpy()
            obs, *_ = env.step(actions)
    return max(1, steps // num_envs) * num_envs / (time.perf_counter() - start)


def env_runner(num_envs: int, steps: int) -> tuple[float, torch.nn.Module]:
    # Two 64-unit layers (rlmod.tuned.FAST_PPO's, PPOConfig's default before it took
    # RLlib's 256x256), so numbers compare with earlier commits.
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=num_envs)
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=config)
    runner.sample(num_timesteps=steps)  # warm-up: steady state, as from the 2nd iteration on
    start = time.perf_counter()
    batch = runner.sample(num_timesteps=steps)["default_policy"]
    rate = len(batch[Columns.OBS]) / (time.perf_counter() - start)
    module = runner.module
    policy = torch.nn.Sequential(*module.encoder, *module.pi)  # the same forward pass
    return rate, policy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    header("EnvRunner sampling throughput, CartPole-v1, exploring")
    rows = []
    for num_envs in (1, 64):
        steps = args.steps if num_envs > 1 else args.steps // 10
        runner_best = raw_best = 0.0
        for _ in range(args.repeats):
            rate, policy = env_runner(num_envs, steps)
            runner_best = max(runner_best, rate)
            raw_loop(num_envs, steps, policy)  # warm-up, as for the EnvRunner
            raw_best = max(raw_best, raw_loop(num_envs, steps, policy))
        rows.append(
            {
                "sub-envs": num_envs,
                "raw loop (steps/s)": f"{raw_best:,.0f}",
                "rlmod EnvRunner (steps/s)": f"{runner_best:,.0f}",
                "ratio": f"{runner_best / raw_best:.2f}",
            }
        )
    table(rows, ["sub-envs", "raw loop (steps/s)", "rlmod EnvRunner (steps/s)", "ratio"])


if __name__ == "__main__":
    main()
