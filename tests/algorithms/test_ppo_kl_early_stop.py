"""PPO's kl_early_stop: a module whose minibatch KL exceeds the limit takes no more steps
in that update, the other modules go on, and stacked groups do exactly what modules
trained one by one do."""

from __future__ import annotations

import re

import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig
from rlmod.testing import MultiAgentCartPole

IDS = ["p0", "p1", "p2", "p3"]
ATOL = 1e-5  # float32 sums in another order (stacked means, batched matmuls)


def config(*, stack: bool, overrides: dict[str, dict]) -> PPOConfig:
    """4 CartPole agents, one module each, with per-module overrides."""
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 4})
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(
            policies=set(IDS),
            policy_mapping_fn=lambda aid, ep, **kw: f"p{aid}",
            stack_modules=stack,
            algorithm_config_overrides_per_module=overrides,
        )
        .rl_module(model_config={"fcnet_hiddens": [16, 16]})
        .training(
            train_batch_size=128,
            minibatch_size=16,
            num_epochs=2,
            lr=1e-3,
            grad_clip=0.5,
            use_kl_loss=False,
        )
        .debugging(seed=0)
    )


def train(stack: bool, overrides: dict[str, dict], iterations: int = 3):
    """(weights per module, Adam step count per module, learner results per iteration)."""
    algo = config(stack=stack, overrides=overrides).build_algo()
    results = [algo.train()["learners"] for _ in range(iterations)]
    learner = algo.learner_group.learner
    weights = {m: {k: v.clone() for k, v in learner.module[m].get_state().items()} for m in IDS}
    steps = {m: learner._optimizers[m].step_count for m in IDS}
    algo.stop()
    return weights, steps, results


# p1 stops after its first step of every update (any step moves the KL past 1e-7), p2
# never (a KL of 10 nats), p0 and p3 have no limit.
LIMITS = {
    "p1": PPOConfig.overrides(kl_early_stop=1e-7),
    "p2": PPOConfig.overrides(kl_early_stop=10.0),
}


@pytest.fixture(scope="module")
def runs():
    return {stack: train(stack, LIMITS) for stack in (False, True)}


@pytest.mark.parametrize("stack", [False, True])
def test_a_module_past_its_limit_takes_no_more_steps_in_the_update(runs, stack):
    _, steps, results = runs[stack]
    assert steps["p1"] == 3  # one step per update: the first (KL 0), then stopped
    # every module steps on every minibatch of an update (as many as the largest needs)
    assert steps["p0"] == steps["p2"] == steps["p3"] >= 3 * 2 * 4
    for result in results:
        assert result["p1"]["early_stopped"] == 1.0
        assert result["p2"]["early_stopped"] == 0.0
        assert "early_stopped" not in result["p0"]  # no limit, no check


def test_stacked_and_unstacked_early_stops_give_the_same_weights_and_results(runs):
    (plain, _, plain_results), (stacked, _, stacked_results) = runs[False], runs[True]
    for m in IDS:
        for k in plain[m]:
            torch.testing.assert_close(stacked[m][k], plain[m][k], atol=ATOL, rtol=0)
    for a, b in zip(plain_results, stacked_results, strict=True):
        for m in IDS:
            assert a[m].get("early_stopped") == b[m].get("early_stopped")
            assert a[m]["mean_kl_loss"] == pytest.approx(b[m]["mean_kl_loss"], abs=1e-6)


@pytest.mark.parametrize("stack", [False, True])
def test_the_other_modules_train_as_if_no_module_had_a_limit(stack):
    # one update, so that both runs train on the same sample (p1's own weights change
    # later episodes: MultiAgentCartPole runs until its last agent falls)
    weights, _, _ = train(stack, LIMITS, iterations=1)
    free, _, _ = train(stack, {}, iterations=1)
    # stacked: bit for bit but for Adam's fused kernel, which now runs on other row ranges
    atol = 1e-8 if stack else 0.0
    for m in ("p0", "p2", "p3"):  # p2's limit is never reached
        for k in free[m]:
            torch.testing.assert_close(weights[m][k], free[m][k], atol=atol, rtol=0)
    assert any(not torch.equal(weights["p1"][k], free["p1"][k]) for k in free["p1"])


def test_a_stopped_minibatch_is_left_out_of_the_means():
    # p1 logs only its first minibatch of each update (KL 0 before the first step)
    _, _, results = train(False, {"p1": PPOConfig.overrides(kl_early_stop=1e-7)}, iterations=1)
    assert results[0]["p1"]["mean_kl_loss"] < 1e-6 < results[0]["p0"]["mean_kl_loss"]


@pytest.mark.parametrize("value", [0, -0.01, float("nan")])
def test_a_limit_that_is_not_positive_is_refused(value):
    with pytest.raises(
        ValueError, match=r"kl_early_stop=.* is invalid: .*a number in \(0.0, inf\]"
    ):
        PPOConfig().training(kl_early_stop=value)


def test_data_parallel_learners_refuse_it_with_the_reason():
    config = PPOConfig().environment("CartPole-v1").learners(num_learners=2)
    config.training(kl_early_stop=0.03, train_batch_size=256)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "kl_early_stop with num_learners=2: data-parallel Learners would each stop"
        ),
    ):
        config.validate()
    config.training(kl_early_stop=None)
    config.multi_agent(
        algorithm_config_overrides_per_module={
            "default_policy": PPOConfig.overrides(kl_early_stop=0.03)
        }
    )
    with pytest.raises(ValueError, match="kl_early_stop with num_learners=2"):
        config.validate()
