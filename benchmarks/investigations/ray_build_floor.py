"""The floor of the 1,000-agent build with 2 remote EnvRunners, timed beside rlmod's build.

Issue 15's target: `build_algo()` of PPO on a 1,000-agent MultiAgentCartPole, one
[256, 256] module per agent, with 2 remote EnvRunners, under 10 s. Whatever a remote build
does, it cannot do less than this (the floor, each step the least that must happen):

1. **actors**: start 2 Ray actors that import torch and rlmod's EnvRunner module (an actor
   that holds torch modules must import them) and answer one call: the first answer is
   when the driver can know the spaces;
2. **learner modules**: build the Learner's 1,000 modules from the same spec with their
   initial weights (`MultiRLModuleSpec.build()`: the orthogonal inits, the same values
   as the Learner's), no optimizer and no stacking;
3. **weights**: one flat float32 buffer of all inference-only weights (one copy out of the
   modules), one `ray.put` of it, and each actor copies it into one preallocated tensor
   of the same size (its modules' storage; allocated while the driver builds).

Steps 1 and 2 overlap (the driver waits for the first answer, then builds while the
actors allocate), as in rlmod's build. `ray.init()` is done first and timed on its own;
rlmod's build (`build_algo()`, the full PPO Algorithm: Learner with optimizer and stacked
groups, EnvRunners with envs and stacked acting groups) and the floor alternate in one
process, `--rounds` times each; the in-process `build_algo()` is timed too.

    flock /tmp/bench.lock python benchmarks/investigations/ray_build_floor.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import time

import _suite_path  # noqa: F401  (benchmarks/ on sys.path)
import numpy as np
import torch
from _common import header, table

from rlmod.algorithms.ppo import PPOConfig


def config(num_agents: int, runners: int) -> PPOConfig:
    """ray_sampling.py's 1,000-agent build (`multi_agent_build`): RLlib's default model."""
    from rlmod.testing import MultiAgentCartPole

    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": num_agents})
        .multi_agent(
            policies={f"a{i}" for i in range(num_agents)}, policy_mapping_fn=_one_module_per_agent
        )
        .rl_module(model_config={"fcnet_hiddens": [256, 256]})
        .env_runners(num_env_runners=runners)
        .training(train_batch_size=64, minibatch_size=None)
        .debugging(seed=0)
    )


def _one_module_per_agent(agent_id: int, episode: object, **kwargs: object) -> str:
    return f"a{agent_id}"


class FloorActor:
    """An actor that imports what an EnvRunner imports and holds one flat weight buffer."""

    def __init__(self) -> None:
        import rlmod.env.multi_agent_env_runner  # noqa: F401 - torch, gymnasium, rlmod

        self.storage: torch.Tensor | None = None

    def ready(self) -> float:
        return time.time()

    def allocate(self, numel: int) -> None:
        self.storage = torch.empty(numel)
        self.storage.zero_()  # touched, as a built module's storage is

    def load(self, flat: np.ndarray) -> float:
        assert self.storage is not None
        self.storage.copy_(torch.from_numpy(flat))
        return time.time()


def floor_build(num_agents: int, spaces: dict) -> dict[str, float]:
    """The floor steps; returns the seconds of each and in all."""
    import ray

    actor_cls = ray.remote(num_cpus=1)(FloorActor)
    spec = config(num_agents, 2).get_multi_rl_module_spec(spaces=spaces, inference_only=False)
    start = time.perf_counter()
    actors = [actor_cls.remote() for _ in range(2)]
    first = ray.get(actors[0].ready.remote())  # the spaces would come with this answer
    answered = time.perf_counter()
    modules = spec.build()
    built = time.perf_counter()
    parts = [
        t.detach().reshape(-1)
        for m in modules.values()
        for t in m.get_state(inference_only=True).values()
    ]
    inference_numel = sum(p.numel() for p in parts)
    allocated = [a.allocate.remote(inference_numel) for a in actors]
    flat = torch.cat(parts).numpy()
    ref = ray.put(flat)
    ray.get(allocated)
    ray.get([a.load.remote(ref) for a in actors])
    end = time.perf_counter()
    del first
    for a in actors:
        ray.kill(a)
    return {
        "actors": answered - start,
        "learner modules": built - answered,
        "weights": end - built,
        "total": end - start,
        "MB": inference_numel * 4 / 1e6,
    }


def rlmod_build(num_agents: int, runners: int) -> float:
    cfg = config(num_agents, runners)
    start = time.perf_counter()
    algo = cfg.build_algo()
    seconds = time.perf_counter() - start
    algo.stop()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    header("The 1,000-agent build with 2 remote EnvRunners: rlmod against its floor")
    import ray

    from rlmod.env.multi_agent_env_runner import MultiAgentEnvRunner

    start = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False)
    print(f"ray.init(): {time.perf_counter() - start:.2f} s (not part of build_algo())\n")
    runner = MultiAgentEnvRunner(config=config(args.agents, 2), worker_index=1)
    spaces = runner.get_spaces()  # what the floor's first actor would answer
    runner.stop()
    rows = []
    for r in range(args.rounds):
        local = rlmod_build(args.agents, 0)
        remote = rlmod_build(args.agents, 2)
        floor = floor_build(args.agents, spaces)
        rows.append(
            {
                "round": str(r),
                "in-process build_algo s": f"{local:.2f}",
                "2 remote build_algo s": f"{remote:.2f}",
                "floor s": f"{floor['total']:.2f}",
                "floor: actors / learner modules / weights s": " / ".join(
                    f"{floor[k]:.2f}" for k in ("actors", "learner modules", "weights")
                ),
                "weights MB": f"{floor['MB']:.0f}",
                "remote / floor": f"{remote / floor['total']:.2f}",
            }
        )
    table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
