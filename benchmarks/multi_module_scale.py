"""Multi-module scale: specs, per-module configs and modules for 10 to 10,000 module IDs;
build and first train() of a 1,000-agent, 1,000-module PPO; multi-agent sampling speed.

Each measurement that reports memory runs in a fresh Python process (peak RSS from
resource.getrusage). RLlib is compared side by side where it is installed.

    python benchmarks/multi_module_scale.py [--sizes 10 100 1000 10000] [--skip-train]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

import numpy as np
from _common import header, table

SPEC_CHILD = r"""
import json, resource, statistics, sys, time
import gymnasium as gym
import numpy as np
import torch
from rlmod.algorithms.ppo import PPOConfig

n = int(sys.argv[1])
torch.set_num_threads(1)
box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
act = gym.spaces.Discrete(2)
ids = [f"m{i}" for i in range(n)]
overrides = {ids[i]: {"lr": 1e-3 * (i + 1)} for i in range(min(5, n))}  # a handful
spaces = {"__env__": (box, act), **{m: (box, act) for m in ids}}

def make_config():
    return (PPOConfig().multi_agent(policies=set(ids), policy_mapping_fn=lambda a, e: a)
            .rl_module(algorithm_config_overrides_per_module=overrides))

def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); out = fn(); times.append(time.perf_counter() - t)
    return min(times), out

repeats = 5 if n <= 1000 else 2
spec_s, spec = best_of(lambda: make_config().get_multi_rl_module_spec(spaces=spaces), repeats)
def all_configs():  # a fresh config: includes making the cached copies
    config = make_config()
    t = time.perf_counter()
    for m in ids:
        config.get_config_for_module(m)
    first = time.perf_counter() - t
    t = time.perf_counter()
    for m in ids:
        config.get_config_for_module(m)
    return first, time.perf_counter() - t
cfg_times = [all_configs() for _ in range(repeats)]
cfg_first_s = min(t[0] for t in cfg_times)
cfg_cached_s = min(t[1] for t in cfg_times)
config = make_config()
assert config.get_config_for_module(ids[0]) is config.get_config_for_module(ids[0])
assert config.get_config_for_module(ids[-1]) is config or n <= 5
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
module = spec.build()
build_s = time.perf_counter() - t
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
param_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
print(json.dumps({"n": n, "spec_s": spec_s, "cfg_first_s": cfg_first_s,
                  "cfg_cached_s": cfg_cached_s, "build_s": build_s,
                  "rss_delta_kb": rss1 - rss0, "param_bytes": param_bytes}))
"""

BUILD_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole
n = int(sys.argv[1])
config = (PPOConfig()
          .environment(MultiAgentCartPole, env_config={"num_agents": n})
          .multi_agent(policies={f"a{i}" for i in range(n)},
                       policy_mapping_fn=lambda aid, episode: f"a{aid}")
          # 64 env steps (~20k agent steps) per iteration; each module's few rows in one
          # SGD step per epoch.
          .training(train_batch_size=64, minibatch_size=None)
          .debugging(seed=0))
t1 = time.perf_counter()
algo = config.build_algo()
build_s = time.perf_counter() - t1
rss_after_build = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
result = algo.train()
train_s = time.perf_counter() - t
print(json.dumps({
    "import_s": t1 - t0, "build_s": build_s, "rss_after_build_mb": rss_after_build / 1024,
    "train_s": train_s, "timers": result["timers"],
    "rss_after_train_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "modules_trained": sum(1 for k in result["learners"] if k != "__all_modules__"),
    "agent_steps": result["env_runners"]["num_agent_steps_sampled"]}))
"""

