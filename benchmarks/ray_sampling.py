"""Remote EnvRunners (Ray) against the in-process one: sampling throughput and start-up.

- Throughput: env steps per second of `EnvRunnerGroup.sample()` with the local EnvRunner,
  1 remote and 2 remote EnvRunners (each of the two samples half), on CartPole-v1 (an env
  that costs almost nothing per step) and on CartPole-v1 that burns `--env-cost-us` of CPU
  per step (a stand-in for a simulator). Steady state: one untimed call first; fastest of
  `--repeats` calls, setups interleaved.
- Start-up: `ray.init()`; `build_algo()` with 2 remote EnvRunners (actors started, spaces
  from a remote one, weights sent); the first `train()`; against the in-process
  `build_algo()` and first `train()`. The same for PPO on a 1,000-agent
  MultiAgentCartPole with one module per agent (`--agents`).

    flock /tmp/bench.lock python benchmarks/ray_sampling.py [--steps 64000 --repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator

import gymnasium as gym
from _common import header, summary, table

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.learner_group import LearnerGroup
from rlmod.env import EnvRunnerGroup


class CostlyCartPole(gym.Wrapper):
    """CartPole-v1 that busy-waits `cost_us` microseconds of CPU in every step."""

    def __init__(self, env_config: dict) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.cost_s = env_config.get("cost_us", 0) / 1e6

    def step(self, action):  # type: ignore[no-untyped-def]
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:
            pass
        return self.env.step(action)


def config(env: object, env_config: dict, num_env_runners: int) -> PPOConfig:
    # Half a CPU per actor: the 1- and 2-runner groups live side by side (3 actors) to be
    # timed interleaved, and only one group samples at a time. With 1 CPU each the third
    # actor never gets scheduled on 2 cores (it timed out at sample_timeout_s).
    return (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(
            num_env_runners=num_env_runners, num_envs_per_env_runner=16, num_cpus_per_env_runner=0.5
        )
        .debugging(seed=0)
    )


def throughput(env: object, env_config: dict, steps: int, repeats: int) -> dict[str, float]:
    groups = {n: EnvRunnerGroup(config=config(env, env_config, n)) for n in (0, 1, 2)}
    best = dict.fromkeys(groups, float("inf"))
    for n, g in groups.items():  # warm-up: buffers sized, actors' first call done
        g.sample(num_timesteps=steps // max(1, n))
    for _ in range(repeats):
        for n, g in groups.items():
            start = time.perf_counter()
            g.sample(num_timesteps=steps // max(1, n))
            best[n] = min(best[n], time.perf_counter() - start)
    for g in groups.values():
        g.stop()
    return {f"{n}": steps / best[n] for n in groups}


def startup() -> list[dict]:
    import ray

    rows = []
    start = time.perf_counter()
    algo = config("CartPole-v1", {}, 0).build_algo()
    built = time.perf_counter()
    algo.train()
    rows.append(
        {
            "setup": "in-process",
            "ray.init s": "-",
            "build_algo s": f"{built - start:.2f}",
            "first train s": f"{time.perf_counter() - built:.2f}",
        }
    )
    algo.stop()
    start = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False)
    inited = time.perf_counter()
    algo = config("CartPole-v1", {}, 2).build_algo()
    built = time.perf_counter()
    algo.train()
    rows.append(
        {
            "setup": "2 remote EnvRunners",
            "ray.init s": f"{inited - start:.2f}",
            "build_algo s": f"{built - inited:.2f}",
            "first train s": f"{time.perf_counter() - built:.2f}",
        }
    )
    algo.stop()
    return rows


def multi_agent_build(
    num_agents: int,
    *,
    train: bool = True,
    runner_counts: tuple[int, ...] = (0, 2),
    hiddens: tuple[int, ...] = (256, 256),
) -> list[dict]:
    """`build_algo()` and the first `train()` of PPO on a `num_agents`-agent
    MultiAgentCartPole with one module per agent (multi_module_scale.py's build case:
    RLlib's default [256, 256] model; issue 17's table uses [64, 64]), in-process and
    with 2 remote EnvRunners (Ray already running)."""
    from rlmod.testing import MultiAgentCartPole

    rows = []
    for runners in runner_counts:
        config = (
            PPOConfig()
            .environment(MultiAgentCartPole, env_config={"num_agents": num_agents})
            .multi_agent(
                policies={f"a{i}" for i in range(num_agents)},
                policy_mapping_fn=_one_module_per_agent,
            )
            .rl_module(model_config={"fcnet_hiddens": list(hiddens)})
            .env_runners(num_env_runners=runners)
            .training(train_batch_size=64, minibatch_size=None)
            .debugging(seed=0)
        )
        phases: dict[str, float] = {}
        cpu = time.process_time()
        start = time.perf_counter()
        with (
            _timed(phases, EnvRunnerGroup, "get_spaces"),
            _timed(phases, LearnerGroup, "__init__"),
            _timed(phases, EnvRunnerGroup, "sync_weights"),
        ):
            algo = config.build_algo()
        built = time.perf_counter()
        cpu = time.process_time() - cpu
        if not train:
            rows.append(
                {
                    "setup": "in-process" if runners == 0 else f"{runners} remote EnvRunners",
                    "agents": f"{num_agents:,}",
                    "build_algo s": f"{built - start:.2f}",
                    "driver CPU s": f"{cpu:.2f}",
                    "of it spaces / Learner / sync s": " / ".join(
                        f"{phases.get(k, 0.0):.2f}"
                        for k in ("get_spaces", "__init__", "sync_weights")
                    ),
                }
            )
            algo.stop()
            continue
        result = algo.train()
        rows.append(
            {
                "setup": "in-process" if runners == 0 else f"{runners} remote EnvRunners",
                "agents": f"{num_agents:,}",
                "build_algo s": f"{built - start:.2f}",
                "of it spaces / Learner / sync s": " / ".join(
                    f"{phases.get(k, 0.0):.2f}" for k in ("get_spaces", "__init__", "sync_weights")
                ),
                "first train s": f"{time.perf_counter() - built:.2f}",
                "of it sample / learn / sync s": " / ".join(
                    f"{result['timers'][k]:.2f}"
                    for k in ("sample_time_s", "learn_time_s", "sync_weights_time_s")
                ),
            }
        )
        algo.stop()
    return rows


@contextlib.contextmanager
def _timed(into: dict[str, float], cls: type, name: str) -> Iterator[None]:
    """Adds the seconds spent in `cls.name` to `into[name]` while inside (build phases:
    waiting for a remote EnvRunner's spaces, building the Learner, the first weight sync)."""
    original = getattr(cls, name)

    def wrapper(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into[name] = into.get(name, 0.0) + time.perf_counter() - start

    setattr(cls, name, wrapper)
    try:
        yield
    finally:
        setattr(cls, name, original)


def _one_module_per_agent(agent_id: int, episode: object, **kwargs: object) -> str:
    return f"a{agent_id}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=64_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-cost-us", type=int, default=200)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument(
        "--only-build",
        action="store_true",
        help="only the 1,000-agent build (ray.init() first, not timed)",
    )
    parser.add_argument(
        "--runners",
        type=int,
        nargs="+",
        default=[0, 2],
        help="num_env_runners of the 1,000-agent builds",
    )
    parser.add_argument(
        "--hiddens",
        type=int,
        nargs="+",
        default=[256, 256],
        help="fcnet_hiddens of the 1,000-agent build's modules",
    )
    args = parser.parse_args()
    header("Remote EnvRunners (Ray) vs in-process: start-up and sampling throughput")
    if args.only_build:
        if any(args.runners):
            import ray

            ray.init(include_dashboard=False, log_to_driver=False)
    else:
        table(startup(), ["setup", "ray.init s", "build_algo s", "first train s"])
        print()
    ma = multi_agent_build(
        args.agents,
        train=not args.only_build,
        runner_counts=tuple(args.runners),
        hiddens=tuple(args.hiddens),
    )
    table(ma, list(ma[0]))
    print()
    if args.only_build:
        return
    rows, rates = [], {}
    for name, env, env_config, steps in (
        ("CartPole-v1", "CartPole-v1", {}, args.steps),
        (
            f"CartPole-v1 + {args.env_cost_us} us CPU/step",
            CostlyCartPole,
            {"cost_us": args.env_cost_us},
            args.steps // 8,
        ),
    ):
        rate = rates[name] = throughput(env, env_config, steps, args.repeats)
        rows.append(
            {
                "env": name,
                "steps per call": f"{steps:,}",
                "local (steps/s)": f"{rate['0']:,.0f}",
                "1 remote (steps/s)": f"{rate['1']:,.0f}",
                "2 remote (steps/s)": f"{rate['2']:,.0f}",
                "1 remote / local": f"{rate['1'] / rate['0']:.2f}",
                "2 remote / local": f"{rate['2'] / rate['0']:.2f}",
            }
        )
    table(rows, list(rows[0]))
    costly = rates[rows[-1]["env"]]
    remote = next((r for r in ma if r["setup"].endswith("remote EnvRunners")), None)
    build = "" if remote is None else f"; build {remote['build_algo s']}"
    summary(
        f"Ray: 2 remote EnvRunners, steps/s on CartPole + {args.env_cost_us} us CPU/step "
        f"(1 env runner per core); {args.agents:,}-agent build_algo() s",
        rlmod=f"{costly['2']:,.0f}{build}",
        limit=f"2 x in-process {2 * costly['0']:,.0f}",
        ratio=f"{costly['2'] / (2 * costly['0']):.2f} of 2 x in-process",
    )


if __name__ == "__main__":
    main()
