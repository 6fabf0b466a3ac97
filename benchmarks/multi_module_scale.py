"""Multi-module scale: specs, per-module configs and modules for 10 to 10,000 module IDs;
build and first train() of a 1,000-agent, 1,000-module PPO; multi-agent sampling speed;
each for rlmod and, side by side, Ray RLlib (new API stack) where an interpreter has it.

Each measurement runs in a fresh Python process per library (peak RSS from
resource.getrusage); RLlib's children run with --rllib-python, under --rllib-timeout.

    python benchmarks/multi_module_scale.py [--sizes 10 100 1000 10000] [--skip-train]
        [--skip-sample] [--num-envs 32 64] [--rounds 12]
        [--rllib-python /path/to/python] [--rllib-max-n 1000] [--rllib-timeout 900]
        [--issue17-only] [--skip-issue17] [--skip-10k] [--issue17-sample-only]
        [--issue17-threads auto|N]

Issue 17 (stacked modules) has its own section and table: build and first train() of
1,000 agents with one module each (64 and 4,000 env steps), peak RSS, sampling and Learner
throughput with 1,000 modules against 10 at the same rows (side by side in one process),
and 10,000 agents and modules built and trained once.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import _rllib_scale as rl
import numpy as np
from _common import header, summary, table
from _stacked_scale import issue17_section

DEFAULT_RLLIB_PYTHON = (
    sys.executable
    if importlib.util.find_spec("ray") is not None
    and importlib.util.find_spec("ray.rllib") is not None
    else None
)

# Each child is HEADER + a library's prelude + a shared body. A prelude defines what the
# body needs from its library (see _rllib_scale.py for the list); rlmod's are below.
HEADER = "OPTS = {!r}\nimport json, resource, sys, time\n"

RLMOD_SPEC = r"""
from rlmod.algorithms.ppo import PPOConfig
adjust = lambda config: config

def get_spec(config, spaces):
    return config.get_multi_rl_module_spec(spaces=spaces)
"""

SPEC_BODY = r"""
import gymnasium as gym
import numpy as np
import torch

n = int(sys.argv[1])
torch.set_num_threads(1)
box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
act = gym.spaces.Discrete(2)
ids = [f"m{i}" for i in range(n)]
overrides = {ids[i]: {"lr": 1e-3 * (i + 1)} for i in range(min(5, n))}  # a handful
spaces = {"__env__": (box, act), **{m: (box, act) for m in ids}}

def make_config():
    return (adjust(PPOConfig()).multi_agent(policies=set(ids), policy_mapping_fn=lambda a, e: a)
            .rl_module(algorithm_config_overrides_per_module=overrides))

def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); out = fn(); times.append(time.perf_counter() - t)
    return min(times), out

repeats = 5 if n <= 1000 else 2
spec_s, spec = best_of(lambda: get_spec(make_config(), spaces), repeats)
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
param_bytes = sum(p.numel() * p.element_size() for m in module.keys()
                  for p in module[m].parameters())
print(json.dumps({"n": n, "spec_s": spec_s, "cfg_first_s": cfg_first_s,
                  "cfg_cached_s": cfg_cached_s, "build_s": build_s,
                  "rss_delta_kb": rss1 - rss0, "param_bytes": param_bytes}))
"""

RLMOD_BUILD = r"""
from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole as ENV
adjust = lambda config: config
start = lambda: 0.0
stop = lambda: None
TIMERS = ("sample_time_s", "learn_time_s", "sync_weights_time_s")
"""

BUILD_BODY = r"""
n = int(sys.argv[1])
config = adjust(PPOConfig()
                .environment(ENV, env_config={"num_agents": n})
                .multi_agent(policies={f"a{i}" for i in range(n)},
                             policy_mapping_fn=lambda aid, episode: f"a{aid}")
                # 64 env steps (~20k agent steps at 1,000 agents) per iteration; each
                # module's few rows in one SGD step per epoch.
                .training(train_batch_size=64, minibatch_size=None)
                .debugging(seed=0))
