"""MARWIL and BC: trained on Learners that never build an env, spaces from the config or
the data, the loss as in the paper, RLlib's defaults; slow tests learn CartPole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms.bc import BC, BCConfig
from rlmod.algorithms.marwil import MARWIL, MARWILConfig, MARWILLearner
from rlmod.connectors.env_to_module import MeanStdFilter
from rlmod.core.columns import Columns
from rlmod.errors import OfflineDataError
from rlmod.offline import record_episodes
from rlmod.testing import RandomPolicy, cartpole_expert

CARTPOLE = gym.make("CartPole-v1")


@pytest.fixture
def expert_dir(tmp_path: Path) -> Path:
    out = tmp_path / "expert"
    record_episodes(
        gym.make("CartPole-v1"),
        cartpole_expert,
        num_episodes=4,
        output_dir=out,
        seed=0,
        max_rows_per_file=1000,
    )
    return out


def _small(config: Any, data: Path) -> Any:
    return (
        config.offline_data(input_=str(data), shuffle_buffer_size=500)
        .training(lr=3e-3, train_batch_size=256, minibatch_size=128)
        .debugging(seed=0)
    )


def test_defaults_are_rllibs() -> None:
    config = MARWILConfig()
    assert (config.beta, config.vf_coeff, config.lr, config.train_batch_size) == (
        1.0,
        1.0,
        1e-4,
        2000,
    )
    assert config.moving_average_sqd_adv_norm_update_rate == 1e-8
    assert config.moving_average_sqd_adv_norm_start == 100.0
    assert BCConfig().beta == 0.0 and isinstance(BCConfig(), MARWILConfig)
    assert issubclass(BC, MARWIL)  # BC is MARWIL with beta=0, not a copy
    assert BCConfig().get_default_learner_class() is MARWILLearner


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to build an env fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("offline training built an env")

    monkeypatch.setattr(gym, "make", refuse)
    monkeypatch.setattr(gym, "make_vec", refuse)
    monkeypatch.setattr(gym.vector, "SyncVectorEnv", refuse)


def test_the_no_env_guard_catches_an_env_runner(no_env: None) -> None:
    from rlmod.algorithms.ppo import PPOConfig

    with pytest.raises(AssertionError, match="built an env"):
        PPOConfig().environment("CartPole-v1").build_algo()


@pytest.mark.parametrize("algo", ["BC", "MARWIL"])
@pytest.mark.parametrize("spaces_from", ["config", "data"])
def test_a_learner_trains_with_no_env_at_all(
    expert_dir: Path, no_env: None, algo: str, spaces_from: str
) -> None:
    config = _small(BCConfig() if algo == "BC" else MARWILConfig(), expert_dir)
    if spaces_from == "config":
        (expert_dir / "spaces.json").unlink()
        config.environment(
            observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space
        )
    algo_ = config.build_algo()
    assert algo_.env_runner_group is None and algo_.env_runner is None
    before = {
        k: v.clone()
        for k, v in algo_.learner_group.learner.module["default_policy"].state_dict().items()
    }
    losses = [algo_.train()["learners"]["default_policy"]["policy_loss"] for _ in range(8)]
    after = algo_.learner_group.learner.module["default_policy"].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert losses[-1] < losses[0]
    assert algo_.get_module().observation_space == CARTPOLE.observation_space
    algo_.stop()


def test_spaces_that_disagree_with_the_data_are_refused(expert_dir: Path) -> None:
    config = _small(BCConfig(), expert_dir).environment(
        observation_space=gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        action_space=CARTPOLE.action_space,
    )
    with pytest.raises(
        OfflineDataError,
        match=r"observation_space=Box.*does not fit the "
        r"recorded observation_space .*spaces\.json: its shape is \(3,\)",
    ):
        config.build_algo()


def test_no_spaces_anywhere_names_both_ways(expert_dir: Path) -> None:
    (expert_dir / "spaces.json").unlink()
    with pytest.raises(OfflineDataError) as e:
        _small(BCConfig(), expert_dir).build_algo()
    assert "config.environment(observation_space=..., action_space=...)" in str(e.value)
    assert "spaces.json" in str(e.value)


def test_input_must_be_set(expert_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"offline_data\(input_=...\)"):
        BCConfig().build_algo()


def test_online_algorithms_refuse_an_offline_input(expert_dir: Path) -> None:
    from rlmod.algorithms.ppo import PPOConfig

    with pytest.raises(ValueError, match="read by offline algorithms"):
        PPOConfig().environment("CartPole-v1").offline_data(input_=str(expert_dir)).validate()


def test_a_corrupt_file_stops_build_with_its_name(expert_dir: Path) -> None:
    file = sorted(expert_dir.glob("*.parquet"))[0]
    file.write_bytes(file.read_bytes()[:100])
    with pytest.raises(OfflineDataError, match=file.name):
        _small(BCConfig(), expert_dir).build_algo()


def test_running_statistics_connectors_are_refused(expert_dir: Path) -> None:
    config = _small(BCConfig(), expert_dir).env_runners(
        env_to_module_connector=lambda env, spaces, device: MeanStdFilter()
    )
    with pytest.raises(ValueError, match="MeanStdFilter"):
        config.build_algo()


def test_one_hot_observations_offline_and_the_module_runs_unchanged_on_an_env_runner(
    tmp_path: Path,
) -> None:
    """FrozenLake data holds cell indices; the Learner sees them one-hot (as an EnvRunner
    would) and evaluation runs the trained module on an EnvRunner."""
    env = gym.make("FrozenLake-v1")
    record_episodes(
        env, RandomPolicy(env.action_space, seed=0), num_episodes=50, output_dir=tmp_path, seed=0
    )
    algo = (
        _small(BCConfig(), tmp_path)
        .environment("FrozenLake-v1")
        .evaluation(evaluation_interval=1, evaluation_duration=3)
        .build_algo()
    )
    assert algo.learner_group.learner.module["default_policy"].observation_space.shape == (16,)
    result = algo.train()
    assert result["evaluation"]["env_runners"]["num_episodes"] == 3
    algo.stop()


def test_box_actions_are_scored_in_the_modules_scale(tmp_path: Path, no_env: None) -> None:
    """Pendulum's env actions lie in [-2, 2]; the module's Gaussian is fitted on [-1, 1]."""
    import gymnasium.envs.classic_control as cc

    env = gym.wrappers.TimeLimit(cc.PendulumEnv(), max_episode_steps=50)
    record_episodes(
        env, lambda obs: np.array([1.5], np.float32), num_episodes=10, output_dir=tmp_path, seed=0
    )
    algo = _small(BCConfig(), tmp_path).training(lr=1e-2).build_algo()
    batch = algo.reader.next_batch()
    np.testing.assert_allclose(batch[Columns.ACTIONS], 0.75)
    for _ in range(30):
        algo.train()
    module = algo.learner_group.learner.module["default_policy"]
    out = module.forward_inference({Columns.OBS: torch.from_numpy(batch[Columns.OBS])})
    mean = out[Columns.ACTION_DIST_INPUTS][:, 0]
    assert abs(float(mean.mean()) - 0.75) < 0.15


def test_marwil_weights_rows_by_advantage(tmp_path: Path) -> None:
    """With beta > 0 the loss is exp(beta * A / c)-weighted: its logged weight mean is not
    1, the value loss is trained, and c^2 moves by the update rate."""
    record_episodes(
        gym.make("CartPole-v1"), cartpole_expert, num_episodes=2, output_dir=tmp_path, seed=0
    )
    algo = (
        _small(MARWILConfig(), tmp_path)
        .training(moving_average_sqd_adv_norm_update_rate=0.5)
        .build_algo()
    )
    learner = algo.learner_group.learner
    out = algo.train()["learners"]["default_policy"]
    assert out["mean_advantage_weight"] != pytest.approx(1.0)
    assert out["vf_loss"] > 0
    assert learner.moving_avg_sqd_adv_norms["default_policy"] != 100.0
    bc = _small(BCConfig(), tmp_path).build_algo().train()["learners"]["default_policy"]
    assert "vf_loss" not in bc and "mean_advantage_weight" not in bc


def test_checkpoint_round_trip_keeps_the_normalizer(tmp_path: Path) -> None:
    record_episodes(
        gym.make("CartPole-v1"),
        cartpole_expert,
        num_episodes=2,
        output_dir=tmp_path / "data",
        seed=0,
    )
    config = _small(MARWILConfig(), tmp_path / "data").training(
        moving_average_sqd_adv_norm_update_rate=0.5
    )
    algo = config.build_algo()
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    restored = MARWIL.from_checkpoint(path)
    assert (
        restored.learner_group.learner.moving_avg_sqd_adv_norms
        == algo.learner_group.learner.moving_avg_sqd_adv_norms
    )


def test_marwil_loss_by_hand(tmp_path: Path) -> None:
    """Wang et al. 2018, eq. 5 with RLlib's normalizer: c^2 moves towards mean(A^2) by
    the update rate, weights exp(beta * A / c) are constants, the value loss is
    0.5 * mean((V - R)^2) scaled by vf_coeff."""
    record_episodes(
        gym.make("CartPole-v1"), cartpole_expert, num_episodes=1, output_dir=tmp_path, seed=0
    )
    algo = (
        _small(MARWILConfig(), tmp_path)
        .training(
            beta=0.7,
            vf_coeff=0.3,
            moving_average_sqd_adv_norm_update_rate=0.25,
            moving_average_sqd_adv_norm_start=4.0,
        )
        .build_algo()
    )
    learner = algo.learner_group.learner
    module = learner.module["default_policy"]
    rng = np.random.default_rng(0)
    batch = {
        Columns.OBS: torch.as_tensor(rng.normal(size=(6, 4)), dtype=torch.float32),
        Columns.ACTIONS: torch.as_tensor(rng.integers(2, size=6)),
        Columns.VALUE_TARGETS: torch.as_tensor(rng.normal(size=6) * 3, dtype=torch.float32),
    }
    fwd_out = module.forward_train(batch)
    loss = learner.compute_loss_for_module(
        module_id="default_policy", config=algo.config, batch=batch, fwd_out=fwd_out
    )
    with torch.no_grad():
        logp = torch.log_softmax(fwd_out[Columns.ACTION_DIST_INPUTS], -1)[
            torch.arange(6), batch[Columns.ACTIONS]
        ]
        values = module.compute_values(batch)
        adv = batch[Columns.VALUE_TARGETS] - values
        c2 = 4.0 + 0.25 * (float((adv**2).mean()) - 4.0)
        weights = torch.exp(0.7 * adv / c2**0.5)
        expected = -(weights * logp).mean() + 0.3 * 0.5 * (adv**2).mean()
    assert learner.moving_avg_sqd_adv_norms["default_policy"] == pytest.approx(c2)
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    # The weights are constants: gradients are those of -mean(w * logp) with w fixed,
    # plus the value loss's.
    params = [p for p in module.parameters() if p.requires_grad]
    got = torch.autograd.grad(loss, params, allow_unused=True)
    out = module.forward_train(batch)
    logp = torch.log_softmax(out[Columns.ACTION_DIST_INPUTS], -1)[
        torch.arange(6), batch[Columns.ACTIONS]
    ]
    values = module.compute_values(batch)
    by_hand = (
        -(weights * logp).mean() + 0.3 * 0.5 * ((batch[Columns.VALUE_TARGETS] - values) ** 2).mean()
    )
    want = torch.autograd.grad(by_hand, params, allow_unused=True)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w)


def test_a_bc_checkpoint_serves_and_evaluates(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """No EnvRunner, yet InferencePolicy and `rlmod evaluate` act from a BC checkpoint:
    one-hot FrozenLake observations, the env's spaces from the checkpoint's metadata."""
    from rlmod.algorithms.inference import InferencePolicy
    from rlmod.cli import main

    env = gym.make("FrozenLake-v1")
    record_episodes(
        env,
        RandomPolicy(env.action_space, seed=0),
        num_episodes=20,
        output_dir=tmp_path / "data",
        seed=0,
    )
    algo = (
        _small(BCConfig(), tmp_path / "data")
        .environment("FrozenLake-v1")
        .training(train_batch_size=64, minibatch_size=32)
        .build_algo()
    )
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    policy = InferencePolicy.from_checkpoint(path)
    module = algo.learner_group.learner.module["default_policy"]
    for cell in range(16):
        one_hot = torch.nn.functional.one_hot(torch.tensor([cell]), 16).float()
        logits = module.forward_inference({Columns.OBS: one_hot})[Columns.ACTION_DIST_INPUTS]
        assert policy.compute_single_action(cell) == int(logits.argmax())
    assert main(["evaluate", path, "--episodes", "2"]) == 0
    assert "over 2 episodes" in capsys.readouterr().out
