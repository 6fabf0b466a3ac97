"""Example: MARWIL (beta=1) against BC on half expert, half random CartPole data.

The data holds as many timesteps of a scripted expert (return 500) as of a uniformly random
policy (return ~22): counted in timesteps, since a random episode is ~25x shorter than an
expert one and "half the episodes" would leave BC with 96% expert rows. The two are
interleaved episode by episode (`MixedPolicy`), so every file is half expert, and the
recording is seeded (same files, names included, every time), so the reader's file order
and batches repeat: the comparison is decided by the algorithms, not by which files the
reader happened to take last. BC imitates the mixture; MARWIL (Wang et al. 2018) weights
each row by exp(beta * A / c), the advantage of the recorded action under a learned value
function, and so leans towards the expert's actions. Both train on Learners that never
build an env, then are evaluated on CartPole-v1.

    python examples/offline/cartpole_marwil.py
    python examples/offline/cartpole_marwil.py --seeds 0 1 2 --iterations 30

The last line printed is `RESULT {json}` (per algorithm: the final evaluation return of
each seed), which `benchmarks/offline.py` parses.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import gymnasium as gym

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.offline import record_episodes
from rlmod.testing import RandomPolicy, cartpole_expert


class MixedPolicy:
    """The expert or a uniformly random policy, chosen per episode so that the timesteps
    of both stay balanced as recording goes: an expert episode whenever the random rows
    have caught up with the expert rows, else a random one. Every file thus holds about
    as many expert as random rows, whatever order the reader takes the files in."""

    def __init__(self, action_space: gym.Space, *, seed: int) -> None:
        self.random = RandomPolicy(action_space, seed=seed)
        self.expert_rows = self.random_rows = self.expert_episodes = 0
        self.use_expert = True

    def on_episode_start(self) -> None:
        self.use_expert = self.random_rows >= self.expert_rows
        self.expert_episodes += self.use_expert

    def __call__(self, obs: object) -> object:
        if self.use_expert:
            self.expert_rows += 1
            return cartpole_expert(obs)
        self.random_rows += 1
        return self.random(obs)


def record_mixture(data: Path, *, num_episodes: int = 480, seed: int = 0) -> dict[str, int]:
    """`num_episodes` episodes of `MixedPolicy`, seeded: the same files every time."""
    env = gym.make("CartPole-v1")
    policy = MixedPolicy(env.action_space, seed=seed)
    record_episodes(
        env,
        policy,
        num_episodes=num_episodes,
        output_dir=data,
        seed=seed,
        on_episode_start=policy.on_episode_start,
    )
    return {
        "expert_rows": policy.expert_rows,
        "random_rows": policy.random_rows,
        "expert_episodes": policy.expert_episodes,
        "random_episodes": num_episodes - policy.expert_episodes,
    }


def train(
    config_cls: type, data: Path, *, seed: int, iterations: int, adv_norm_rate: float
) -> float:
    """Final evaluation return (20 episodes) after `iterations` updates."""
    config = (
        config_cls()
        .environment("CartPole-v1")
        .offline_data(input_=str(data))
        .training(lr=3e-3, train_batch_size=2000, minibatch_size=250, num_epochs=2)
        .evaluation(evaluation_interval=iterations, evaluation_duration=20)
        .debugging(seed=seed)
    )
    if config_cls is MARWILConfig:
        config.training(moving_average_sqd_adv_norm_update_rate=adv_norm_rate)
    algo = config.build_algo()
    for _ in range(iterations):
        result = algo.train()
    algo.stop()
    return float(result["evaluation"]["env_runners"]["episode_return_mean"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="Recorded mixture; recorded if empty.")
    parser.add_argument(
        "--episodes",
        type=int,
        default=480,
        help="Episodes to record (about 20 expert ones, the rest random).",
    )
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--adv-norm-rate",
        type=float,
        default=1e-8,
        help="MARWIL's moving_average_sqd_adv_norm_update_rate (RLlib's "
        "default 1e-8 keeps c^2 at its start value, 100).",
    )
    args = parser.parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="cartpole_mixture_"))
    if not any(data.glob("*.parquet")):
        print("recorded", record_mixture(data, num_episodes=args.episodes, seed=0))
    out: dict[str, list[float]] = {"BC": [], "MARWIL": []}
    for seed in args.seeds:
        for name, cls in (("BC", BCConfig), ("MARWIL", MARWILConfig)):
            out[name].append(
                train(
                    cls,
                    data,
                    seed=seed,
                    iterations=args.iterations,
                    adv_norm_rate=args.adv_norm_rate,
                )
            )
            print(f"seed {seed}  {name:6s}  eval return {out[name][-1]:6.1f}", flush=True)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
