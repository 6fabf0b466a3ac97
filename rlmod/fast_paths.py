"""rlmod's fast paths, in one table, and the one switch that turns all of them off.

A fast path is code that does what a plainer one does, faster, where the plain one was
measured to cost at least 10% end to end. Each is tested against its plain path. With the
switch on, every plain path runs: `config.debugging(plain_paths=True)`, or the environment
variable `RLMOD_PLAIN_PATHS=1` (e.g. to run the test suite on the plain paths). The switch
is process-wide: once a component built from a config that asks for it starts in a
process (an Algorithm, a Learner, an EnvRunner, in its Ray actor too), the process stays on
the plain paths.

| fast path | plain path | where | why (measured) | tested against the plain path in |
|---|---|---|---|---|
| stacked modules: modules of one architecture (3 or more) run as one, with `vmap`, batched-matmul acting, a hand-written training forward, a vectorised tanh and one Adam kernel per group | each module alone | rlmod/core/stacked.py, stacked_acting.py, stacked_train.py, learner_stacks.py, fast_tanh.py, rlmod/env/module_groups.py | 8 modules: train() 10.3 s against 19.2 s alone, 12 modules 12.9 against 25.3 (rlmod.core.stacked.MIN_STACK_SIZE); 1,000 modules: one forward 2.9 ms against 43 ms (rlmod/core/stacked.py) | tests/core/test_learner_stacked.py, tests/env/test_module_groups.py, tests/core/test_stacked*.py, tests/core/test_fast_tanh.py |
| deferred diagnostics: a module trained alone computes the diagnostics its loss does not need once per update | per minibatch | rlmod/core/minibatch_stats.py, `Learner.log_rows` | tuned CartPole update: ~5 ms of 61 ms (rlmod/core/minibatch_stats.py) | tests/core/test_minibatch_stats.py, tests/algorithms/test_ppo_diagnostics.py |
| deferred init: EnvRunner modules whose weights come from the Learner skip torch's initialisers | initialise at build | rlmod/core/deferred_init.py | 1,000 [256, 256] modules: 2.2 s of each remote EnvRunner's start-up | tests/core/test_deferred_init.py |
| gc paused while thousands of modules are built | the collector running | rlmod/utils/gc_pause.py | 1,000-agent `build_algo()`: 0.6 s of 2.5 s | tests/utils/test_gc_pause.py |

Not fast paths (one way only, so not switched): rlmod's Adam (rlmod/core/optim.py: plain
tensor state for safetensors checkpoints, and no 2 s `torch._dynamo` import), stacked weight
copies for weight sync (rlmod/core/module_weights.py: the same arrays either way), and the
guards (always on).
"""

from __future__ import annotations

import os

_plain = os.environ.get("RLMOD_PLAIN_PATHS", "").strip() not in ("", "0")


def plain_paths() -> bool:
    """Whether every plain path runs (the switch above is on in this process)."""
    return _plain


def use_plain_paths(config: object) -> None:
    """Turns the plain paths on for this process if `config.plain_paths` asks for it;
    called by every component built from a config."""
    global _plain
    if getattr(config, "plain_paths", False):
        _plain = True