start_s = start()
t = time.perf_counter()
algo = config.build_algo()
build_s = time.perf_counter() - t
rss_after_build = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
result = algo.train()
train_s = time.perf_counter() - t
steps = result["env_runners"]["num_agent_steps_sampled"]  # RLlib: per agent
print(json.dumps({
    "start_s": start_s, "build_s": build_s, "rss_after_build_mb": rss_after_build / 1024,
    "train_s": train_s, "timers": [result["timers"][k] for k in TIMERS],
    "rss_after_train_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "modules_trained": sum(1 for k in result["learners"] if k != "__all_modules__"),
    "agent_steps": int(sum(steps.values()) if isinstance(steps, dict) else steps)}))
stop()
"""

RLMOD_SAMPLE = r"""
from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole as ENV
adjust = lambda config: config
live = lambda env: env.agents
count = lambda episodes: 0
total = lambda metrics, counted: metrics["num_agent_steps"]

def make_floor(runner):
    # The floor: only what any multi-agent runner must do per step, in the leanest loop we
    # could write: one forward pass and sampling per module on the stacked observations,
    # the action dicts, step(), and reading every dict the env returns (observations
    # stacked, rewards, flags, who acts next). It records no rows, no returns, calls no
    # mapping function. It runs in steady state: 150 untimed steps first (fresh episodes
    # have all agents alive, which makes a step cheaper per agent).
    from itertools import chain, compress
    modules = [runner.module[f"p{m}"] for m in range(num_modules)]
    m2e = [runner._module_to_env[f"p{m}"] for m in range(num_modules)]
    module_of = (np.arange(num_agents) % num_modules).astype(np.uint16)
    envs = [ENV({"num_agents": num_agents}) for _ in range(num_envs)]

    def entry(keys, obs):  # acting agents, their stacked observations, their modules
        return [keys, np.frombuffer(bytearray().join(obs.values()), np.float32).reshape(-1, 4),
                module_of[np.fromiter(keys, np.int64, len(keys))]]

    state = [entry(tuple(o), o) for o in (e.reset(seed=i)[0] for i, e in enumerate(envs))]

    def step_all():
        obs = np.concatenate([s[1] for s in state])
        group = np.concatenate([s[2] for s in state])
        order = np.argsort(group, kind="stable")
        actions = np.empty(len(obs), np.int64)
        for pos in np.split(order, np.flatnonzero(np.diff(group[order])) + 1):
            m = int(group[pos[0]])
            out = modules[m].forward_exploration(
                {"obs": torch.from_numpy(np.take(obs, pos, axis=0))})
            actions[pos] = m2e[m](out, rl_module=modules[m], explore=True)["env_actions"]
        acts, off, n, rewards = actions.tolist(), 0, 0, []
        for i, e in enumerate(envs):
            keys = state[i][0]
            o, r, te, tr, _ = e.step(dict(zip(keys, acts[off:off + len(keys)])))
            off += len(keys)
            n += len(keys)
            okeys = tuple(o)
            rewards.append(r.values())
            x = np.frombuffer(bytearray().join(o.values()), np.float32).reshape(-1, 4)
            if te["__all__"] or tr["__all__"]:
                state[i] = entry(tuple(o := e.reset()[0]), o)
            elif any(te.values()) or any(tr.values()):
                keep = ~(np.fromiter(te.values(), bool, len(okeys))
                         | np.fromiter(tr.values(), bool, len(okeys)))
                state[i] = [tuple(compress(okeys, keep.tolist())), x[keep], state[i][2][keep]]
            else:
                state[i][1] = x
        np.fromiter(chain.from_iterable(rewards), np.float64)
        return n

    with torch.inference_mode():
        for _ in range(150):
            step_all()

    def floor(budget_s):
        n, t = 0, time.perf_counter()
        with torch.inference_mode():
            while time.perf_counter() - t < budget_s:
                n += step_all()
        return n / (time.perf_counter() - t)
    return floor
"""

SAMPLE_BODY = r"""
import numpy as np
import torch

