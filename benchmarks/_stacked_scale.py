"""Issue 17's figures for benchmarks/multi_module_scale.py: stacked modules at 1,000 and
10,000 agents (build, peak RSS, first train(), sampling and Learner throughput against 10
modules), each child in a fresh process; printed as one table.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import _rllib_scale as rl
from _common import table

I17_TRAIN = r"""
import json, resource, sys, time
from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole
n, batch, stack, num_envs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
config = (PPOConfig()
          .environment(MultiAgentCartPole, env_config={"num_agents": n})
          .env_runners(num_envs_per_env_runner=num_envs)
          .multi_agent(policies={f"a{i}" for i in range(n)},
                       policy_mapping_fn=lambda aid, episode: f"a{aid}", stack_modules=stack)
          .rl_module(model_config={"fcnet_hiddens": [64, 64]})
          # PPO's minibatches of 128 rows per module; under 128 env steps a module's rows
          # are one minibatch (validate() refuses a minibatch larger than the batch).
          .training(train_batch_size=batch, minibatch_size=None if batch < 128 else 128)
          .debugging(seed=0))
t = time.perf_counter()
algo = config.build_algo()
build_s = time.perf_counter() - t
rss_build = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
result = algo.train()
train_s = time.perf_counter() - t
print(json.dumps({
    "build_s": build_s, "rss_build_mb": rss_build, "train_s": train_s,
    "timers": [result["timers"][k] for k in ("sample_time_s", "learn_time_s",
                                             "sync_weights_time_s")],
    "rss_train_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "modules_trained": sum(1 for k in result["learners"] if k != "__all_modules__"),
    "agent_steps": result["env_runners"]["num_agent_steps_sampled"]}))