SAMPLE_CHILD = r"""
import json, sys, time
import numpy as np
import torch
from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole

num_agents, num_modules, num_envs, rounds = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(1)
env = MultiAgentCartPole({"num_agents": num_agents})
env.reset(seed=0)
rng = np.random.default_rng(0)

def raw(budget_s):  # the env's own rate: step() with random actions, nothing around it
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < budget_s:
        agents = env.agents
        _, _, te, tr, _ = env.step(dict(zip(agents, rng.integers(0, 2, len(agents)).tolist())))
        n += len(agents)
        if te["__all__"] or tr["__all__"]:
            env.reset()
    return n / (time.perf_counter() - t)

config = (PPOConfig()
          .environment(MultiAgentCartPole, env_config={"num_agents": num_agents})
          .env_runners(num_envs_per_env_runner=num_envs)
          .multi_agent(policies={f"p{i}" for i in range(num_modules)},
                       policy_mapping_fn=lambda aid, episode: f"p{aid % num_modules}")
          .debugging(seed=0))
runner = MultiAgentEnvRunner(config=config)
runner.sample(num_timesteps=num_envs * 20)
runner.get_metrics()

def sampled(budget_s):  # steady state: one untimed call first, as for the single-agent runner
    runner.sample(num_timesteps=num_envs * 50)
    runner.get_metrics()
    t = time.perf_counter()
    while time.perf_counter() - t < budget_s:
        runner.sample(num_timesteps=num_envs * 50)
    return runner.get_metrics()["num_agent_steps"] / (time.perf_counter() - t)

# Reference: only what any multi-agent runner must do (build action dicts, step, read the
# reward and flag dicts, stack observations, one forward pass + sampling per module);
# it records no rows. Its ratio bounds what bookkeeping-free sampling could reach.
module_list, m2e = [], []
for mid in sorted(runner.module.keys(), key=lambda m: int(m[1:])):
    module_list.append(runner.module[mid])
    m2e.append(runner._module_to_env[mid])
envs = [MultiAgentCartPole({"num_agents": num_agents}) for _ in range(num_envs)]
obs = [e.reset(seed=i)[0] for i, e in enumerate(envs)]

def minimal(budget_s):
    n, t = 0, time.perf_counter()
    with torch.inference_mode():
        while time.perf_counter() - t < budget_s:
            keys = [tuple(e.agents) for e in envs]
            vals = []
            for o, k in zip(obs, keys):
                vals.extend(o.values() if len(k) == len(o) else [o[a] for a in k])
            stacked = np.frombuffer(bytearray().join(vals), np.float32).reshape(-1, 4)
            group = np.concatenate([np.fromiter(k, np.int64, len(k)) for k in keys]) % num_modules
            actions = np.empty(len(group), np.int64)
            for m in range(num_modules):
                pos = np.flatnonzero(group == m)
                out = module_list[m].forward_exploration({"obs": torch.from_numpy(stacked[pos])})
                actions[pos] = m2e[m](out, rl_module=module_list[m], explore=True)["env_actions"]
            actions, off = actions.tolist(), 0
            for i, (e, k) in enumerate(zip(envs, keys)):
                o, r, te, tr, _ = e.step(dict(zip(k, actions[off:off + len(k)])))
                off += len(k)
                n += len(k)
                np.fromiter(r.values(), np.float64, len(r))
                np.fromiter(te.values(), bool, len(te))
                np.fromiter(tr.values(), bool, len(tr))
                obs[i] = e.reset()[0] if te["__all__"] or tr["__all__"] else o
    return n / (time.perf_counter() - t)

triples = [(raw(0.5), sampled(0.5), minimal(0.5)) for _ in range(rounds)]  # alternate
raws, runs, mins = zip(*triples)
ratios = [s / r for r, s, _ in triples]
print(json.dumps({"raw": float(np.median(raws)), "runner": float(np.median(runs)),
                  "ratio": float(np.median(ratios)), "ratio_min": min(ratios),
                  "ratio_max": max(ratios), "minimal": float(np.median(mins)),
                  "minimal_ratio": float(np.median([m / r for r, _, m in triples]))}))
"""