num_agents, num_modules, num_envs, rounds, steps = (int(a) for a in sys.argv[1:6])
torch.set_num_threads(1)
env = ENV({"num_agents": num_agents})
env.reset(seed=0)
rng = np.random.default_rng(0)

def raw(budget_s):  # the env's own rate: step() with random actions, nothing around it
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < budget_s:
        agents = live(env)
        _, _, te, tr, _ = env.step(dict(zip(agents, rng.integers(0, 2, len(agents)).tolist())))
        n += len(agents)
        if te["__all__"] or tr["__all__"]:
            env.reset()
    return n / (time.perf_counter() - t)

config = adjust(PPOConfig()
                .environment(ENV, env_config={"num_agents": num_agents})
                .env_runners(num_envs_per_env_runner=num_envs)
                .multi_agent(policies={f"p{i}" for i in range(num_modules)},
                             policy_mapping_fn=lambda aid, episode: f"p{aid % num_modules}")
                .debugging(seed=0))
runner = MultiAgentEnvRunner(config=config)
runner.sample(num_timesteps=num_envs * min(steps, 20))
runner.get_metrics()

def sampled(budget_s):  # steady state: one untimed call first, as for the single-agent runner
    runner.sample(num_timesteps=num_envs * steps)
    runner.get_metrics()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < budget_s:
        n += count(runner.sample(num_timesteps=num_envs * steps))
    return total(runner.get_metrics(), n) / (time.perf_counter() - t)

floor = make_floor(runner) if make_floor else lambda budget_s: float("nan")
# Alternate in short rounds (the machine's speed drifts); raw before and after each round.
raws, runs, floors = [], [], []
for _ in range(rounds):
    raws.append(raw(0.3))
    runs.append(sampled(0.3))
    floors.append(floor(0.3))
    raws.append(raw(0.3))
ratios = [s / (a + b) * 2 for s, a, b in zip(runs, raws[::2], raws[1::2])]
total_rate = lambda rates: len(rates) / sum(1 / r for r in rates)  # equal-time rounds
print(json.dumps({"raw": total_rate(raws), "runner": total_rate(runs),
                  "ratio": float(np.median(ratios)), "ratio_min": min(ratios),
                  "ratio_max": max(ratios), "ratio_all": total_rate(runs) / total_rate(raws),
                  "floor": total_rate(floors), "floor_ratio": total_rate(floors) / total_rate(raws)}))
"""

CHILDREN = {
    "rlmod": {"spec": RLMOD_SPEC, "build": RLMOD_BUILD, "sample": RLMOD_SAMPLE},
    "RLlib": {"spec": rl.SPEC, "build": rl.BUILD, "sample": rl.SAMPLE},
}
BODIES = {"spec": SPEC_BODY, "build": BUILD_BODY, "sample": SAMPLE_BODY}


def fmt(x: float, spec: str) -> str:
    return "-" if x != x else format(x, spec)  # NaN: not measured for this library


def seconds(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


class Libraries:
    """Runs each measurement's child for rlmod (this interpreter) and, when set, RLlib."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.names = ["rlmod"] + (["RLlib"] if args.rllib_python else [])

    def child(self, lib: str, kind: str, *argv: object) -> dict | str:
        """The child's JSON; for RLlib, a line saying why there is none instead."""
        a = self.args
        code = HEADER.format({"env": a.rllib_env, "match": a.rllib_match_rlmod})
        code += CHILDREN[lib][kind] + BODIES[kind]
        if lib == "rlmod":
            return rl.run_child(sys.executable, code, *argv)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            return rl.run_child(
                a.rllib_python,
                code,
                *argv,
                timeout=a.rllib_timeout,
                pythonpath=root if a.rllib_env == "rlmod" else None,
            )
        except rl.ChildTimeout:
            return f"did not finish in {a.rllib_timeout:.0f} s"
        except RuntimeError as e:
            print(f"RLlib {kind} child failed:\n{e}", file=sys.stderr)
            return "failed: " + (str(e).strip().splitlines() or ["?"])[-1][:100]


