"""Learners training stacked groups (stack_modules): the same weights, results, optimizer
state and guards as training every module alone."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import PPOConfig, PPOLearner
from rlmod.core import RLModuleSpec
from rlmod.core.optim import AdamSlot
from rlmod.curiosity import IntrinsicCuriosityModel, IntrinsicCuriosityModelConnector
from rlmod.errors import NonFiniteUpdateError
from rlmod.testing import MultiAgentCartPole

pytestmark = pytest.mark.fast_path  # rlmod/fast_paths.py

IDS = [f"p{i}" for i in range(5)]
TRAINED = ["p0", "p1", "p2", "p3", "icm"]  # p4 is outside policies_to_train
ATOL = 1e-5  # float32 sums in another order (stacked means, batched matmuls)


def _icm_on_p0(observation_space, action_space):
    return IntrinsicCuriosityModelConnector(policy_module_id="p0")


def config(*, stack: bool, **training) -> PPOConfig:
    """5 CartPole agents, one module each; p1 has its own lr, p4 is not trained, and a
    learner-only curiosity module trains beside them on p0's transitions."""
    box = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    policies: dict = dict.fromkeys(IDS)
    policies["icm"] = RLModuleSpec(
        module_class=IntrinsicCuriosityModel,
        learner_only=True,
        model_config={"feature_dim": 8},
        observation_space=box,
        action_space=gym.spaces.Discrete(2),
    )
    settings = {
        "train_batch_size": 128,
        "minibatch_size": 32,
        "num_epochs": 2,
        "lr": 1e-3,
        "grad_clip": 0.5,
        "learner_connector": _icm_on_p0,
        **training,
    }
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 5})
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(
            policies=policies,
            policy_mapping_fn=lambda aid, ep, **kw: f"p{aid}",
            policies_to_train=TRAINED,
            stack_modules=stack,
        )
        .rl_module(
            model_config={"fcnet_hiddens": [16, 16]},
            algorithm_config_overrides_per_module={"p1": {"lr": 3e-3}, "icm": {"lr": 5e-4}},
        )
        .training(**settings)
        .debugging(seed=0)
    )


def _weights(learner) -> dict[str, dict[str, torch.Tensor]]:
    return {
        m: {k: v.clone() for k, v in learner.module[m].get_state().items()} for m in learner.module
    }


def _train(stack: bool, iterations: int = 3, **training):
    algo = config(stack=stack, **training).build_algo()
    learner = algo.learner_group.learner
    initial = _weights(learner)
    results = [algo.train()["learners"] for _ in range(iterations)]
    weights = _weights(learner)
    optim = learner._optimizer_states.get_state()
    algo.stop()
    return learner, initial, weights, results, optim


@pytest.fixture(scope="module")
def both():
    return {stack: _train(stack) for stack in (False, True)}


def test_only_same_architecture_trainable_modules_are_stacked(both):
    stacked, plain = both[True][0], both[False][0]
    assert plain.stacked.stacks == []
    assert [s.module_ids for s in stacked.stacked.stacks] == [["p0", "p1", "p2", "p3"]]
    assert isinstance(stacked._optimizers["p1"], AdamSlot)
    assert "p4" not in stacked._optimizers


def test_stacked_and_unstacked_training_give_the_same_weights_after_3_updates(both):
    _, initial, stacked, _, _ = both[True]
    _, _, plain, _, _ = both[False]
    for mid in [*IDS, "icm"]:
        for name, value in plain[mid].items():
            torch.testing.assert_close(
                stacked[mid][name], value, atol=ATOL, rtol=0, msg=f"{mid}.{name}"
            )
    # the module outside policies_to_train is unchanged bit for bit; the others moved
    for name, value in initial["p4"].items():
        assert torch.equal(stacked["p4"][name], value), name
    assert not torch.equal(stacked["p1"]["encoder.0.weight"], initial["p1"]["encoder.0.weight"])


