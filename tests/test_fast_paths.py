"""The one switch for rlmod's fast paths (rlmod/fast_paths.py): with `plain_paths=True` (or
RLMOD_PLAIN_PATHS=1) no module is stacked, built without initialisers or built with the
collector paused, and diagnostics are computed per minibatch; training is the same.

The switch is process-wide and stays on, so each case runs in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

MULTI_AGENT = """
import gc, json, sys
from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole
import rlmod.fast_paths as fast_paths
from rlmod.utils.gc_pause import gc_paused
config = (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 4})
    .multi_agent(policies={f"p{i}" for i in range(4)},
                 policy_mapping_fn=lambda aid, ep, **kw: f"p{aid}")
    .rl_module(model_config={"fcnet_hiddens": [16]})
    .env_runners(env_runner_cls=MultiAgentEnvRunner)  # the runner that stacks modules
    .training(train_batch_size=128, minibatch_size=32, num_epochs=1)
    .debugging(seed=0, plain_paths=sys.argv[1] == "config"))
algo = config.build_algo()
algo.train()
runner = algo.env_runner_group.local_env_runner
with gc_paused():
    paused = not gc.isenabled()
print(json.dumps({
    "plain": fast_paths.plain_paths(),
    "learner_stacks": len(algo.learner_group.learner.stacked.stacks),
    "runner_stacks": runner._groups.num_stacked,
    "gc_paused": paused,
}))
"""

SINGLE_AGENT = """
import json
import torch
from rlmod.algorithms.ppo import PPOConfig
config = (PPOConfig().environment("CartPole-v1")
    .training(train_batch_size=256, minibatch_size=64, num_epochs=2).debugging(seed=0))
algo = config.build_algo()
results = [algo.train()["learners"]["default_policy"] for _ in range(2)]
learner = algo.learner_group.learner
deferred = any(type(e).__name__ == "RowStat" for v in learner._alone["default_policy"]._logs.values()
               for e in v)
weights = {k: v.tolist() for k, v in learner.module["default_policy"].get_state().items()}
print(json.dumps({"results": results, "weights": weights, "deferred": deferred}))
"""


def _run(code: str, *args: str, env_plain: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RLMOD_PLAIN_PATHS"}
    if env_plain:
        env["RLMOD_PLAIN_PATHS"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["config", "env"])
def test_the_switch_turns_every_fast_path_off(how: str) -> None:
    plain = _run(MULTI_AGENT, how, env_plain=how == "env")
    assert plain == {"plain": True, "learner_stacks": 0, "runner_stacks": 0, "gc_paused": False}


def test_without_the_switch_the_fast_paths_run() -> None:
    fast = _run(MULTI_AGENT, "off")
    assert fast == {"plain": False, "learner_stacks": 1, "runner_stacks": 4, "gc_paused": True}


def test_plain_diagnostics_and_weights_equal_the_fast_ones() -> None:
    fast, plain = _run(SINGLE_AGENT), _run(SINGLE_AGENT, env_plain=True)
    assert fast["deferred"] and not plain["deferred"]
    assert fast["weights"] == plain["weights"]  # bit for bit: diagnostics never train
    for got, want in zip(plain["results"], fast["results"], strict=True):
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