def spec_section(libs: Libraries) -> None:
    a = libs.args
    print("\n## Specs, per-module configs and modules (overrides for 5 modules)\n")
    runs: dict[str, dict[int, dict | str]] = {lib: {} for lib in libs.names}
    for lib in libs.names:
        for n in a.sizes:
            if lib == "RLlib" and n > a.rllib_max_n:
                continue
            runs[lib][n] = libs.child(lib, "spec", n)
    ok = {lib: [r for r in runs[lib].values() if isinstance(r, dict)] for lib in libs.names}
    if "RLlib" in runs:
        fit = rl.quadratic_fit([r["n"] for r in ok["RLlib"]], [r["spec_s"] for r in ok["RLlib"]])
        for n in a.sizes:
            if n > a.rllib_max_n:
                runs["RLlib"][n] = (
                    "skipped (N > --rllib-max-n)"
                    if fit is None
                    else f"skipped (est. {seconds(fit(n))} s from the quadratic fit)"
                )
    columns = [
        "modules",
        "library",
        "get_multi_rl_module_spec ms",
        "get_config_for_module, all (first) ms",
        "(cached) ms",
        "spec + configs ms",
        "build MultiRLModule s",
        "RSS / module KB",
        "params / module KB",
    ]
    rows = []
    for n in a.sizes:
        for lib in libs.names:
            r = runs[lib][n]
            cells = (
                [r]
                if isinstance(r, str)
                else [  # r: why there is no measurement
                    f"{r['spec_s'] * 1e3:.2f}",
                    f"{r['cfg_first_s'] * 1e3:.2f}",
                    f"{r['cfg_cached_s'] * 1e3:.2f}",
                    f"{(r['spec_s'] + r['cfg_first_s']) * 1e3:.2f}",
                    f"{r['build_s']:.2f}",
                    f"{r['rss_delta_kb'] / n:.1f}",
                    f"{r['param_bytes'] / n / 1024:.1f}",
                ]
            )
            rows.append(dict(zip(columns, [f"{n:,}", lib, *cells], strict=False)))
    table(rows, columns)
    print(
        "\nGrowth with N (least squares on log-log: exponent 1 is linear; "
        "and the cost per module at the largest N):"
    )
    for lib in libs.names:
        if len(ok[lib]) < 2:
            print(f"- {lib}: fewer than two sizes measured")
            continue
        n = np.array([r["n"] for r in ok[lib]], float)
        for key, label in (
            ("spec_s", "get_multi_rl_module_spec"),
            ("cfg_first_s", "get_config_for_module over all"),
            ("build_s", "build MultiRLModule"),
        ):
            t = np.array([r[key] for r in ok[lib]])
            exponent = np.polyfit(np.log(n), np.log(np.maximum(t, 1e-9)), 1)[0]
            slope = np.polyfit(n, t, 1)[0]
            print(
                f"- {lib}, {label}: exponent {exponent:.2f}, slope {slope * 1e6:.2f} us per module"
            )


def build_section(libs: Libraries) -> None:
    a = libs.args
    agents = {"rlmod": a.build_agents, "RLlib": a.rllib_build_agents}
    print(
        "\n## build_algo() and first train(): MultiAgentCartPole, one module per agent, "
        "PPO, train_batch_size=64 env steps, minibatch_size=None\n"
    )
    columns = [
        "library",
        "agents",
        "build_algo s",
        "peak RSS after build MB",
        "first train() s",
        "of it sample / learn / sync s",
        "peak RSS after train MB",
        "modules trained",
        "agent steps",
        "Ray start s",
    ]
    rows = []
    for lib in libs.names:
        r = libs.child(lib, "build", agents[lib])
        if isinstance(r, str):
            rows.append({"library": lib, "agents": f"{agents[lib]:,}", "build_algo s": r})
            continue
        rows.append(
            {
                "library": lib,
                "agents": f"{agents[lib]:,}",
                "Ray start s": f"{r['start_s']:.2f}" if lib == "RLlib" else "-",
                "build_algo s": f"{r['build_s']:.2f}",
                "peak RSS after build MB": f"{r['rss_after_build_mb']:.0f}",
                "first train() s": f"{r['train_s']:.2f}",
                "of it sample / learn / sync s": " / ".join(f"{t:.2f}" for t in r["timers"]),
                "peak RSS after train MB": f"{r['rss_after_train_mb']:.0f}",
                "modules trained": r["modules_trained"],
                "agent steps": r["agent_steps"],
            }
        )
    table(rows, columns)
    if "RLlib" in libs.names:
        print(
            "\nRLlib needs a running Ray even with num_env_runners=0 (EnvRunnerGroup calls "
            'ray.put): its child calls ray.init() first, timed apart ("Ray start"); peak '
            "RSS is the driver process's, without Ray's own processes."
        )


