"""Checkpoint speed and size: rlmod's save_to_path / restore_from_path against torch.save /
torch.load of the same state, in the same process, for CartPole PPO and for a 1,000-agent
MultiAgentCartPole with one module per agent; RLlib's save_to_path / restore_from_path side
by side where an interpreter has it (--rllib-python).

Every timing is the median of --repeats; saves include fsync for both libraries (rlmod
flushes its directory to disk, with one syncfs() on Linux; the torch baseline fsyncs its one
file).

    python benchmarks/checkpoint_io.py [--repeats 5] [--modules 1000]
        [--rllib-python /path/to/python] [--rllib-modules 100]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import header, summary, table

RLLIB_CHILD = r"""
import json, os, shutil, statistics, sys, tempfile, time
import warnings; warnings.filterwarnings("ignore")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
setup, n, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config = PPOConfig().env_runners(num_env_runners=0).learners(num_learners=0)
if setup == "cartpole":
    config = config.environment("CartPole-v1")
else:
    ids = [f"p{i}" for i in range(n)]
    config = (config.environment(MultiAgentCartPole, env_config={"num_agents": n})
              .multi_agent(policies=set(ids), policy_mapping_fn=lambda aid, *a, **k: f"p{aid}")
              .rl_module(model_config={"fcnet_hiddens": [64, 64]}))
config = config.training(train_batch_size_per_learner=64, minibatch_size=64, num_epochs=1)
algo = config.build_algo()
algo.train()  # optimizer moments exist, as on rlmod's side
root = tempfile.mkdtemp()
saves, loads = [], []
for i in range(repeats):
    path = os.path.join(root, f"c{i}")
    t = time.perf_counter(); algo.save_to_path(path); saves.append(time.perf_counter() - t)
    t = time.perf_counter(); algo.restore_from_path(path); loads.append(time.perf_counter() - t)
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
files = sum(len(fs) for _, _, fs in os.walk(path))
print(json.dumps({"save_s": statistics.median(saves), "load_s": statistics.median(loads),
                  "bytes": size, "files": files}))
"""


def _median_time(fn, repeats: int, cleanup=None) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if cleanup is not None:
            cleanup()
    return statistics.median(times)


def _size(path: Path) -> tuple[int, int]:
    files = [p for p in Path(path).rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def measure(name: str, algo, repeats: int, root: Path) -> list[dict]:
    import torch

    from rlmod.core import RLModule

    path = root / name
    save_s = _median_time(
        lambda: algo.save_to_path(path), repeats, cleanup=lambda: shutil.rmtree(path)
    )  # each save to a new path
    algo.save_to_path(path)
    load_s = _median_time(lambda: algo.restore_from_path(path), repeats)
    some_module = next(iter(algo.learner_group.learner.module.keys()))
    one_s = _median_time(
        lambda: RLModule.from_checkpoint(path, module_id=some_module, inference_only=True), repeats
    )
    size, files = _size(path)
    pt = root / f"{name}.pt"

    def torch_save() -> None:
        state = algo.get_state()
        with open(pt, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())

    def torch_load() -> None:
        algo.set_state(torch.load(pt, weights_only=False))

    t_save = _median_time(torch_save, repeats, cleanup=pt.unlink)
    torch_save()
    t_load = _median_time(torch_load, repeats)
    return [
        {
            "setup": name,
            "library": "rlmod",
            "save_s": f"{save_s:.3f}",
            "load_s": f"{load_s:.3f}",
            "save/torch": f"{save_s / t_save:.2f}",
            "load/torch": f"{load_s / t_load:.2f}",
            "one_module_s": f"{one_s:.3f}",
            "MB": f"{size / 1e6:.1f}",
            "files": files,
        },
        {
            "setup": name,
            "library": "torch.save/load (pickle)",
            "save_s": f"{t_save:.3f}",
            "load_s": f"{t_load:.3f}",
            "save/torch": "1.00",
            "load/torch": "1.00",
            "MB": f"{pt.stat().st_size / 1e6:.1f}",
            "files": 1,
        },
    ]


def rllib(python: str, setup: str, n: int, repeats: int) -> dict:
    out = subprocess.run(
        [python, "-c", RLLIB_CHILD, setup, str(n), str(repeats)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "setup": f"{setup} ({n} modules)" if setup != "cartpole" else "cartpole",
        "library": "RLlib",
        "save_s": f"{r['save_s']:.3f}",
        "load_s": f"{r['load_s']:.3f}",
        "MB": f"{r['bytes'] / 1e6:.1f}",
        "files": r["files"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modules", type=int, default=1000)
    parser.add_argument("--rllib-python", default=None)
    parser.add_argument(
        "--rllib-modules",
        type=int,
        default=100,
        help="RLlib's multi-module setup (1,000 takes minutes to build)",
    )
    args = parser.parse_args()
    import torch

    from rlmod.algorithms.ppo import PPOConfig
    from rlmod.testing import MultiAgentCartPole

    torch.set_num_threads(1)
    header("Checkpoint save / load")
    root = Path(tempfile.mkdtemp())
    rows = []
    algo = PPOConfig().environment("CartPole-v1").debugging(seed=0).build_algo()
    algo.train()
    rows += measure("cartpole", algo, args.repeats, root)
    algo.stop()
    n = args.modules
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": n})
        .multi_agent(policies={f"p{i}" for i in range(n)}, policy_mapping_fn=_mapping)
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    algo.train()  # optimizer moments exist
    rows += measure(f"multi-agent ({n} modules)", algo, args.repeats, root)
    algo.stop()
    if args.rllib_python:
        rows.append(rllib(args.rllib_python, "cartpole", 1, args.repeats))
        rows.append(rllib(args.rllib_python, "multi-agent", args.rllib_modules, args.repeats))
    shutil.rmtree(root)
    table(
        rows,
        [
            "setup",
            "library",
            "save_s",
            "load_s",
            "save/torch",
            "load/torch",
            "one_module_s",
            "MB",
            "files",
        ],
    )
    print(
        "save/torch, load/torch: rlmod's time over torch.save/torch.load of the same "
        "state (target <= 1.5). one_module_s: RLModule.from_checkpoint of one module, "
        "inference-only."
    )
    ours, torch_row = (r for r in rows if r["setup"].startswith("multi-agent"))
    theirs = [r for r in rows if r["library"] == "RLlib" and r["setup"].startswith("multi")]
    summary(
        f"checkpoint save / load s, {n:,} modules (with optimizer state, fsync)",
        rlmod=f"{ours['save_s']} / {ours['load_s']}",
        peer=f"RLlib ({theirs[0]['setup']}) {theirs[0]['save_s']} / {theirs[0]['load_s']}"
        if theirs
        else "-",
        limit=f"torch.save / torch.load {torch_row['save_s']} / {torch_row['load_s']}",
        ratio=f"{ours['save/torch']} / {ours['load/torch']} of torch",
    )


def _mapping(agent_id, episode=None, **kwargs) -> str:
    return f"p{agent_id}"


if __name__ == "__main__":
    sys.exit(main())
