"""Rewrites the imports of a test or script written against RLlib so it runs on rlmod, and
nothing else: `python tests/rllib_ported/port.py SRC.py... OUT_DIR`.

How RLlib's own unit tests are checked against rlmod ("ported with only the imports
changed", docs/rllib_migration.md): take the RLlib files (e.g. from RLlib's repository,
`rllib/core/rl_module/tests/test_rl_module_specs.py`), port them with this script, run
pytest on OUT_DIR. RLlib's sources are not stored in this repository; the tests beside
this file are rlmod's own, one per RLlib test, naming the test each one mirrors.

`IMPORTS` maps an RLlib module to its rlmod home, per imported name where the name
differs (`PPOTorchLearner` is rlmod's `PPOLearner`, imported under RLlib's name).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

IMPORTS: dict[str, str | dict[str, str]] = {
    "ray.rllib.core": "rlmod.core",
    "ray.rllib.core.columns": "rlmod.core.columns",
    "ray.rllib.core.rl_module.rl_module": "rlmod.core.rl_module",
    "ray.rllib.core.rl_module.multi_rl_module": "rlmod.core.multi_rl_module",
    "ray.rllib.core.rl_module.torch": "rlmod.core",
    "ray.rllib.core.rl_module.torch.torch_rl_module": "rlmod.core",
    "ray.rllib.core.rl_module.default_model_config": "rlmod.core",
    "ray.rllib.core.learner.learner": "rlmod.core.learner",
    "ray.rllib.env.multi_agent_env": "rlmod.env.multi_agent_env",
    "ray.rllib.env.single_agent_episode": "rlmod.env.episodes",
    "ray.rllib.env.multi_agent_episode": "rlmod.env.episodes",
    "ray.rllib.examples.envs.classes.multi_agent": "rlmod.testing",
    "ray.rllib.examples.rl_modules.classes.vpg_torch_rlm": "rlmod.testing.vpg",
    "ray.rllib.examples.rl_modules.classes.vpg_using_shared_encoder_rlm": "rlmod.testing.vpg",
    "ray.rllib.utils.test_utils": "rlmod.utils.test_utils",
    "ray.rllib.utils.metrics.metrics_logger": "rlmod.utils.metrics_logger",
    "ray.rllib.callbacks.callbacks": "rlmod.callbacks",
    "ray.rllib.connectors.connector_v2": "rlmod.connectors.connector_v2",
    "ray.rllib.policy.policy": "rlmod.algorithms",
    "ray.rllib.algorithms.algorithm": "rlmod.algorithms",
    "ray.rllib.algorithms.algorithm_config": "rlmod.algorithms.algorithm_config",
    "ray.rllib.algorithms.ppo": "rlmod.algorithms.ppo",
    "ray.rllib.algorithms.dqn": "rlmod.algorithms.dqn",
    "ray.rllib.algorithms.dqn.dqn": "rlmod.algorithms.dqn",
    "ray.rllib.algorithms.sac": "rlmod.algorithms.sac",
    "ray.rllib.algorithms.bc": "rlmod.algorithms.bc",
    "ray.rllib.algorithms.marwil": "rlmod.algorithms.marwil",
    "ray.rllib.algorithms.ppo.torch.ppo_torch_learner": {"PPOTorchLearner": "PPOLearner"},
    "ray.rllib.algorithms.ppo.torch.ppo_torch_rl_module": {
        "PPOTorchRLModule": "DefaultPPORLModule"
    },
    "ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module": {
        "DefaultPPOTorchRLModule": "DefaultPPORLModule"
    },
    "ray.tune.registry": "rlmod",
}
"""RLlib module -> rlmod module, or {RLlib name: rlmod name} (found in `RENAMED_HOME`)."""

RENAMED_HOME = "rlmod.algorithms.ppo"
"""Where the per-name entries of `IMPORTS` live (all of them are PPO's today)."""

_FROM = re.compile(r"^(\s*)from (ray\.[\w.]+) import (\([^)]*\)|[^\n]+)", re.M)


def port(source: str) -> str:
    """`source` with every `from ray... import ...` that IMPORTS knows rewritten; other
    lines (and `import ray`, which Ray's own tests use for ray.init) stay as they are.

    Example:
        >>> port("from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner")
        'from rlmod.algorithms.ppo import PPOLearner as PPOTorchLearner'
    """

    def repl(m: re.Match[str]) -> str:
        indent, module, names = m.groups()
        target = IMPORTS.get(module)
        if target is None:
            return m.group(0)
        if isinstance(target, str):
            return f"{indent}from {target} import {names}"
        wanted = [n.strip() for n in names.strip("()").replace("\n", " ").split(",") if n.strip()]
        parts = [f"{target.get(n, n)} as {n}" if target.get(n, n) != n else n for n in wanted]
        return f"{indent}from {RENAMED_HOME} import {', '.join(parts)}"

    return _FROM.sub(repl, source)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[-1])
    out.mkdir(parents=True, exist_ok=True)
    for src in map(Path, argv[:-1]):
        (out / src.name).write_text(port(src.read_text()))
        print(f"{src} -> {out / src.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