def test_learner_results_per_module_are_the_same(both):
    stacked, plain = both[True][3][-1], both[False][3][-1]
    assert stacked.keys() == plain.keys()
    for mid in plain:
        assert stacked[mid].keys() == plain[mid].keys(), mid
        for key, value in plain[mid].items():
            assert stacked[mid][key] == pytest.approx(value, rel=1e-4, abs=1e-5), (mid, key)
    assert stacked["p1"]["default_optimizer_learning_rate"] == 3e-3
    assert stacked["p2"]["default_optimizer_learning_rate"] == 1e-3


def test_optimizer_state_stays_per_module_and_loads_into_either_kind(both):
    stacked, plain = both[True][4], both[False][4]
    assert stacked.keys() == plain.keys()
    for mid in plain:
        assert stacked[mid]["step"] == plain[mid]["step"]
        assert stacked[mid]["lr"] == plain[mid]["lr"]
        for a, b in zip(stacked[mid]["exp_avg"], plain[mid]["exp_avg"], strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, atol=ATOL, rtol=1e-3)
    # a stacked Learner's checkpoint state loads into an unstacked one, and back
    for src, dst in ((True, False), (False, True)):
        algo = config(stack=dst).build_algo()
        learner = algo.learner_group.learner
        learner._optimizer_states.set_state(both[src][4])
        for mid in ("p1", "p3"):
            got = learner._optimizers[mid].state_dict()
            assert got["step"] == both[src][4][mid]["step"]
            for a, b in zip(got["exp_avg_sq"], both[src][4][mid]["exp_avg_sq"], strict=True):
                assert torch.equal(a, b)
        algo.stop()


def test_a_checkpointed_stacked_learner_restores_and_loads_one_module_alone(tmp_path):
    algo = config(stack=True).build_algo()
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    expected = {k: v.clone() for k, v in algo.get_module("p2").get_state().items()}
    algo.stop()
    restored = config(stack=True).build_algo()
    restored.restore_from_path(path)
    learner = restored.learner_group.learner
    assert learner.stacked.stacks and learner.stacked.stacks[0].group.is_intact()
    group = learner.stacked.stacks[0].group
    for name, value in expected.items():
        assert torch.equal(restored.get_module("p2").get_state()[name], value)
        assert torch.equal(group.params[name][group.position["p2"]], value)
    restored.stop()
    from rlmod.core import RLModule

    alone = RLModule.from_checkpoint(path, module_id="p2")
    for name, value in expected.items():
        assert torch.equal(alone.get_state()[name], value)


def test_lr_schedules_apply_per_module_inside_a_group():
    schedule = [[0, 1e-3], [100, 1e-4]]
    cfg = config(stack=True, lr=schedule).rl_module(
        algorithm_config_overrides_per_module={
            "p1": {"lr": [[0, 2e-3], [100, 2e-4]]},
            "icm": {"lr": 5e-4},
        }
    )
    algo = cfg.build_algo()
    first = algo.train()["learners"]
    second = algo.train()["learners"]
    assert first["p1"]["default_optimizer_learning_rate"] == pytest.approx(2e-3)
    assert first["p2"]["default_optimizer_learning_rate"] == pytest.approx(1e-3)
    # 128 env steps sampled by the 2nd update: both schedules at their end value
    assert second["p1"]["default_optimizer_learning_rate"] == pytest.approx(2e-4)
    assert second["p0"]["default_optimizer_learning_rate"] == pytest.approx(1e-4)
    algo.stop()


def _nan_in(batch: dict, mid: str) -> dict:
    bad = {m: dict(cols) for m, cols in batch.items()}
    rewards = bad[mid]["rewards"].copy()
    rewards[1] = np.nan
    bad[mid]["rewards"] = rewards
    return bad