"""

I17_SAMPLE = r"""
import json, os, sys, time
import numpy as np
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
from _stacked_setups import make_runner
agents, num_envs, rounds, steps = (int(a) for a in sys.argv[2:6])
sizes = [int(m) for m in sys.argv[6].split(",")]
# num_threads_per_learner: "auto" (None, the default: 1) or a count; the process's torch
# threads as Algorithm.setup sets them, never changed during a run.
threads = None if len(sys.argv) < 8 or sys.argv[7] == "auto" else int(sys.argv[7])
torch.set_num_threads(threads or 1)
extra = () if len(sys.argv) < 8 else (threads,)  # trees before the argument: auto = 1
runners = {m: make_runner(m, num_envs, steps, agents, *extra) for m in sizes}
# Two call sizes: `steps` env steps per env, and the fragment a training iteration of
# these configs samples per call (PPO's train_batch_size 4,000 over num_envs envs).
fragment = runners[sizes[0]].config.get_rollout_fragment_length()
out = {}
calls = (("short", steps, rounds), ("fragment", fragment, max(8, rounds * steps // fragment)))
for label, per_call, n in calls:
    time_s, done, per_round = ({m: 0.0 for m in sizes}, {m: 0 for m in sizes},
                               {m: [] for m in sizes})
    for _ in range(n):  # alternating: the machine's speed drifts
        for m, r in runners.items():
            t = time.perf_counter()
            r.sample(num_timesteps=num_envs * per_call)
            dt = time.perf_counter() - t
            k = r.get_metrics()["num_agent_steps"]
            time_s[m] += dt
            done[m] += k
            per_round[m].append(k / dt)
    rates = {m: done[m] / time_s[m] for m in sizes}
    ratios = np.array(per_round[sizes[-1]]) / np.array(per_round[sizes[0]])
    out[label] = {"steps_per_call": per_call, "rounds": n,
                  "rates": {str(m): v for m, v in rates.items()},
                  "ratio": rates[sizes[-1]] / rates[sizes[0]],
                  "round_min": float(ratios.min()), "round_max": float(ratios.max())}
print(json.dumps(out))
"""

I17_LEARN = r"""
import json, os, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
try:
    from _stacked_setups import learner_update_rows_per_s
except ImportError as err:
    print(json.dumps({"missing": str(err)}))
    raise SystemExit(0)
rows = int(sys.argv[2])
sizes = [int(m) for m in sys.argv[3].split(",")]
print(json.dumps({str(m): learner_update_rows_per_s(m, rows, stack=True) for m in sizes}))
"""


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def sample_row(args: argparse.Namespace, add: Callable[[str, str, str, bool], None]) -> dict:
    """The sampling ratio's rows: I17_SAMPLE in a fresh process, at the sample() calls a
    training iteration makes and at short calls (which pay the per-call costs more often);
    returns the child's result."""
    sample = rl.run_child(
        sys.executable,
        I17_SAMPLE,
        os.path.abspath(__file__),
        1000,
        args.issue17_envs,
        args.issue17_rounds,
        10,
        "10,1000",
        args.issue17_threads,
    )
    for label, what in (
        ("fragment", "sample() as a training iteration calls it"),
        ("short", "short sample() calls"),
    ):
        r = sample[label]
        add(
            f"sampling agent steps/s, 1,000 vs 10 modules, {what} ({r['steps_per_call']} "
            f"env steps per env; threads {args.issue17_threads})",
            ">= 0.8",
            f"{r['ratio']:.2f} ({r['rates']['1000']:,.0f} vs {r['rates']['10']:,.0f}; "
            f"{r['rounds']} rounds, each {r['round_min']:.2f}-{r['round_max']:.2f})",
            r["ratio"] >= 0.8,
        )
    return sample


def issue17_section(args: argparse.Namespace) -> dict:
    """Every figure of issue 17 in one table (each from a fresh process; the ratios from
    one process that alternates the two cases). Returns the headline figures measured:
    `build_s`, `train_s` (the 4,000-step train()) and `sample` (I17_SAMPLE's result)."""
    print(
        "\n## Issue 17: stacked modules, 1,000-agent MultiAgentCartPole, one module per "
        "agent, fcnet_hiddens [64, 64], PPO defaults otherwise\n"
    )
    rows = []

    def add(figure: str, target: str, measured: str, ok: bool | None) -> None:
        rows.append(
            {
                "figure": figure,
                "target": target,
                "measured": measured,
                "met": "-" if ok is None else _met(ok),
            }
        )

    def train_child(n: int, batch: int, num_envs: int = 1) -> dict | str:
        try:
            return rl.run_child(
                sys.executable, I17_TRAIN, n, batch, 1, num_envs, timeout=args.issue17_timeout
            )
        except rl.ChildTimeout:
            return f"did not finish in {args.issue17_timeout:.0f} s"

    figures: dict = {}
    if args.issue17_sample_only:
        figures["sample"] = sample_row(args, add)
        table(rows, ["figure", "target", "measured", "met"])
        return figures
    small = train_child(1000, 64)
    if isinstance(small, dict):
        figures["build_s"] = small["build_s"]
        add(
            "build_algo(), 1,000 modules",
            "<= 2 s",
            f"{small['build_s']:.2f} s",
            small["build_s"] <= 2,
        )
        add(
            "peak RSS after build_algo()",
            "<= 1 GB",
            f"{small['rss_build_mb']:,.0f} MB",
            small["rss_build_mb"] <= 1024,
        )
        t = small["timers"]
        add(
            "first train(), 64 env steps",
            "<= 3 s",
            f"{small['train_s']:.2f} s (sample {t[0]:.2f} / learn {t[1]:.2f} / sync "
            f"{t[2]:.2f}; {small['agent_steps']:,} agent steps, peak RSS "
            f"{small['rss_train_mb']:,.0f} MB)",
            small["train_s"] <= 3,
        )
    else:
        add("build_algo() and first train(), 64 env steps", "", small, False)
    large = train_child(1000, 4000, args.issue17_envs)
    if isinstance(large, dict):
        figures["train_s"] = large["train_s"]
        t = large["timers"]
        add(
            f"first train(), 4,000 env steps ({args.issue17_envs} envs per EnvRunner)",
            "<= 60 s",
            f"{large['train_s']:.1f} s (sample {t[0]:.1f} / learn {t[1]:.1f} / sync "
            f"{t[2]:.2f}; {large['agent_steps']:,} agent steps, peak RSS "
            f"{large['rss_train_mb']:,.0f} MB)",
            large["train_s"] <= 60,
        )
    else:
        add("first train(), 4,000 env steps", "<= 60 s", large, False)
    figures["sample"] = sample_row(args, add)
    learn = rl.run_child(
        sys.executable, I17_LEARN, os.path.abspath(__file__), args.issue17_learner_rows, "10,1000"
    )
    if "missing" in learn:
        add(
            "Learner rows/s, 1,000 vs 10 modules",
            ">= 0.5",
            f"not measured ({learn['missing']})",
            None,
        )
    else:
        ratio = learn["1000"] / learn["10"]
        add(
            "Learner rows/s, 1,000 vs 10 modules",
            ">= 0.5",
            f"{ratio:.2f} ({learn['1000']:,.0f} vs {learn['10']:,.0f}, "
            f"{args.issue17_learner_rows:,} rows)",
            ratio >= 0.5,
        )
    if not args.skip_10k:
        huge = train_child(10_000, 64)
        if isinstance(huge, dict):
            t = huge["timers"]
            add(
                "10,000 agents and modules: build_algo(), first train() (64 env steps)",
                "complete",
                f"build {huge['build_s']:.1f} s (peak RSS "
                f"{huge['rss_build_mb']:,.0f} MB), train {huge['train_s']:.1f} s (sample "
                f"{t[0]:.1f} / learn {t[1]:.1f} / sync {t[2]:.1f}; peak RSS "
                f"{huge['rss_train_mb']:,.0f} MB; {huge['modules_trained']:,} modules "
                "trained)",
                True,
            )
        else:
            add("10,000 agents and modules", "complete", huge, False)
    table(rows, ["figure", "target", "measured", "met"])
    print(
        f"\nSampling: one EnvRunner each, {args.issue17_envs} envs; the two runners alternate "
        "rounds of one sample() call each; the ratio of the agent-step rates over all rounds "
        "(total agent steps / total time). Learner: _stacked_setups.learner_update_rows_per_s "
        "(investigations/learner_stacking.py's update throughput), stacked."
    )
    return figures
