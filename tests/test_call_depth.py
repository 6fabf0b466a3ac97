"""How many calls the spine takes (issue 31's hop list): from `Algorithm.train()` to the loss
and the optimizer step, and from `EnvRunner.sample()` to `env.step` and the module forward,
on the plain and the stacked path. A new layer in between has to be argued for here."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnvRunner, SingleAgentEnvRunner
from rlmod.testing import MultiAgentCartPole

ENTRY = {"train": "algorithms/algorithm.py", "sample": "env_runner.py"}


def rlmod_hops(run: Callable[[], object], entry: str, target: Callable[[str, str], bool]) -> int:
    """The fewest rlmod calls from `entry` (a function name in ENTRY) to a call for which
    `target(function name, file name)` holds, while `run()` runs (torch's and gymnasium's
    own frames do not count)."""
    depths: list[int] = []

    def profile(frame, event, arg):
        if event != "call" or not target(frame.f_code.co_name, frame.f_code.co_filename):
            return
        hops, f = 0, frame
        while f is not None:
            code = f.f_code
            if code.co_name == entry and code.co_filename.endswith(ENTRY[entry]):
                depths.append(hops)
                return
            if "/rlmod/" in code.co_filename:
                hops += 1
            f = f.f_back

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    assert depths, "the target was never reached"
    return min(depths)


def config(stack: bool) -> PPOConfig:
    n = 3 if stack else 1
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": n})
        .multi_agent(
            policies={f"p{i}" for i in range(n)},
            policy_mapping_fn=lambda aid, ep, **kw: f"p{aid}",
            stack_modules=stack,
        )
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, grad_clip=0.5)
    )


@pytest.mark.parametrize("stack", [False, pytest.param(True, marks=pytest.mark.fast_path)])
def test_train_reaches_the_loss_and_the_optimizer_step_in_5_calls(stack):
    algo = config(stack).build_algo()
    if stack:
        assert algo.learner_group.learner.stacked.stacks
    loss = rlmod_hops(algo.train, "train", lambda name, file: name == "compute_losses")
    step = rlmod_hops(
        algo.train, "train", lambda name, file: name == "step" and file.endswith("core/optim.py")
    )
    algo.stop()
    # train -> training_step -> LearnerGroup.update -> Learner.update -> _sgd_step -> loss
    assert loss == 5
    # ... -> _sgd_step -> Adam.step / GroupAdam.step (the step unit's `stepper`)
    assert step == 5


@pytest.mark.parametrize("multi_agent", [False, True])
def test_sample_reaches_env_step_and_the_module_forward_in_4_calls(multi_agent):
    if multi_agent:
        runner = MultiAgentEnvRunner(config=config(stack=False))
        env_file = "rlmod/testing/envs.py"
    else:
        runner = SingleAgentEnvRunner(config=PPOConfig().environment("CartPole-v1"))
        env_file = "gymnasium/vector/sync_vector_env.py"

    def sample() -> object:
        return runner.sample(num_timesteps=8)

    env_step = rlmod_hops(sample, "sample", lambda n, f: n == "step" and f.endswith(env_file))
    forward = rlmod_hops(sample, "sample", lambda n, f: n == "_forward" and "algorithms/ppo" in f)
    runner.stop()
    assert env_step <= 4 and forward <= 4, (env_step, forward)
