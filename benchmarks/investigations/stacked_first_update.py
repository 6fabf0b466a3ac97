"""The Learner part of issue 17's first `train()`: one `Learner.update()` on the very batch
a 1,000-agent MultiAgentCartPole (one module per agent, [64, 64]) samples first.

`capture` runs the benchmark's first `train()` once and stores the batch the Learner got
(a directory of rlmod's state files: JSON and safetensors, no pickle); `time` builds a fresh Learner in this process and times its first and second
`update()` on that batch. Run `time` with two source trees alternating (PYTHONPATH) to
compare commits on one batch:

    python benchmarks/investigations/stacked_first_update.py capture /tmp/b64 --batch 64
    python benchmarks/investigations/stacked_first_update.py time /tmp/b64 --batch 64 [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole
from rlmod.utils.state_files import read_state, write_state


def make_config(num_agents: int, batch: int, num_envs: int) -> PPOConfig:
    """benchmarks/_stacked_scale.py's I17_TRAIN config."""
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": num_agents})
        .env_runners(num_envs_per_env_runner=num_envs)
        .multi_agent(
            policies={f"a{i}" for i in range(num_agents)},
            policy_mapping_fn=lambda aid, episode: f"a{aid}",
        )
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .training(train_batch_size=batch, minibatch_size=None if batch < 128 else 128)
        .debugging(seed=0)
    )


def capture(path: str, num_agents: int, batch: int, num_envs: int) -> None:
    algo = make_config(num_agents, batch, num_envs).build_algo()
    group = algo.learner_group
    update = group.update

    def spy(episodes, **kwargs):
        Path(path).mkdir(parents=True, exist_ok=True)
        write_state(Path(path), {"episodes": episodes, "kwargs": kwargs})
        return update(episodes, **kwargs)

    group.update = spy
    algo.train()
    algo.stop()


def time_updates(path: str, batch: int, epochs: int | None) -> None:
    stored = read_state(Path(path))
    episodes, kwargs = stored["episodes"], stored["kwargs"]
    first = episodes[0] if isinstance(episodes, list) else episodes
    config = make_config(len(first), batch, 1)
    if epochs:
        config.training(num_epochs=epochs)
    box = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    spaces = {
        "__env__": (box, gym.spaces.Discrete(2)),
        **{m: (box, gym.spaces.Discrete(2)) for m in first},
    }
    spec = config.get_multi_rl_module_spec(spaces=spaces, inference_only=False)
    learner = config.get_default_learner_class()(config=config, module_spec=spec)
    learner.build()
    rows = np.array([len(cols["obs"]) for cols in first.values()])
    print(
        f"{len(rows)} modules, {rows.sum():,} rows (10/50/90th percentile "
        f"{np.percentile(rows, [10, 50, 90]).tolist()}, most {rows.max()}), "
        f"{torch.get_num_threads()} torch threads"
    )
    for name in ("first", "second"):
        t = time.perf_counter()
        learner.update(episodes, **kwargs)
        print(f"{name} update {time.perf_counter() - t:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["capture", "time"])
    parser.add_argument("path")
    parser.add_argument("--batch", type=int, default=64, help="train_batch_size (env steps)")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--envs", type=int, default=1, help="envs per EnvRunner (capture)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=None, help="num_epochs (time)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.mode == "capture":
        capture(args.path, args.agents, args.batch, args.envs)
    else:
        time_updates(args.path, args.batch, args.epochs)


if __name__ == "__main__":
    main()
