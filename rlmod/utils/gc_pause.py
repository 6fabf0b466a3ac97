"""`gc_paused`: Python's cyclic garbage collector held off while many long-lived objects
are made, as when thousands of modules are built.

Each module is some 50 Python objects (submodules, parameter dicts, hooks dicts) that all
stay alive. While they are being made, the collector runs every few hundred new objects
and, every so often, walks all the objects made so far: building 1,000 PPO modules for a
Learner and an EnvRunner spent 0.6 s of its 2.5 s in those walks (`build_algo()` of
benchmarks/multi_module_scale.py's 1,000-agent case, 2-core AMD EPYC), which found
nothing to free. Reference counting frees everything else as usual while paused; a
cycle made meanwhile waits for the collector's next run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector for the block (or the decorated function), and
    turns it back on after it, raised or not, unless it was off already (nesting is fine)."""
    from rlmod.fast_paths import plain_paths

    if plain_paths():
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
