"""Data-parallel Learners on a local Ray cluster (rlmod/core/learner_group.py,
rlmod/core/learner.py's all-reduce): 2 Learner actors hold identical weights after an
update, equal to one Learner's update on the union of their batches.

One Ray session (2 CPUs) per module.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.learner_group import LearnerGroup, split_batches
from rlmod.env import SingleAgentEnvRunner

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_local")]


def config(num_learners: int) -> PPOConfig:
    # Whole-batch steps and no per-batch advantage standardization: then the row-weighted
    # mean of the two Learners' gradients is exactly the gradient on the union.
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=4)
        .training(minibatch_size=None, num_epochs=3, normalize_advantages=False)
        .learners(num_learners=num_learners)
        .debugging(seed=0)
    )


def test_two_learners_match_one_learner_on_the_union_of_their_batches():
    runner = SingleAgentEnvRunner(config=config(0))
    # Two EnvRunners' results of different sizes (the row weighting matters).
    batches = [runner.sample(num_timesteps=200), runner.sample(num_timesteps=120)]
    spec = config(0).get_multi_rl_module_spec(spaces=runner.get_spaces())
    single = LearnerGroup(config=config(0), module_spec=spec)
    pair = LearnerGroup(config=config(2), module_spec=spec)
    pair.set_weights(single.get_weights())
    single.update(batches)
    results = pair.update(batches)
    assert results["default_policy"]["num_module_steps_trained"] == 3 * sum(
        len(b["default_policy"]["obs"]) for b in batches
    )
    each = pair.foreach_learner(lambda learner: learner.get_weights()["default_policy"])
    expected = single.get_weights()["default_policy"]
    moved = False
    for k in expected:
        np.testing.assert_array_equal(each[0][k], each[1][k], err_msg=k)  # bit-identical
        # float32 sums in another order (two halves, then all-reduced): ~1e-7 relative.
        np.testing.assert_allclose(each[0][k], expected[k], rtol=1e-5, atol=1e-6, err_msg=k)
        moved |= not np.allclose(
            expected[k], spec.build()["default_policy"].get_state()[k].numpy(), atol=1e-4
        )
    assert moved
    runner.stop()


def test_split_batches_keeps_runner_results_whole_or_cuts_sequences_cleanly():
    runner = SingleAgentEnvRunner(config=config(0))
    batches = [runner.sample(num_timesteps=40) for _ in range(3)]
    whole = split_batches(batches[:2], 2)
    assert whole[0][0] is batches[0] and whole[1][0] is batches[1]
    shares = split_batches(batches, 2)
    rows = [len(s[0]["default_policy"]["obs"]) for s in shares]
    assert sum(rows) == sum(len(b["default_policy"]["obs"]) for b in batches)
    assert abs(rows[0] - rows[1]) <= 1
    assert all(s[0]["default_policy"]["seq_ends"][-1] for s in shares)
    runner.stop()


def test_ppo_trains_with_two_remote_learners():
    algo = (
        config(2)
        .training(train_batch_size=512, minibatch_size=128, num_epochs=2)
        .learners(num_cpus_per_learner=0.5)
        .build_algo()
    )
    first = algo.train()
    second = algo.train()
    assert second["num_env_steps_sampled_lifetime"] >= 1024
    assert "policy_loss" in second["learners"]["default_policy"]
    weights = algo.learner_group.foreach_learner(lambda learner: learner.get_weights())
    for k, v in weights[0]["default_policy"].items():
        np.testing.assert_array_equal(v, weights[1]["default_policy"][k])
    assert first["learners"]["__all_modules__"]["num_module_steps_trained"] > 0
    # num_cpus_per_learner is what Ray reserved for each Learner actor; no GPU asked.
    assigned = algo.learner_group.foreach_learner(
        lambda learner: (ray.get_runtime_context().get_assigned_resources(), str(learner.device))
    )
    assert assigned == [({"CPU": 0.5}, "cpu")] * 2
    algo.stop()


def test_a_learner_only_icm_trains_data_parallel_too():
    from rlmod.core import DEFAULT_MODULE_ID, MultiRLModuleSpec, RLModuleSpec
    from rlmod.curiosity import IntrinsicCuriosityModel, IntrinsicCuriosityModelConnector

    algo = (
        PPOConfig()
        .environment("FrozenLake-v1", env_config={"is_slippery": False, "max_episode_steps": 8})
        .env_runners(num_envs_per_env_runner=2)
        .training(
            train_batch_size=128,
            minibatch_size=32,
            num_epochs=1,
            learner_connector=IntrinsicCuriosityModelConnector,
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    DEFAULT_MODULE_ID: RLModuleSpec(),
                    "icm": RLModuleSpec(
                        module_class=IntrinsicCuriosityModel,
                        learner_only=True,
                        model_config={"feature_dim": 8},
                    ),
                }
            )
        )
        .learners(num_learners=2, num_cpus_per_learner=0.5)
        .debugging(seed=0)
    ).build_algo()
    before = algo.learner_group.get_weights(["icm"])["icm"]
    result = algo.train()
    assert result["learners"]["icm"]["num_module_steps_trained"] == 128
    icm = [w["icm"] for w in algo.learner_group.foreach_learner(lambda lr: lr.get_weights())]
    assert any(not np.array_equal(before[k], icm[0][k]) for k in before)
    for k in before:
        np.testing.assert_array_equal(icm[0][k], icm[1][k])
    algo.stop()


def test_a_killed_learner_ends_the_group_with_an_error_naming_it():
    """RLlib 2.60 does not restart Learners (its LearnerGroup raises a failed Learner's
    error); rlmod does the same, without waiting on the survivors (blocked in the
    all-reduce) and naming the Learner, the cause and how to resume."""
    from rlmod.errors import LearnerError

    algo = (
        config(2)
        .training(train_batch_size=256, minibatch_size=128, num_epochs=1)
        .learners(num_cpus_per_learner=0.5)
        .build_algo()
    )
    algo.train()
    victim = algo.learner_group._actors[1]
    ray.kill(victim)
    with pytest.raises(
        LearnerError,
        match=r"Remote Learner 1 \(rank 1 of 2\) failed in "
        r"update\(\): .*ActorDiedError.*not restarted \(as in RLlib\).*"
        r"Resume from the last checkpoint",
    ):
        algo.train()
    # Every later call says the same, instead of silently training the driver's copy.
    with pytest.raises(LearnerError, match="Remote Learner 1"):
        algo.learner_group.get_weights()
    assert algo.learner_group._actors == []  # the survivor was ended too
    algo.stop()


def test_no_gpus_in_the_cluster_for_gpu_learners_is_a_clear_error():
    with pytest.raises(
        ValueError,
        match=r"num_learners=2 x num_gpus_per_learner=1.0 needs 2 "
        r"GPUs, but the Ray cluster has 0.*num_gpus_per_learner \(0 trains on "
        "CPUs\\)",
    ):
        config(2).learners(num_gpus_per_learner=1).build_algo()
