"""Ray is an optional extra (pyproject `ray`/`tune`): importing rlmod, its algorithms and
training in-process never import it, so a run does not pay Ray's start-up time. Making a
config registers it with Ray Tune only where Tune is already imported."""

from __future__ import annotations

import subprocess
import sys


def test_importing_and_training_in_process_does_not_import_ray() -> None:
    script = (
        "import sys\n"
        "import rlmod\n"
        "from rlmod.algorithms.ppo import PPO, PPOConfig\n"
        "from rlmod.algorithms.dqn import DQNConfig\n"
        "algo = (PPOConfig().environment('CartPole-v1')\n"
        "        .training(train_batch_size=64, minibatch_size=32, num_epochs=1).build_algo())\n"
        "algo.train()\n"
        "algo.stop()\n"
        "DQNConfig()\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"
