"""EnvRunner sampling throughput on CartPole-v1 vs the raw loop it cannot beat, and vs
Stable-Baselines3's rollout collection.

The raw loop: gymnasium's native vectorized CartPole (`vector_entry_point`), the same MLP
forward pass and action sampling, nothing around it. The EnvRunner adds connectors, the
log-prob, and the batch it returns. SB3: `PPO.collect_rollouts` into its rollout buffer
with its default MlpPolicy (64x64 tanh, as here; it also runs the value head) over
`make_vec_env`'s DummyVecEnv, what `PPO.learn` does between updates. All are timed in
steady state (after one untimed run of the same size, as in training, where every
iteration samples the same amount) in this process, one torch thread, interleaved, best of
`--repeats`, so the ratios are fair even on a loaded machine.

    python benchmarks/sampling_throughput.py [--steps 200000] [--repeats 3] [--skip-sb3]
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import gymnasium as gym
import torch
from _common import header, summary, table

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


def sb3_rollouts(num_envs: int, steps: int) -> float:
    """Steps/s of SB3's `PPO.collect_rollouts` (a second call, after a warm-up one)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=num_envs, seed=0)
    n_steps = max(1, steps // num_envs)
    model = PPO("MlpPolicy", env, n_steps=n_steps, batch_size=n_steps * num_envs, seed=0)
    _, callback = model._setup_learn(n_steps * num_envs)
    model.collect_rollouts(env, callback, model.rollout_buffer, n_rollout_steps=n_steps)
    start = time.perf_counter()
    model.collect_rollouts(env, callback, model.rollout_buffer, n_rollout_steps=n_steps)
    return n_steps * num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-sb3", action="store_true")
    args = parser.parse_args()
    sb3 = not args.skip_sb3 and importlib.util.find_spec("stable_baselines3") is not None
    torch.set_num_threads(1)
    header("EnvRunner sampling throughput, CartPole-v1, exploring")
    rows = []
    for num_envs in (1, 64):
        steps = args.steps if num_envs > 1 else args.steps // 10
        runner_best = raw_best = sb3_best = 0.0
        for _ in range(args.repeats):
            rate, policy = env_runner(num_envs, steps)
            runner_best = max(runner_best, rate)
            raw_loop(num_envs, steps, policy)  # warm-up, as for the EnvRunner
            raw_best = max(raw_best, raw_loop(num_envs, steps, policy))
            if sb3:
                sb3_best = max(sb3_best, sb3_rollouts(num_envs, steps))
        rows.append(
            {
                "sub-envs": num_envs,
                "raw loop (steps/s)": f"{raw_best:,.0f}",
                "rlmod EnvRunner (steps/s)": f"{runner_best:,.0f}",
                "ratio": f"{runner_best / raw_best:.2f}",
                "SB3 rollouts (steps/s)": f"{sb3_best:,.0f}" if sb3 else "-",
                "rlmod / SB3": f"{runner_best / sb3_best:.1f}" if sb3 else "-",
            }
        )
    columns = ["sub-envs", "raw loop (steps/s)", "rlmod EnvRunner (steps/s)", "ratio"]
    table(rows, columns + ["SB3 rollouts (steps/s)", "rlmod / SB3"])
    last = rows[-1]
    summary(
        f"sampling steps/s, CartPole-v1, {last['sub-envs']} sub-envs, exploring",
        rlmod=last["rlmod EnvRunner (steps/s)"],
        peer=f"SB3 {last['SB3 rollouts (steps/s)']}",
        limit=f"raw loop {last['raw loop (steps/s)']}",
        ratio=f"{last['ratio']} of raw loop" + (f", {last['rlmod / SB3']}x SB3" if sb3 else ""),
    )


if __name__ == "__main__":
    main()