def test_a_non_finite_module_is_skipped_inside_its_group_the_others_step():
    algo = config(stack=True).learners(max_consecutive_non_finite_updates=100).build_algo()
    learner = algo.learner_group.learner
    before = _weights(learner)
    adam_before = [t.clone() for t in learner._optimizers["p2"].exp_avg]
    result = learner.update(_nan_in(algo.env_runner_group.sample()[0], "p2"))
    after = _weights(learner)
    for name, value in before["p2"].items():
        assert torch.equal(after["p2"][name], value), name
    for a, b in zip(adam_before, learner._optimizers["p2"].exp_avg, strict=True):
        assert torch.equal(a, b)
    assert learner._optimizers["p2"].step_count == 0
    assert result["p2"]["num_non_finite_updates"] > 0
    assert "policy_loss" not in result["p2"]  # no NaN means reported
    assert result["p3"]["num_non_finite_updates"] == 0
    assert np.isfinite(result["p3"]["policy_loss"])
    assert not torch.equal(after["p3"]["encoder.0.weight"], before["p3"]["encoder.0.weight"])
    assert (
        result["__all_modules__"]["num_non_finite_updates"]
        == result["p2"]["num_non_finite_updates"]
    )
    algo.stop()
    algo = config(stack=True).learners(max_consecutive_non_finite_updates=2).build_algo()
    with pytest.raises(NonFiniteUpdateError, match=r"Module 'p2'.*policy_loss"):
        algo.learner_group.learner.update(_nan_in(algo.env_runner_group.sample()[0], "p2"))
    algo.stop()


class OwnLossLearner(PPOLearner):
    """Overrides the per-module loss only: must not be trained through the group loss."""

    def compute_loss_for_module(self, **kwargs):
        return super().compute_loss_for_module(**kwargs) * 1.0


def test_stacking_off_or_a_custom_per_module_loss_means_no_stacks():
    for cfg in (config(stack=False), config(stack=True).training(learner_class=OwnLossLearner)):
        algo = cfg.build_algo()
        assert algo.learner_group.learner.stacked.stacks == []
        algo.stop()


def test_modules_with_another_model_config_form_their_own_group():
    cfg = config(stack=True)
    wide = RLModuleSpec(model_config={"fcnet_hiddens": [32, 16]})
    policies = dict(cfg.policies)
    policies.update({"p0": wide, "p1": wide, "p2": wide})
    algo = cfg.multi_agent(policies=policies).build_algo()
    groups = sorted(s.module_ids for s in algo.learner_group.learner.stacked.stacks)
    assert groups == [["p0", "p1", "p2"]]  # p3 alone: no group of one
    algo.train()
    algo.stop()


def test_two_modules_of_one_architecture_run_alone():
    """Below MIN_STACK_SIZE (3) modules run as fast alone: the README's 2-policy example
    was 5-8% slower stacked (rlmod.core.stacked.MIN_STACK_SIZE)."""
    cfg = config(stack=True)
    policies = dict(cfg.policies)
    wide = RLModuleSpec(model_config={"fcnet_hiddens": [32, 16]})
    policies.update({"p0": wide, "p1": wide})
    algo = cfg.multi_agent(policies=policies).build_algo()
    assert sorted(s.module_ids for s in algo.learner_group.learner.stacked.stacks) == []
    algo.stop()


def test_a_replaced_stacked_module_is_refused_not_trained_stale():
    algo = config(stack=True).build_algo()
    learner = algo.learner_group.learner
    batch = algo.env_runner_group.sample()[0]
    learner.update(batch)
    new = (
        config(stack=True)
        .get_multi_rl_module_spec(spaces=algo.env_runner_group.get_spaces())
        .build("p2")
    )
    learner.module.add_module("p2", new, override=True)
    with pytest.raises(RuntimeError, match="stack_modules=False"):
        learner.update(batch)
    algo.stop()


