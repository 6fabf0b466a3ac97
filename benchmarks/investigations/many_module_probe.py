"""Why do single modules of a many-module PPO run stay behind? MultiAgentCartPole with N
agents on N independent modules (one thread, so two probes can run side by side on two
cores), with the PPO settings given as JSON on top of FAST_PPO. Every 25 iterations it
prints the number of agents whose training mean (over its last 100 episodes) is below
450 and, for the 4 weakest, the module's entropy, value explained variance, mean KL and
rows; at the stop, why their greedy policies fail on CartPole-v1 (pole angle "theta",
cart off the track "x", or "trunc" at 500 steps) and how saturated their value
encoders' tanh layers are on states from random play (a saturated layer gives a constant
V: a dead value function). Not a timing benchmark.

    python benchmarks/investigations/many_module_probe.py --agents 100 --seed 1 --max-iterations 400 \\
        [--settings '{"gamma": 0.99, ...}']

--settings defaults to multi_agent_learning.py's MANY_PPO, the settings the benchmark runs.

Stops when every agent's training mean is >= 450 (printed "reached"), or after
--max-iterations.
"""

from __future__ import annotations

import argparse
import json
import time

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import gymnasium as gym
import numpy as np
import torch
from multi_agent_learning import MANY_PPO

from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole
from rlmod.tuned import FAST_PPO


def greedy_failures(module: torch.nn.Module, episodes: int = 5) -> list[tuple[int, str]]:
    """(length, why it ended) of `episodes` greedy CartPole-v1 episodes of `module`."""
    env = gym.make("CartPole-v1")
    out = []
    for e in range(episodes):
        obs, _ = env.reset(seed=1000 + e)
        length, term, trunc = 0, False, False
        while not (term or trunc):
            with torch.no_grad():
                logits = module.forward_inference(
                    {"obs": torch.as_tensor(obs[None], dtype=torch.float32)}
                )["action_dist_inputs"]
            obs, _, term, trunc, _ = env.step(int(logits.argmax()))
            length += 1
        out.append((length, "x" if abs(obs[0]) > 2.4 else "theta" if term else "trunc"))
    return out


def random_play_states(episodes: int = 20) -> torch.Tensor:
    """Observations of `episodes` random-play CartPole-v1 episodes (at most 100 steps each)."""
    env = gym.make("CartPole-v1")
    states = []
    for e in range(episodes):
        obs, _ = env.reset(seed=2000 + e)
        for _ in range(100):
            states.append(obs)
            obs, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                break
    return torch.as_tensor(np.array(states), dtype=torch.float32)


def value_health(module: torch.nn.Module, states: torch.Tensor) -> str:
    """V's mean and std over `states`, and the fraction of saturated (|tanh| > 0.99)
    outputs per tanh layer of the value encoder (the shared one with vf_share_layers)."""
    saturated, h = [], states
    with torch.no_grad():
        for layer in getattr(module, "vf_encoder", module.encoder):
            h = layer(h)
            if isinstance(layer, torch.nn.Tanh):
                saturated.append(round(float((h.abs() > 0.99).float().mean()), 2))
        v = module.compute_values({"obs": states})
    return f"V mean {v.mean():.1f}, std {v.std():.2f}, tanh saturated {saturated}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-iterations", type=int, default=400)
    parser.add_argument(
        "--settings",
        default=json.dumps(MANY_PPO),
        help="PPO settings (JSON) over FAST_PPO; default MANY_PPO",
    )
    args = parser.parse_args()
    n, settings = args.agents, json.loads(args.settings)
    config = (
        PPOConfig()
        .update_from_dict({**FAST_PPO, **settings})
        .environment(MultiAgentCartPole, env_config={"num_agents": n})
        .learners(num_threads_per_learner=1)
        .multi_agent(
            policies={f"m{i}" for i in range(n)},
            policy_mapping_fn=lambda aid, episode: f"m{aid % n}",
        )
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    print(
        f"{n} agents on {n} modules, seed {args.seed}, settings {json.dumps(settings)}", flush=True
    )
    means: dict[int, float] = {}
    start = time.time()
    for it in range(1, args.max_iterations + 1):
        result = algo.train()
        means.update(result["env_runners"]["agent_episode_returns_mean"])
        weakest = sorted(means.items(), key=lambda kv: kv[1])
        below = sum(v < 450 for _, v in weakest) + n - len(weakest)
        if it % 25 == 0 or below == 0:
            stats = []
            for aid, mean in weakest[:4]:
                s = result["learners"].get(f"m{aid}", {})
                stats.append(
                    f"m{aid} {mean:.0f}: entropy {s.get('entropy', np.nan):.3f}, "
                    f"explained var {s.get('vf_explained_var', np.nan):.2f}, "
                    f"KL {s.get('mean_kl_loss', np.nan):.4f}, "
                    f"rows {s.get('num_module_steps_trained', 0)}"
                )
            print(
                f"it. {it}, {result['num_env_steps_sampled_lifetime']} env steps, "
                f"{time.time() - start:.0f} s: {below} below 450 | " + " | ".join(stats),
                flush=True,
            )
        if below == 0:
            print(f"reached at iteration {it}")
            break
    states = random_play_states()
    for aid, mean in weakest[:4]:
        module = algo.learner_group.learner.module[f"m{aid}"]
        print(
            f"m{aid} (training mean {mean:.0f}): greedy episodes {greedy_failures(module)}; "
            f"{value_health(module, states)}"
        )


if __name__ == "__main__":
    main()
