"""Curiosity modules (ICM, RND) and their learner connector: placement, sync, math, loss."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.ppo import DefaultPPORLModule, PPOConfig
from rlmod.core import DEFAULT_MODULE_ID, Columns, MultiRLModule, MultiRLModuleSpec, RLModuleSpec
from rlmod.core.optim import Adam
from rlmod.curiosity import (
    IntrinsicCuriosityModel,
    IntrinsicCuriosityModelConnector,
    RandomNetworkDistillation,
)
from rlmod.env.wrappers import make_with_terminal_time_limit
from rlmod.errors import UnknownModuleIDError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "curiosity" / "inverse_dynamics_model_based_curiosity.py"
JSON_CONFIG = ROOT / "examples" / "curiosity" / "frozenlake_icm.json"
DESC = ["SFFF", "FFFF", "FFFF", "FFFG"]
ICM_LR = 5e-4


def _config(module_class: type = IntrinsicCuriosityModel) -> PPOConfig:
    return (
        PPOConfig()
        .environment(
            "FrozenLake-v1", env_config={"desc": DESC, "is_slippery": False, "max_episode_steps": 6}
        )
        .env_runners(num_envs_per_env_runner=2)
        .training(
            train_batch_size=64,
            minibatch_size=32,
            num_epochs=1,
            lr=3e-4,
            learner_connector=IntrinsicCuriosityModelConnector,
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    DEFAULT_MODULE_ID: RLModuleSpec(),
                    "icm": RLModuleSpec(
                        module_class=module_class,
                        learner_only=True,
                        model_config={"feature_dim": 8},
                    ),
                }
            ),
            algorithm_config_overrides_per_module={"icm": {"lr": ICM_LR}},
        )
        .debugging(seed=0)
    )


@pytest.fixture(scope="module")
def algo():
    algo = _config().build_algo()
    yield algo
    algo.stop()


class _LogStub:
    """Stands in for the Learner in `compute_self_supervised_loss` (it only logs)."""

    def __init__(self) -> None:
        self.logged: dict[str, dict[str, float]] = {}

    def log(self, module_id: str, **values) -> None:
        self.logged[module_id] = {k: float(torch.as_tensor(v).detach()) for k, v in values.items()}


# ---------------------------------------------------------------------- placement and sync
def test_icm_is_built_on_the_learner_and_on_no_env_runner(algo):
    learner = algo.learner_group.learner
    assert list(learner.module.keys()) == [DEFAULT_MODULE_ID, "icm"]
    assert isinstance(learner.module["icm"], IntrinsicCuriosityModel)
    assert learner.module["icm"].learner_only
    runner = algo.env_runner
    assert runner.module_ids == [DEFAULT_MODULE_ID]
    assert isinstance(runner.module, DefaultPPORLModule)
    runner_names = {name for name, _ in runner.module.named_parameters()}
    icm_names = {name for name, _ in learner.module["icm"].named_parameters()}
    assert {n.split(".")[0] for n in icm_names} == {"feature_net", "inverse_net", "forward_net"}
    assert not any(
        n.startswith(("feature_net", "inverse_net", "forward_net")) for n in runner_names
    )
    # What an EnvRunner is built from: the learner-only module is filtered out.
    spaces = algo.env_runner_group.get_spaces()
    assert "icm" not in spaces
    assert "icm" not in algo.config.get_multi_rl_module_spec(spaces=spaces, inference_only=True)
    assert algo.config.get_rl_module_spec(spaces=spaces).module_class is DefaultPPORLModule


def test_icm_gets_the_default_modules_spaces(algo):
    icm = algo.learner_group.learner.module["icm"]
    policy = algo.env_runner.module
    assert icm.observation_space == policy.observation_space  # one-hot Box(16), not Discrete
    assert icm.observation_space.shape == (16,)
    assert icm.action_space == gym.spaces.Discrete(4)


def test_weight_sync_carries_no_icm_weights(algo, monkeypatch):
    # get_weights() holds every module, the learner-only one too (RLlib's LearnerGroup)...
    assert set(algo.learner_group.get_weights()) == {DEFAULT_MODULE_ID, "icm"}
    sent = []
    monkeypatch.setattr(algo.env_runner, "set_state", lambda state: sent.append(state))
    algo.env_runner_group.sync_weights(from_learner_group=algo.learner_group)
    # ... but EnvRunners receive only their own module's inference-only weights.
    assert [list(s["rl_module"]) for s in sent] == [[DEFAULT_MODULE_ID]]
    assert not any(
        k.startswith(("feature_net", "inverse_net", "forward_net", "vf"))
        for k in sent[0]["rl_module"][DEFAULT_MODULE_ID]
    )


def test_icm_optimizer_uses_the_overridden_learning_rate(algo):
    learner = algo.learner_group.learner
    assert learner._optimizers["icm"].param_groups[0]["lr"] == ICM_LR
    assert learner._optimizers[DEFAULT_MODULE_ID].param_groups[0]["lr"] == 3e-4
    assert algo.config.get_config_for_module("icm").lr == ICM_LR
    assert algo.config.get_config_for_module(DEFAULT_MODULE_ID) is algo.config
    result = algo.train()  # update() re-reads each module's lr (schedules): still overridden
    assert result["learners"]["icm"]["default_optimizer_learning_rate"] == ICM_LR
    assert result["learners"][DEFAULT_MODULE_ID]["default_optimizer_learning_rate"] == 3e-4


def test_icm_is_trained_in_the_same_update_with_its_own_loss(algo):
    icm = algo.learner_group.learner.module["icm"]
    before = {k: v.clone() for k, v in icm.state_dict().items()}
    result = algo.train()
    icm_metrics = result["learners"]["icm"]
    assert {"forward_loss", "inverse_loss", "total_loss"} <= icm_metrics.keys()
    assert icm_metrics["num_module_steps_trained"] >= 64
    assert any(not torch.equal(before[k], v) for k, v in icm.state_dict().items())
    assert "policy_loss" in result["learners"][DEFAULT_MODULE_ID]


# ---------------------------------------------------------------------- the math
def _tiny_icm() -> IntrinsicCuriosityModel:
    """phi(s) = (s0, 2 s1); f(phi, a) = (phi_0, onehot(a)_1): weights fixed by hand."""
    icm = RLModuleSpec(
        module_class=IntrinsicCuriosityModel,
        learner_only=True,
        observation_space=gym.spaces.Box(0.0, 1.0, (2,)),
        action_space=gym.spaces.Discrete(2),
        model_config={
            "feature_dim": 2,
            "feature_net_hiddens": [],
            "inverse_net_hiddens": [],
            "forward_net_hiddens": [],
        },
    ).build()
    with torch.no_grad():
        icm.feature_net[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        icm.forward_net[0].weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]))
        for net in (icm.feature_net, icm.forward_net):
            net[0].bias.zero_()
    return icm


TINY_BATCH = {
    Columns.OBS: torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
    Columns.ACTIONS: torch.tensor([1, 0]),
    Columns.NEXT_OBS: torch.tensor([[0.0, 1.0], [1.0, 1.0]]),
}


def test_intrinsic_reward_matches_a_hand_computation():
    # Row 0: phi(s) = (1, 0), a = 1 -> f = (1, 1); phi(s') = (0, 2); 1/2 (1 + 1) = 1.0.
    # Row 1: phi(s) = (0, 2), a = 0 -> f = (0, 0); phi(s') = (1, 2); 1/2 (1 + 4) = 2.5.
    # (1/2 times the squared L2 norm, summed over the feature dims, not averaged.)
    r_int = _tiny_icm().compute_intrinsic_rewards(TINY_BATCH)
    torch.testing.assert_close(r_int, torch.tensor([1.0, 2.5]))


def test_icm_loss_is_beta_forward_plus_one_minus_beta_inverse():
    icm = _tiny_icm()
    stub = _LogStub()
    loss = icm.compute_self_supervised_loss(
        learner=stub,
        module_id="icm",
        config=None,
        batch=TINY_BATCH,
        fwd_out=icm.forward_train(TINY_BATCH),
    )
    logged = stub.logged["icm"]
    assert logged["forward_loss"] == pytest.approx(1.75)  # mean of (1.0, 2.5)
    assert float(loss.detach()) == pytest.approx(
        0.2 * 1.75 + 0.8 * logged["inverse_loss"], rel=1e-5
    )


def test_connector_adds_scaled_intrinsic_rewards_and_hands_the_icm_its_columns():
    icm = _tiny_icm()
    cols = {**TINY_BATCH, Columns.REWARDS: torch.tensor([0.0, 1.0])}
    batch = {DEFAULT_MODULE_ID: cols}
    out = IntrinsicCuriosityModelConnector(intrinsic_reward_coeff=0.1)(
        batch, rl_module=MultiRLModule({"icm": icm})
    )
    policy = out[DEFAULT_MODULE_ID]
    torch.testing.assert_close(policy[Columns.INTRINSIC_REWARDS], torch.tensor([1.0, 2.5]))
    torch.testing.assert_close(policy[Columns.REWARDS], torch.tensor([0.1, 1.25]))
    assert set(out["icm"]) == {Columns.OBS, Columns.NEXT_OBS, Columns.ACTIONS}
    for col in out["icm"]:  # the same tensors, not copies
        assert out["icm"][col] is policy[col]


def test_connector_reads_eta_from_the_icm_model_config_by_default():
    icm = _tiny_icm()
    icm.config = type(icm.config)(**{**icm.config.__dict__, "intrinsic_reward_coeff": 2.0})
    batch = {DEFAULT_MODULE_ID: {**TINY_BATCH, Columns.REWARDS: torch.zeros(2)}}
    out = IntrinsicCuriosityModelConnector()(batch, rl_module=MultiRLModule({"icm": icm}))
    torch.testing.assert_close(out[DEFAULT_MODULE_ID][Columns.REWARDS], torch.tensor([2.0, 5.0]))


def test_connector_without_the_module_names_the_fix():
    batch = {DEFAULT_MODULE_ID: dict(TINY_BATCH)}
    with pytest.raises(UnknownModuleIDError, match="learner_only=True"):
        IntrinsicCuriosityModelConnector()(batch, rl_module=MultiRLModule({}))


def _fit(module, batch, steps: int = 150) -> tuple[float, float]:
    stub = _LogStub()
    opt = Adam([p for p in module.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = module.compute_self_supervised_loss(
            learner=stub,
            module_id="m",
            config=None,
            batch=batch,
            fwd_out=module.forward_train(batch),
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses[0], losses[-1]


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))])
def test_icm_loss_decreases_on_a_fixed_batch(action_space):
    torch.manual_seed(0)
    icm = RLModuleSpec(
        module_class=IntrinsicCuriosityModel,
        learner_only=True,
        observation_space=gym.spaces.Box(-1, 1, (4,)),
        action_space=action_space,
    ).build()
    obs = torch.randn(64, 4)
    actions = torch.as_tensor(np.stack([action_space.sample() for _ in range(64)]))
    batch = {Columns.OBS: obs, Columns.ACTIONS: actions, Columns.NEXT_OBS: obs.roll(1, 1)}
    first, last = _fit(icm, batch)
    assert last < 0.5 * first


def test_rnd_trains_its_predictor_only_and_rewards_novelty():
    torch.manual_seed(0)
    rnd = RLModuleSpec(
        module_class=RandomNetworkDistillation,
        learner_only=True,
        observation_space=gym.spaces.Box(0, 1, (8,)),
        action_space=gym.spaces.Discrete(2),
    ).build()
    assert not any(p.requires_grad for p in rnd.target_net.parameters())
    seen = torch.eye(8)[:4]
    batch = {Columns.OBS: seen, Columns.ACTIONS: torch.zeros(4), Columns.NEXT_OBS: seen}
    target_before = [p.clone() for p in rnd.target_net.parameters()]
    first, last = _fit(rnd, batch)
    assert last < 0.1 * first
    assert all(
        torch.equal(a, b) for a, b in zip(target_before, rnd.target_net.parameters(), strict=True)
    )
    novel = {Columns.NEXT_OBS: torch.eye(8)[4:]}
    assert (
        rnd.compute_intrinsic_rewards(novel).min()
        > rnd.compute_intrinsic_rewards({Columns.NEXT_OBS: seen}).max()
    )


def test_rnd_runs_in_the_same_connector_pattern():
    algo = _config(RandomNetworkDistillation).build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert "total_loss" in result["learners"]["icm"]
    assert algo.env_runner.module_ids == [DEFAULT_MODULE_ID]


def test_unknown_icm_model_config_key_is_an_error():
    with pytest.raises(ValueError, match="feature_dim"):
        RLModuleSpec(
            module_class=IntrinsicCuriosityModel,
            observation_space=gym.spaces.Box(0, 1, (2,)),
            action_space=gym.spaces.Discrete(2),
            model_config={"feature_dims": 4},
        ).build()


def test_icm_rejects_unsupported_action_spaces():
    with pytest.raises(TypeError, match="Discrete and Box"):
        RLModuleSpec(
            module_class=IntrinsicCuriosityModel,
            observation_space=gym.spaces.Box(0, 1, (2,)),
            action_space=gym.spaces.MultiBinary(3),
        ).build()


# ---------------------------------------------------------------------- example and JSON
def _example():
    spec = importlib.util.spec_from_file_location("icm_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_json_config_equals_the_examples_config_and_trains_through_the_cli():
    from rlmod.cli import build_config

    settings = json.loads(JSON_CONFIG.read_text())
    config, _ = build_config(algo="PPO", env=None, settings=settings)  # env from the file
    expected = _example().build_config("FrozenLake", seed=0)
    # Same settings as the example (the JSON names unset spec fields by omission).
    got, want = config.to_dict(), expected.to_dict()
    assert {k: v for k, v in got.items() if k != "rl_module_spec"} == {
        k: v for k, v in want.items() if k != "rl_module_spec"
    }
    assert config.rl_module_spec == expected.rl_module_spec
    config.training(train_batch_size=64, minibatch_size=32).env_runners(num_envs_per_env_runner=2)
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert list(algo.learner_group.learner.module.keys()) == [DEFAULT_MODULE_ID, "icm"]
    assert algo.env_runner.module_ids == [DEFAULT_MODULE_ID]
    assert result["learners"]["icm"]["default_optimizer_learning_rate"] == 1e-3
    assert config.env is make_with_terminal_time_limit  # the task's step limit is terminal


def test_the_loss_returns_its_terms_and_the_old_import_paths_name_the_same_objects():
    import rlmod.connectors.curiosity as old_connector_path
    import rlmod.core.curiosity as old_module_path
    from rlmod import curiosity
    from rlmod.connectors import IntrinsicCuriosityModelConnector as from_package
    from rlmod.core import IntrinsicCuriosityModel as from_core

    assert old_module_path.IntrinsicCuriosityModel is curiosity.IntrinsicCuriosityModel
    assert from_core is curiosity.IntrinsicCuriosityModel
    assert old_connector_path.IntrinsicCuriosityModelConnector is from_package
    assert from_package is curiosity.IntrinsicCuriosityModelConnector
    icm = RLModuleSpec(
        module_class=IntrinsicCuriosityModel,
        learner_only=True,
        observation_space=gym.spaces.Box(0, 1, (4,)),
        action_space=gym.spaces.Discrete(2),
    ).build()
    batch = {
        "obs": torch.eye(4)[:3],
        "new_obs": torch.eye(4)[1:4],
        "actions": torch.tensor([0, 1, 1]),
    }
    terms = icm.loss_terms(batch, icm.forward_train(batch))
    assert set(terms) == {"total_loss", "forward_loss", "inverse_loss"}
    beta = icm.config.forward_loss_weight
    assert torch.allclose(
        terms["total_loss"], beta * terms["forward_loss"] + (1 - beta) * terms["inverse_loss"]
    )