def test_modules_with_very_different_row_counts_run_in_buckets_with_the_same_result(monkeypatch):
    """Agents whose episodes ended early have few rows: their modules train in a working
    order sorted by rows, in buckets of their own (less padding), on copies of their
    parameter and Adam rows written back at the end; the update, the weights and the
    optimizer state stay those of training each module alone."""
    import rlmod.core.learner_stacks as learner_stacks

    monkeypatch.setattr(learner_stacks, "BUCKET_COST_SLOTS", 0)  # a bucket per row count
    algos = {
        stack: config(stack=stack, minibatch_size=None).build_algo() for stack in (False, True)
    }
    batch = algos[False].env_runner_group.sample()[0]
    keep = {"p0": 5, "p1": None, "p2": 40, "p3": 4}  # rows kept (None: all)
    batch = {
        m: {c: v[: keep[m]] for c, v in cols.items()} if keep.get(m) else cols
        for m, cols in batch.items()
    }
    for m in ("p0", "p2", "p3"):
        batch[m]["seq_ends"] = batch[m]["seq_ends"].copy()
        batch[m]["seq_ends"][-1] = True
    counts = np.array([len(batch[m]["obs"]) for m in keep])
    assert counts[1] > 40
    assert len(learner_stacks.row_buckets(np.sort(counts)[::-1])) == 4
    results = {s: a.learner_group.learner.update(batch) for s, a in algos.items()}
    stack = algos[True].learner_group.learner.stacked.stacks[0]
    assert stack.order.tolist() == [1, 2, 0, 3]  # most rows first: not the group's order
    for mid in keep:
        for key, value in results[False][mid].items():
            assert results[True][mid][key] == pytest.approx(value, rel=1e-4, abs=1e-5), (mid, key)
        plain = algos[False].learner_group.learner.module[mid].get_state()
        stacked = algos[True].learner_group.learner.module[mid].get_state()
        for name, value in plain.items():
            torch.testing.assert_close(stacked[name], value, atol=ATOL, rtol=0)
        adam = {s: a.learner_group.learner._optimizers[mid].state_dict() for s, a in algos.items()}
        assert adam[True]["step"] == adam[False]["step"] == 2  # num_epochs, one minibatch
        for a, b in zip(adam[True]["exp_avg"], adam[False]["exp_avg"], strict=True):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=1e-3)
    for a in algos.values():
        a.stop()


@pytest.mark.parametrize("threads", [None, 2])
def test_training_never_changes_the_thread_count(monkeypatch, threads):
    """The process's torch threads are set once at build (num_threads_per_learner, None:
    1) and never changed by a large stacked update or forward pass: 2 threads beside other
    CPU-bound processes made the README's 2-policy first train() 46-57 s against 11-12 s
    on one thread (2-core Xeon, two busy torch processes)."""
    previous = torch.get_num_threads()
    try:
        algo = config(stack=True).learners(num_threads_per_learner=threads).build_algo()
        calls: list[int] = []
        monkeypatch.setattr(torch, "set_num_threads", calls.append)
        algo.train()
        algo.stop()
        assert calls == []
        assert torch.get_num_threads() == min(threads or 1, os.cpu_count() or 1)
    finally:
        monkeypatch.undo()
        torch.set_num_threads(previous)


def test_row_buckets_minimize_padded_slots_plus_a_cost_per_bucket():
    import itertools

    from rlmod.core.learner_stacks import BUCKET_COST_SLOTS, row_buckets

    assert row_buckets(np.full(1000, 128)) == [(0, 1000, 128)]  # balanced: one bucket
    few_long = np.r_[64, 64, np.full(998, 5)]  # two agents acted all along
    assert row_buckets(few_long) == [(0, 2, 64), (2, 1000, 5)]
    assert row_buckets(np.array([64, 60, 5])) == [(0, 3, 64)]  # a bucket costs more
    assert row_buckets(np.zeros(0, dtype=np.int64)) == []
    with pytest.raises(ValueError, match="sorted"):
        row_buckets(np.array([3, 5]))

    def cost(buckets, k, per_bucket):
        return sum(w * (b - a) for a, b, w in buckets) + per_bucket * len(buckets)

    rng = np.random.default_rng(0)
    for _ in range(30):  # against every partition into contiguous buckets
        k = np.sort(rng.integers(1, 60, 9))[::-1]
        per_bucket = int(rng.integers(0, 80))
        best = min(
            cost(
                [(a, b, int(k[a])) for a, b in zip((0, *cuts), (*cuts, 9), strict=True)],
                k,
                per_bucket,
            )
            for r in range(9)
            for cuts in itertools.combinations(range(1, 9), r)
        )
        got = row_buckets(k, per_bucket)
        assert [a for a, _, _ in got][0] == 0 and got[-1][1] == 9
        assert all(b == a2 for (_, b, _), (a2, _, _) in zip(got[:-1], got[1:], strict=True))
        assert cost(got, k, per_bucket) == best
    assert BUCKET_COST_SLOTS > 0
