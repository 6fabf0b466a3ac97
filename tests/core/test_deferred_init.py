"""Tests of modules built without initialisers (rlmod/core/deferred_init.py) in
MultiAgentEnvRunner: no one ever reads uninitialised weights.

A runner whose weights are set before it samples never runs the initialisers; one that
gets no weights (or only some modules') initialises the rest on first use with exactly
the values and torch RNG draws of a normal build, so it samples what it sampled before
deferral existed (the reference here: the same runner with deferral turned off).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule, PPOConfig
from rlmod.core import MultiRLModuleSpec, RLModuleSpec
from rlmod.core.deferred_init import build_deferred, supports_deferred_init
from rlmod.env import MultiAgentEnvRunner
from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole

pytestmark = pytest.mark.fast_path  # rlmod/fast_paths.py

BOX, TWO = gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)


def _config(num_modules: int = 3) -> PPOConfig:
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 6})
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(
            policies={f"p{i}" for i in range(num_modules)},
            policy_mapping_fn=lambda aid, episode: f"p{aid % num_modules}",
        )
        .rl_module(model_config={"fcnet_hiddens": [16, 16]})
        .debugging(seed=3)
    )


def _reference(monkeypatch: pytest.MonkeyPatch) -> MultiAgentEnvRunner:
    """The same runner built the normal way (deferral off for PPO's module)."""
    with monkeypatch.context() as m:
        m.setattr(DefaultPPORLModule, "supports_deferred_init", False)
        runner = MultiAgentEnvRunner(config=_config())
        runner.make_module()
    assert not runner._pending_init
    return runner


def _weights(runner: MultiAgentEnvRunner) -> dict[str, dict[str, np.ndarray]]:
    return runner.get_state(components="rl_module")["rl_module"]


def _assert_same_batches(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for mid in a:
        for col in ("obs", "actions", "action_logp", "rewards"):
            np.testing.assert_array_equal(a[mid][col], b[mid][col], err_msg=f"{mid} {col}")


def test_only_classes_that_say_so_themselves_are_built_without_initialisers() -> None:
    class Sub(DefaultPPORLModule):
        pass

    assert supports_deferred_init(DefaultPPORLModule)
    assert not supports_deferred_init(Sub)  # a subclass must opt in again
    spec = MultiRLModuleSpec(
        rl_module_specs={
            "a": RLModuleSpec(
                module_class=DefaultPPORLModule, observation_space=BOX, action_space=TWO
            ),
            "b": RLModuleSpec(module_class=Sub, observation_space=BOX, action_space=TWO),
        }
    )
    rng = torch.get_rng_state()
    module, deferred = build_deferred(spec)
    assert deferred == ["a"]
    assert sorted(module.keys()) == ["a", "b"]
    assert all(p.device.type == "cpu" for p in module.parameters())
    # "a" drew nothing; "b" drew its init like a normal build of "b" alone.
    torch.set_rng_state(rng)
    alone = spec["b"].build()
    for name, tensor in module["b"].state_dict().items():
        torch.testing.assert_close(tensor, alone.state_dict()[name], rtol=0, atol=0)


def test_a_runner_without_weights_samples_what_a_normally_built_one_samples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = _reference(monkeypatch)
    runner = MultiAgentEnvRunner(config=_config())
    for _ in range(2):  # the second call continues both runners' RNG streams alike
        _assert_same_batches(runner.sample(num_timesteps=30), reference.sample(num_timesteps=30))
    assert not runner._pending_init
    ours, theirs = _weights(runner), _weights(reference)
    for mid in theirs:
        for name in theirs[mid]:
            np.testing.assert_array_equal(ours[mid][name], theirs[mid][name])


def test_module_and_get_state_initialise_first(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _weights(_reference(monkeypatch))
    for read in ("module", "get_state"):
        runner = MultiAgentEnvRunner(config=_config())
        if read == "module":
            got = {
                mid: {k: v.numpy() for k, v in sub.state_dict().items()}
                for mid, sub in runner.module.items()
            }
        else:
            got = _weights(runner)
        for mid in reference:
            for name in reference[mid]:
                np.testing.assert_array_equal(got[mid][name], reference[mid][name])


def test_weights_set_first_skip_the_initialisers_and_the_rest_are_initialised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = _reference(monkeypatch)
    ref_weights = _weights(reference)
    given = {
        mid: {k: np.full_like(v, 0.25 * (i + 1)) for k, v in ref_weights[mid].items()}
        for i, mid in enumerate(["p0", "p2"])
    }
    runner = MultiAgentEnvRunner(config=_config())
    runner.set_state({"rl_module": given})
    assert runner._pending_init.module_ids == {"p1"}
    runner.sample(num_timesteps=10)
    assert not runner._pending_init
    got = _weights(runner)
    for mid, state in given.items():
        for name, value in state.items():
            np.testing.assert_array_equal(got[mid][name], value)
    for name, value in ref_weights["p1"].items():  # as a normal build made it
        np.testing.assert_array_equal(got["p1"][name], value)


def test_all_weights_set_first_never_run_the_initialisers(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = MultiAgentEnvRunner(config=_config())
    ones = {
        mid: {k: np.ones_like(v) for k, v in state.items()}
        for mid, state in _weights(_reference(monkeypatch)).items()
    }
    runner.set_state({"rl_module": ones})
    assert not runner._pending_init
    calls: list[object] = []
    monkeypatch.setattr(MultiRLModuleSpec, "build", lambda *a, **k: calls.append(a))
    runner.sample(num_timesteps=10)
    assert calls == []
    for state in _weights(runner).values():
        for value in state.values():
            np.testing.assert_array_equal(value, 1.0)


@pytest.mark.parametrize("runner_cls", [MultiAgentEnvRunner, ReferenceMultiAgentEnvRunner])
def test_an_algorithm_runner_holds_the_learner_weights_after_build(runner_cls: type) -> None:
    config = _config().training(train_batch_size=64, minibatch_size=None)
    algo = config.env_runners(env_runner_cls=runner_cls).build_algo()  # the plain one: eager
    try:
        runner = algo.env_runner
        assert not getattr(runner, "_pending_init", None)  # the first sync set every module
        learner = algo.learner_group.get_weights(module_ids=runner.module_ids, inference_only=True)
        for mid, state in _weights(runner).items():
            for name, value in state.items():
                np.testing.assert_array_equal(value, learner[mid][name])
    finally:
        algo.stop()
