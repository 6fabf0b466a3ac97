"""Tests of rlmod/env/acting_threads.py: a local multi-agent EnvRunner runs its large
forward passes on ACTING_THREADS torch threads (num_threads_per_learner=None), puts the
process's count back after each, and samples what it samples on one thread; an explicit
count, a remote EnvRunner, small passes and passes outside the main thread leave the count
alone.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

import rlmod.env.acting_threads as at
from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import MultiRLModuleSpec, RLModuleSpec
from rlmod.env import MultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole

TWO = min(at.ACTING_THREADS, os.cpu_count() or 1)


@pytest.fixture(autouse=True)
def one_thread():
    """The process on one thread, as Algorithm.setup sets it under auto."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _runner(threads: int | None, worker_index: int = 0) -> MultiAgentEnvRunner:
    """Five agents: p0-p3 one stack group, p4 (another architecture) a module alone."""
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 5})
        .env_runners(num_envs_per_env_runner=3)
        .multi_agent(
            policies={f"p{i}" for i in range(5)}, policy_mapping_fn=lambda aid, episode: f"p{aid}"
        )
        .rl_module(model_config={"fcnet_hiddens": [16, 16]})
        .learners(num_threads_per_learner=threads)
        .debugging(seed=5)
    )
    config = config.rl_module(
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={"p4": RLModuleSpec(model_config={"fcnet_hiddens": [8]})}
        )
    )
    return MultiAgentEnvRunner(config=config, worker_index=worker_index)


def _spy(runner: MultiAgentEnvRunner) -> list[int]:
    """The torch thread count inside each group's forward pass."""
    runner.make_module()
    seen: list[int] = []
    for group in runner._groups.groups:
        owner = group.stacked if group.stacked is not None else runner.module[group.lead]
        original = owner.forward_exploration

        def spy(*args, original=original, **kwargs):
            seen.append(torch.get_num_threads())
            return original(*args, **kwargs)

        owner.forward_exploration = spy
    return seen


@pytest.mark.parametrize(
    ("threads", "worker_index", "work", "expected"),
    [
        (None, 0, 1, TWO),  # local, auto, large: two threads
        (None, 0, 2**40, 1),  # small passes: the process's count
        (1, 0, 1, 1),  # an explicit count wins
        (None, 1, 1, 1),  # a remote EnvRunner: Ray's OMP_NUM_THREADS, untouched
    ],
)
def test_large_passes_of_a_local_runner_run_on_two_threads(
    threads, worker_index, work, expected, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(at, "LARGE_ACTING_WORK", work)
    runner = _runner(threads, worker_index)
    seen = _spy(runner)
    runner.sample(num_timesteps=3 * 10)
    assert len(runner._groups.groups) == 2  # a stack group and a module alone: both count
    assert seen and set(seen) == {expected}
    assert torch.get_num_threads() == 1  # put back after every pass


def test_two_threads_sample_what_one_thread_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same seed: the same rows on two threads (auto, every pass large) as on one."""
    monkeypatch.setattr(at, "LARGE_ACTING_WORK", 1)
    batches = []
    for threads in (None, 1):
        runner = _runner(threads)
        seen = _spy(runner)
        batches.append([runner.sample(num_timesteps=3 * 20) for _ in range(2)])
        assert set(seen) == {TWO if threads is None else 1}
    for a, b in zip(*batches, strict=True):
        assert sorted(a) == sorted(b)
        for mid in a:
            for col in a[mid]:
                np.testing.assert_array_equal(a[mid][col], b[mid][col], err_msg=f"{mid} {col}")


def test_the_rule() -> None:
    large = at.LARGE_ACTING_WORK
    assert at.acting_threads(large, 1, auto=True) == (TWO if TWO > 1 else None)
    assert at.acting_threads(large - 1, 1, auto=True) is None
    assert at.acting_threads(large, 1, auto=False) is None
    torch.set_num_threads(TWO)  # already that many: nothing to change
    assert at.acting_threads(large, 1, auto=True) is None
    torch.set_num_threads(1)
    off_main: list[int | None] = []  # e.g. an evaluation parallel to training
    thread = threading.Thread(
        target=lambda: off_main.append(at.acting_threads(large, 1, auto=True))
    )
    thread.start()
    thread.join()
    assert off_main == [None]
