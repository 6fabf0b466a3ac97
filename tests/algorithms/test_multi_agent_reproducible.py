"""A seeded multi-agent run gives the same numbers whatever Python's hash seed.

`policies` given as a set (as the README does) and module-ID sets inside the Learner must
not decide any order: two processes with different PYTHONHASHSEED agree bit for bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import hashlib, json
import numpy as np
from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole

config = (PPOConfig()
          .environment(MultiAgentCartPole, env_config={"num_agents": 4})
          .env_runners(num_envs_per_env_runner=2)
          .multi_agent(policies={"alpha", "bravo", "charlie", "delta"},
                       policy_mapping_fn=lambda aid, episode, **kw:
                           ["alpha", "bravo", "charlie", "delta"][aid])
          .training(train_batch_size=128, minibatch_size=32, num_epochs=2)
          .debugging(seed=7))
algo = config.build_algo()
returns = []
for _ in range(2):
    result = algo.train()
    returns.append(result["env_runners"]["module_episode_returns_mean"])
weights = algo.learner_group.get_weights(inference_only=False)
digest = hashlib.sha256()
for mid in sorted(weights):
    for name in sorted(weights[mid]):
        digest.update(mid.encode() + name.encode() + weights[mid][name].tobytes())
print(json.dumps({"returns": returns, "weights": digest.hexdigest()}, sort_keys=True))
"""


def _run(hash_seed: str) -> dict:
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONHASHSEED": hash_seed,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_seeded_multi_agent_training_ignores_the_hash_seed():
    a, b = _run("1"), _run("2")
    assert a["returns"] == b["returns"]
    assert a["weights"] == b["weights"]