def sample_section(libs: Libraries) -> None:
    a = libs.args
    print(
        f"\n## Sampling: MultiAgentCartPole, {a.sample_agents:,} agents mapped to 10 "
        "modules, one EnvRunner vs the env's raw rate (alternating rounds)\n"
    )
    columns = [
        "num_envs_per_env_runner",
        "library",
        "raw env agent steps/s",
        "EnvRunner agent steps/s",
        "ratio, all rounds",
        "ratio per round: median (range)",
        "floor loop agent steps/s",
        "floor ratio",
        "EnvRunner / floor",
    ]
    rows = []
    for num_envs in a.num_envs:
        for lib in libs.names:
            steps, rounds = (
                (50, a.rounds) if lib == "rlmod" else (a.rllib_sample_steps, a.rllib_rounds)
            )
            r = libs.child(lib, "sample", a.sample_agents, 10, num_envs, rounds, steps)
            row = {"num_envs_per_env_runner": num_envs, "library": lib}
            if isinstance(r, str):
                rows.append({**row, "raw env agent steps/s": r})
                continue
            rows.append(
                {
                    **row,
                    "raw env agent steps/s": f"{r['raw']:,.0f}",
                    "EnvRunner agent steps/s": f"{r['runner']:,.0f}",
                    "ratio, all rounds": f"{r['ratio_all']:.3f}",
                    "ratio per round: median (range)": f"{r['ratio']:.3f} "
                    f"({r['ratio_min']:.3f}-{r['ratio_max']:.3f})",
                    "floor loop agent steps/s": fmt(r["floor"], ",.0f"),
                    "floor ratio": fmt(r["floor_ratio"], ".3f"),
                    "EnvRunner / floor": fmt(r["runner"] / r["floor"], ".2f"),
                }
            )
    table(rows, columns)
    print(
        "\nRates over all rounds (equal-time rounds of 0.3 s: raw, EnvRunner, floor, raw). "
        "floor loop (rlmod only): only what any runner must do per step (one forward pass "
        "and sampling per module, the action dicts, step(), reading every returned dict), "
        "in steady state, recording nothing. rlmod: "
        f"{a.rounds} rounds, sample() calls of 50 env steps per env"
        + (
            f"; RLlib: {a.rllib_rounds} rounds, calls of {a.rllib_sample_steps} env "
            "steps per env (each round takes at least two calls)."
            if "RLlib" in libs.names
            else "."
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10_000])
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-sample", action="store_true")
    parser.add_argument("--build-agents", type=int, default=1000)
    parser.add_argument("--sample-agents", type=int, default=1000)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--rounds", type=int, default=12)
    i17 = parser.add_argument_group("issue 17 (stacked modules)")
    i17.add_argument("--issue17-only", action="store_true", help="only the issue-17 table")
    i17.add_argument("--skip-issue17", action="store_true")
    i17.add_argument("--skip-10k", action="store_true", help="no 10,000-agent run")
    i17.add_argument("--issue17-envs", type=int, default=32)
    i17.add_argument(
        "--issue17-rounds",
        type=int,
        default=48,
        help="sampling rounds of 10-step calls (the training-size calls: as "
        "many env steps, at least 8 rounds)",
    )
    i17.add_argument("--issue17-learner-rows", type=int, default=64_000)
    i17.add_argument(
        "--issue17-sample-only",
        action="store_true",
        help="only the sampling child (no build/train/Learner children)",
    )
    i17.add_argument(
        "--issue17-threads",
        default="auto",
        help="num_threads_per_learner of the sampling child: auto (None, the default) or a count",
    )
    i17.add_argument(
        "--issue17-timeout", type=float, default=600.0, help="seconds per build/train child"
    )
    rllib = parser.add_argument_group("RLlib side by side (each in a child process)")
    rllib.add_argument(
        "--rllib-python",
        default=DEFAULT_RLLIB_PYTHON,
        help="interpreter with ray[rllib]; 'none' to skip (default: this "
        "one if it imports ray.rllib)",
    )
    rllib.add_argument(
        "--rllib-max-n",
        type=int,
        default=1000,
        help="skip the spec measurement above this many modules",
    )
    rllib.add_argument(
        "--rllib-build-agents", type=int, help="agents for build_algo (default: --build-agents)"
    )
    rllib.add_argument("--rllib-timeout", type=float, default=900.0, help="seconds per RLlib child")
    rllib.add_argument("--rllib-rounds", type=int, default=3)
    rllib.add_argument(
        "--rllib-sample-steps",
        type=int,
        default=5,
        help="env steps per env in each sample() call (rlmod: 50)",
    )
    rllib.add_argument(
        "--rllib-env",
        choices=["rllib", "rlmod"],
        default="rllib",
        help="RLlib's own MultiAgentCartPole, or rlmod's in a wrapper",
    )
    rllib.add_argument(
        "--rllib-match-rlmod",
        action="store_true",
        help="RLlib with rlmod's defaults: fcnet_hiddens [64, 64], "
        "num_epochs 10 (RLlib's: [256, 256], 30)",
    )
    args = parser.parse_args()
    if args.rllib_python in (None, "none"):
        args.rllib_python = None
    if args.rllib_build_agents is None:
        args.rllib_build_agents = args.build_agents

    header("Multi-module scale")
    libs = Libraries(args)
    if args.rllib_python:
        print(
            f"RLlib: {args.rllib_python} ({rl.version(args.rllib_python)}), new API stack; "
            f"env: {rl.ENV_NAMES[args.rllib_env]}; model: "
            + (
                "rlmod's defaults (fcnet_hiddens [64, 64], num_epochs 10)"
                if args.rllib_match_rlmod
                else "each library's defaults (fcnet_hiddens rlmod [64, 64], RLlib [256, 256]; "
                "PPO num_epochs rlmod 10, RLlib 30)"
            )
        )
    else:
        print(
            "RLlib: not found (no --rllib-python, and this interpreter cannot import "
            "ray.rllib); rlmod only"
        )
    if not args.issue17_only:
        spec_section(libs)
        if not args.skip_train:
            build_section(libs)
        if not args.skip_sample:
            sample_section(libs)
    figures = {} if args.skip_issue17 else issue17_section(args)
    print_summary(figures)


def print_summary(figures: dict) -> None:
    """The suite's row: issue 17's build, first 4,000-step train() and the sampling rate of
    1,000 modules against the same agents on 10 (the limit: the modules' count is the only
    difference)."""
    parts = []
    if "build_s" in figures:
        parts.append(f"build_algo() {figures['build_s']:.2f} s")
    if "train_s" in figures:
        parts.append(f"first 4,000-env-step train() {figures['train_s']:.1f} s")
    sample = figures.get("sample", {}).get("fragment")
    if sample:
        parts.append(f"{sample['rates']['1000']:,.0f} agent steps/s")
    summary(
        "1,000 agents on 1,000 modules: build, first train(), sampling",
        rlmod="; ".join(parts) or "not measured (--skip-issue17)",
        peer="-",
        limit=f"10 modules, same agents: {sample['rates']['10']:,.0f} agent steps/s"
        if sample
        else "-",
        ratio=f"{sample['ratio']:.2f} of 10 modules (sampling)" if sample else "-",
    )


if __name__ == "__main__":
    main()
