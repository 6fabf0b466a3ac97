"""How many torch threads a local multi-agent EnvRunner's forward pass runs on.

rlmod's synchronous algorithms sample, then learn: while the driver's (local) EnvRunner
samples, the cores its Learner uses for large updates (rlmod.core.learner_stacks.
LARGE_GROUP_THREADS) sit idle. So, with `num_threads_per_learner=None` (auto), a local
EnvRunner runs each forward pass whose work is large on ACTING_THREADS threads and puts the
process's count back right after it. One rule for every execution group, stacked or not:
the work is the rows of the pass times the parameters of one module, the same for 1,000
agents mapped to 10 modules or to 1,000. Only the forward pass changes threads (the env
steps are Python; action sampling draws from the RNG as before); its outputs were
bit-identical on 1 and 2 threads on the issue-17 traces (160 recorded passes).

Not here: remote EnvRunners (Ray gives each actor `OMP_NUM_THREADS` = its
`num_cpus_per_env_runner`, rounded down, at least 1, as for RLlib's), an explicit
`num_threads_per_learner` (that many threads everywhere, set by the Algorithm), and passes
outside the main thread (an evaluation running in parallel to training: torch's thread
count is per process, and the Learner's update may be changing it at the same time).
"""

from __future__ import annotations

import threading

from rlmod.core.threads import more_threads

__all__ = ["ACTING_THREADS", "LARGE_ACTING_WORK", "acting_threads"]

ACTING_THREADS = 2
"""torch threads of a local EnvRunner's large forward pass (auto; at most the CPU count).
Measured on the project's Xeon host (one EnvRunner, 1,000 MultiAgentCartPole agents in 32
envs, [64, 64] modules, the acting forwards of one sample() trace replayed): 1.18 -> 0.69 ms
per pass with the agents on 10 modules, 2.23 -> 1.24 ms on 1,000 modules; issue 17's
sampling child: see benchmarks/RESULTS.md (issue 17, session 23)."""

LARGE_ACTING_WORK = 2**22
"""What makes a forward pass large: its rows x the parameters of one module (about its
multiply-adds), at least this (4.2M). [4, 64, 64, 2] tanh MLP (4,610 parameters), 2 threads
against 1, per pass: one plain module 0.95x at 512 rows (2.4M), 1.23x at 1,024 (4.7M),
1.66x at 2,048 (9.4M); 10 stacked modules 1.16x / 1.30x / 1.45x; 100 stacked 1.30x /
1.73x / 1.66x; below 2.4M 0.82-1.06x for 1 and 10 modules (the threads' start and join
cost what they save)."""


def acting_threads(rows: int, params_per_module: int, *, auto: bool) -> int | None:
    """The threads a forward pass of `rows` rows through modules of `params_per_module`
    parameters runs on, or None to leave the process's count alone. `auto`: the EnvRunner
    is the local one and `num_threads_per_learner` is None."""
    if not auto or threading.current_thread() is not threading.main_thread():
        return None
    return more_threads(rows * params_per_module, LARGE_ACTING_WORK, ACTING_THREADS)