def child(code: str, *args: object) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10_000])
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()

    header("Multi-module scale")
    rllib = importlib.util.find_spec("ray") is not None and importlib.util.find_spec(
        "ray.rllib") is not None
    print("RLlib: " + ("installed, but no side-by-side run is written yet" if rllib else
                       "not installed; no side-by-side numbers (RLlib 2.x figures quoted "
                       "in issue 4: 6 s for get_multi_rl_module_spec at 1,000 modules)"))

    print("\n## Specs, per-module configs and modules (overrides for 5 modules)\n")
    rows = [child(SPEC_CHILD, n) for n in args.sizes]
    table([{
        "modules": f"{r['n']:,}",
        "get_multi_rl_module_spec ms": f"{r['spec_s'] * 1e3:.2f}",
        "get_config_for_module, all (first) ms": f"{r['cfg_first_s'] * 1e3:.2f}",
        "(cached) ms": f"{r['cfg_cached_s'] * 1e3:.2f}",
        "spec + configs ms": f"{(r['spec_s'] + r['cfg_first_s']) * 1e3:.2f}",
        "build MultiRLModule s": f"{r['build_s']:.2f}",
        "RSS / module KB": f"{r['rss_delta_kb'] / r['n']:.1f}",
        "params / module KB": f"{r['param_bytes'] / r['n'] / 1024:.1f}",
    } for r in rows], ["modules", "get_multi_rl_module_spec ms",
                       "get_config_for_module, all (first) ms", "(cached) ms",
                       "spec + configs ms", "build MultiRLModule s", "RSS / module KB",
                       "params / module KB"])
    if len(rows) >= 2:
        n = np.array([r["n"] for r in rows], float)
        print("\nGrowth with N (least squares on log-log: exponent 1 is linear; "
              "and the cost per module at the largest N):")
        for key, label in (("spec_s", "get_multi_rl_module_spec"),
                           ("cfg_first_s", "get_config_for_module over all"),
                           ("build_s", "build MultiRLModule")):
            t = np.array([r[key] for r in rows])
            exponent = np.polyfit(np.log(n), np.log(np.maximum(t, 1e-9)), 1)[0]
            slope = np.polyfit(n, t, 1)[0]
            print(f"- {label}: exponent {exponent:.2f}, slope {slope * 1e6:.2f} us per module")

    if not args.skip_train:
        print("\n## build_algo() and first train(): MultiAgentCartPole, 1,000 agents, "
              "one module per agent\n")
        r = child(BUILD_CHILD, 1000)
        table([{
            "build_algo s": f"{r['build_s']:.2f}",
            "peak RSS after build MB": f"{r['rss_after_build_mb']:.0f}",
            "first train() s": f"{r['train_s']:.2f}",
            "of it sample / learn / sync s": "{:.2f} / {:.2f} / {:.2f}".format(
                r["timers"]["sample_time_s"], r["timers"]["learn_time_s"],
                r["timers"]["sync_weights_time_s"]),
            "peak RSS after train MB": f"{r['rss_after_train_mb']:.0f}",
            "modules trained": r["modules_trained"],
            "agent steps": r["agent_steps"],
        }], ["build_algo s", "peak RSS after build MB", "first train() s",
             "of it sample / learn / sync s", "peak RSS after train MB", "modules trained",
             "agent steps"])

    print("\n## Sampling: MultiAgentCartPole, 1,000 agents mapped to 10 modules, one "
          "EnvRunner vs the env's raw rate (alternating, medians)\n")
    sample_rows = []
    for num_envs in args.num_envs:
        r = child(SAMPLE_CHILD, 1000, 10, num_envs, args.rounds)
        sample_rows.append({
            "num_envs_per_env_runner": num_envs,
            "raw env agent steps/s": f"{r['raw']:,.0f}",
            "EnvRunner agent steps/s": f"{r['runner']:,.0f}",
            "ratio": f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})",
            "minimal loop agent steps/s": f"{r['minimal']:,.0f}",
            "minimal loop ratio": f"{r['minimal_ratio']:.2f}",
        })
    table(sample_rows, ["num_envs_per_env_runner", "raw env agent steps/s",
                        "EnvRunner agent steps/s", "ratio", "minimal loop agent steps/s",
                        "minimal loop ratio"])
    print("\nminimal loop: only what any runner must do (action dicts, step, read the dicts, "
          "stack obs, one forward pass + sampling per module), recording nothing.")


if __name__ == "__main__":
    main()
