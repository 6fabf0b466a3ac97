"""InferencePolicy (rlmod/algorithms/inference.py) and `rlmod evaluate`: a checkpoint's
policy acts on raw observations exactly as the EnvRunner did, and exports match it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.algorithms import InferencePolicy
from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.cli import main
from rlmod.connectors.env_to_module import MeanStdFilter
from rlmod.core.columns import Columns
from rlmod.errors import CheckpointError
from rlmod.tuned import TUNED


def test_the_five_line_snippet(tmp_path: Path) -> None:
    algo = PPOConfig().environment("CartPole-v1").training(train_batch_size=256).build_algo()
    checkpoint = algo.save_to_path(tmp_path / "ckpt")
    # --- the documented snippet (README, "Production inference") ---
    from rlmod.algorithms import InferencePolicy

    policy = InferencePolicy.from_checkpoint(checkpoint)
    action = policy.compute_single_action(np.array([0.0, 0.1, 0.0, -0.1]))
    # ---
    module = algo.learner_group.learner.module["default_policy"]
    logits = module.forward_inference({"obs": torch.tensor([[0.0, 0.1, 0.0, -0.1]])})
    assert action == int(logits["action_dist_inputs"].argmax())
    assert policy.module.inference_only and "vf.0.weight" not in policy.module.state_dict()
    algo.stop()


def test_mean_std_statistics_are_applied_and_frozen(tmp_path: Path) -> None:
    config = (
        PPOConfig()
        .environment("Pendulum-v1")
        .env_runners(env_to_module_connector=lambda env: MeanStdFilter())
        .training(train_batch_size=256, minibatch_size=64)
        .debugging(seed=1)
    )
    algo = config.build_algo()
    algo.train()
    checkpoint = algo.save_to_path(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"env_to_module_connector was <function"):
        InferencePolicy.from_checkpoint(checkpoint)  # never silently without the filter
    policy = InferencePolicy.from_checkpoint(
        checkpoint, env_to_module_connector=lambda env: MeanStdFilter()
    )
    raw = np.array([[0.5, -0.5, 3.0], [1.0, 0.0, -2.0]], dtype=np.float32)
    # What the EnvRunner's own pipeline makes of the same observations, without updating.
    runner_filter = algo.env_runner._env_to_module.connectors[-1]
    runner_filter.update_stats = False
    expected = algo.env_runner._env_to_module(raw, episode_starts=np.ones(2, bool))
    assert not np.allclose(expected, raw)  # really normalized
    got = policy.env_to_module(raw, episode_starts=np.ones(2, bool))
    np.testing.assert_array_equal(got, expected)
    before = policy.env_to_module.get_state()
    policy.compute_actions(raw)
    after = policy.env_to_module.get_state()
    assert all(
        np.array_equal(a, b) for a, b in zip(_leaves(before), _leaves(after), strict=True)
    )  # serving does not move the statistics
    algo.stop()


def _leaves(tree: object) -> list:
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    return [np.asarray(tree)]


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("fmt", ["torch", "onnx"])
def test_exported_policy_gives_the_same_actions(env: str, fmt: str, tmp_path: Path) -> None:
    algo = PPOConfig().environment(env).training(train_batch_size=256).build_algo()
    algo.train()
    policy = InferencePolicy.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    algo.stop()
    obs_dim = policy.module.observation_space.shape[0]
    obs = np.random.default_rng(0).normal(size=(9, obs_dim)).astype(np.float32)
    expected = policy.compute_actions(obs)
    if fmt == "torch":
        program = torch.export.load(policy.export(tmp_path / "policy.pt2"))
        got = program.module()(torch.from_numpy(obs)).detach().numpy()
    else:
        ort = pytest.importorskip("onnxruntime")
        session = ort.InferenceSession(policy.export(tmp_path / "policy.onnx", format="onnx"))
        got = session.run(None, {"obs": obs})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_export_refuses_an_unknown_format(tmp_path: Path) -> None:
    algo = PPOConfig().environment("CartPole-v1").training(train_batch_size=256).build_algo()
    policy = InferencePolicy.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="expected 'torch' or 'onnx'"):
        policy.export(tmp_path / "x", format="tflite")
    algo.stop()


def test_evaluate_cli_prints_the_mean_return(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert (
        main(
            [
                "train",
                "--env",
                "CartPole-v1",
                "--stop-iters",
                "1",
                "--no-tensorboard",
                "--run-dir",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    assert "checkpoint           " in capsys.readouterr().out
    assert main(["evaluate", str(tmp_path / "run"), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "over 2 episodes" in out and "episode_return_mean" in out
    assert main(["evaluate", str(tmp_path / "nothing")]) == 2
    assert "neither a checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_a_solved_cartpole_checkpoint_evaluates_to_475(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    config = PPOConfig().environment("CartPole-v1").debugging(seed=0)
    for name, value in TUNED["CartPole-v1"].items():
        setattr(config, name, value)
    algo = config.build_algo()
    for _ in range(150):
        if algo.train()["env_runners"]["episode_return_mean"] >= 475:
            break
    checkpoint = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    assert main(["evaluate", checkpoint, "--episodes", "10"]) == 0
    mean = float(capsys.readouterr().out.split("episode_return_mean")[1].split()[0])
    assert mean >= 475


def test_policy_acts_like_the_env_runner_greedily(tmp_path: Path) -> None:
    algo = PPOConfig().environment("CartPole-v1").training(train_batch_size=256).build_algo()
    algo.train()
    policy = InferencePolicy.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    batch = algo.env_runner.sample(num_timesteps=64, explore=False)["default_policy"]
    np.testing.assert_array_equal(
        policy.compute_actions(batch[Columns.OBS]), batch[Columns.ACTIONS]
    )
    algo.stop()


def test_evaluate_renders_and_explains_a_missing_video_dependency(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    algo = PPOConfig().environment("CartPole-v1").training(train_batch_size=256).build_algo()
    checkpoint = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    assert main(["evaluate", checkpoint, "--episodes", "1", "--render", "rgb_array"]) == 0
    assert main(["evaluate", checkpoint, "--video-dir", str(tmp_path / "v")]) == 2
    assert "--video-dir needs --render rgb_array" in capsys.readouterr().err
    try:
        import moviepy  # noqa: F401
    except ImportError:
        code = main(
            [
                "evaluate",
                checkpoint,
                "--episodes",
                "1",
                "--render",
                "rgb_array",
                "--video-dir",
                str(tmp_path / "v"),
            ]
        )
        assert code == 2 and "moviepy" in capsys.readouterr().err.lower()
    else:
        assert (
            main(
                [
                    "evaluate",
                    checkpoint,
                    "--episodes",
                    "1",
                    "--render",
                    "rgb_array",
                    "--video-dir",
                    str(tmp_path / "v"),
                ]
            )
            == 0
        )
        assert list((tmp_path / "v").glob("*.mp4"))


def _off_policy(config: DQNConfig | SACConfig) -> DQNConfig | SACConfig:
    return (
        config.debugging(seed=0)
        .env_runners(rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .training(num_steps_sampled_before_learning_starts=16, train_batch_size=8)
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=None)
    )


@pytest.mark.parametrize(
    "config",
    [
        DQNConfig().environment("CartPole-v1"),
        SACConfig().environment("Pendulum-v1"),
        SACConfig().environment("CartPole-v1"),  # discrete SAC
    ],
    ids=["DQN", "SAC", "discrete-SAC"],
)
def test_dqn_and_sac_checkpoints_act_greedily_evaluate_and_export(
    config: DQNConfig | SACConfig, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    algo = _off_policy(config).build_algo()
    for _ in range(6):
        algo.train()
    learner_module = algo.learner_group.learner.module["default_policy"]
    if isinstance(config, SACConfig) and not learner_module.discrete:
        with torch.no_grad():  # large means: tanh(mean) and clamp(mean) disagree
            learner_module.pi[-1].bias[0].fill_(1.5)
    checkpoint = algo.save_to_path(tmp_path / "ckpt")
    policy = InferencePolicy.from_checkpoint(checkpoint)
    # The small module: no target networks, no critics (DQN keeps its online Q head).
    keys = set(policy.module.state_dict())
    assert not any("target" in k or k.startswith(("qf", "alpha")) for k in keys), keys
    algo.env_runner.set_state({"rl_module": algo.learner_group.get_weights(inference_only=True)})
    batch = algo.env_runner.sample(num_timesteps=32, explore=False)["default_policy"]
    actions = policy.compute_actions(batch[Columns.OBS])
    space = algo.env_runner.env.single_action_space
    if isinstance(space, gym.spaces.Box):  # the batch holds the module's [-1, 1] actions
        expected = space.low + (batch[Columns.ACTIONS] + 1.0) * 0.5 * (space.high - space.low)
        np.testing.assert_allclose(actions, expected, rtol=1e-6)
        assert np.abs(batch[Columns.ACTIONS]).max() > 0.5  # tanh(1.5 + ...): far from 0
    else:
        np.testing.assert_array_equal(actions, batch[Columns.ACTIONS])
    program = torch.export.load(policy.export(tmp_path / "policy.pt2")).module()
    obs = policy.env_to_module(batch[Columns.OBS], episode_starts=np.ones(32, bool))
    exported = program(torch.as_tensor(obs, dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(exported.reshape(actions.shape), actions, rtol=1e-5, atol=1e-6)
    algo.stop()
    assert main(["evaluate", checkpoint, "--episodes", "2"]) == 0
    assert "over 2 episodes" in capsys.readouterr().out
