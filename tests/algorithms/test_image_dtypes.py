"""Image observations stay uint8 from the env to the module: at EnvRunner output, at the
Learner's input, in replay buffers and in offline Parquet files (1 byte per pixel), for
PPO, DQN, SAC, BC and multi-agent; Dict observations with an image travel packed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.sac import SACConfig
from rlmod.core.columns import Columns
from rlmod.env.multi_agent_env import make_multi_agent
from rlmod.offline.parquet_chunks import read_columns
from rlmod.offline.reader import resolve_files
from rlmod.testing.pixel_envs import BarOrientationEnv
from rlmod.utils.packed_obs import PackedObservationBox

IMAGE = (10, 10, 1)


def _record_dtypes(algo: Any) -> dict[str, list[Any]]:
    """Wraps the local EnvRunner's sample() and the local Learner's learner connector
    (whose output is what the Learner's modules train on) to record observation dtypes."""
    seen: dict[str, list[Any]] = {"runner": [], "learner": []}
    runner = getattr(algo, "env_runner", None)  # offline algorithms may have none
    if runner is not None:
        sample = runner.sample

        def sample_and_record(**kwargs: Any) -> Any:
            out = sample(**kwargs)
            for batch in out.values():
                seen["runner"].append((batch[Columns.OBS].dtype, batch[Columns.OBS].shape[1:]))
            return out

        runner.sample = sample_and_record
    learner = algo.learner_group._learner
    connector = learner._learner_connector

    def connect_and_record(batch: Any, **kwargs: Any) -> Any:
        out = connector(batch, **kwargs)
        for cols in out.values():
            for key in (Columns.OBS, Columns.NEXT_OBS):
                if key in cols:
                    seen["learner"].append((cols[key].dtype, tuple(cols[key].shape[1:])))
        return out

    learner._learner_connector = connect_and_record
    return seen


def _ppo(env: Any = BarOrientationEnv, **env_config: Any) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
        .debugging(seed=0)
    )


def test_ppo_images_are_uint8_at_env_runner_output_and_learner_input():
    algo = _ppo().build_algo()
    seen = _record_dtypes(algo)
    algo.train()
    algo.stop()
    assert seen["runner"] and set(seen["runner"]) == {(np.dtype(np.uint8), IMAGE)}
    assert seen["learner"] and {d for d, _ in seen["learner"]} == {torch.uint8}


def test_dict_obs_with_an_image_travel_as_packed_uint8_rows():
    algo = _ppo(dict_obs=True).build_algo()
    space = algo.env_runner_group.get_spaces()["default_policy"][0]
    assert isinstance(space, PackedObservationBox)
    assert space.shape == (100 + 4 * 2,)  # 100 pixels, then the one-hot flip as float32
    seen = _record_dtypes(algo)
    algo.train()
    algo.stop()
    assert set(seen["runner"]) == {(np.dtype(np.uint8), space.shape)}
    assert {d for d, _ in seen["learner"]} == {torch.uint8}


def test_packed_rows_unpack_to_the_parts():
    env = BarOrientationEnv({"dict_obs": True})
    space = PackedObservationBox(
        gym.spaces.Dict({**env.observation_space.spaces, "pos": gym.spaces.Box(-1, 1, (2,))})
    )
    obs = {
        "image": np.random.default_rng(0).integers(0, 256, (3, *IMAGE), dtype=np.uint8),
        "flip": np.array([0, 1, 1]),
        "pos": np.array([[0.5, -0.25], [1.0, 0.0], [-1.0, 0.125]], np.float32),
    }
    rows = space.pack(obs)
    assert rows.dtype == np.uint8 and space.contains(rows[0])
    [image], vector = space.unpack(torch.from_numpy(rows))
    assert image.dtype == torch.uint8 and torch.equal(image, torch.from_numpy(obs["image"]))
    assert vector is not None
    expected = np.concatenate([np.eye(2)[obs["flip"]], obs["pos"]], axis=1)
    np.testing.assert_array_equal(vector.numpy(), expected.astype(np.float32))


def test_dqn_replay_buffer_stores_uint8_images():
    config = (
        DQNConfig()
        .environment(BarOrientationEnv)
        .training(
            train_batch_size=32,
            num_steps_sampled_before_learning_starts=64,
            replay_buffer_config={"capacity": 1000},
        )
        .reporting(min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    seen = _record_dtypes(algo)
    algo.train()
    [buffer] = algo.replay_buffer.buffers.values()
    for key in (Columns.OBS, Columns.NEXT_OBS):
        assert buffer.columns[key].dtype == np.uint8
        assert buffer.columns[key].nbytes == buffer.capacity * int(np.prod(IMAGE))
    assert seen["learner"] and {d for d, _ in seen["learner"]} == {torch.uint8}
    assert algo.get_module().q.encoder.__class__.__name__ == "CNNEncoder"
    algo.stop()


def test_sac_discrete_trains_on_images_and_continuous_critics_take_the_action():
    config = (
        SACConfig()
        .environment(BarOrientationEnv)
        .training(train_batch_size=32, num_steps_sampled_before_learning_starts=64)
        .reporting(min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    seen = _record_dtypes(algo)
    algo.train()
    assert seen["learner"] and {d for d, _ in seen["learner"]} == {torch.uint8}
    algo.stop()

    from rlmod.algorithms.sac.default_sac_rl_module import DefaultSACRLModule, EncodedCritic

    module = DefaultSACRLModule(
        observation_space=gym.spaces.Box(0, 255, IMAGE, np.uint8),
        action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
    )
    assert isinstance(module.qf, EncodedCritic) and module.qf.encoder is not module.pi_encoder
    obs = torch.zeros(4, *IMAGE, dtype=torch.uint8)
    assert module.q_values(module.qf, obs, torch.zeros(4, 2)).shape == (4,)
    assert module.forward_train({"obs": obs, "new_obs": obs})["action_dist_inputs"].shape == (
        4,
        4,
    )


def test_parquet_keeps_uint8_images_and_bc_and_marwil_train_on_them(tmp_path: Path):
    algo = _ppo().offline_data(output=str(tmp_path)).build_algo()
    for _ in range(2):
        algo.train()
    algo.stop()
    cols = read_columns(resolve_files(tmp_path), obs_shape=IMAGE)
    assert cols[Columns.OBS].dtype == np.uint8 and cols[Columns.OBS].shape[1:] == IMAGE
    assert cols[Columns.NEXT_OBS].dtype == np.uint8
    stored = sum(f.stat().st_size for f in tmp_path.glob("*.parquet"))
    assert stored < 2 * cols[Columns.OBS].size  # obs + new_obs at <= 1 byte a pixel
    for config_cls in (BCConfig, MARWILConfig):
        algo = (
            config_cls()
            .environment(BarOrientationEnv)
            .offline_data(input_=str(tmp_path))
            .training(train_batch_size_per_learner=32)
            .debugging(seed=0)
            .build_algo()
        )
        seen = _record_dtypes(algo)
        result = algo.train()
        algo.stop()
        assert seen["learner"] and {d for d, _ in seen["learner"]} == {torch.uint8}, config_cls
        assert np.isfinite(result["learners"]["default_policy"]["total_loss"])


def _multi_agent_cnn_run(stack_modules: bool) -> tuple[dict[str, float], dict[str, Any]]:
    env_cls = make_multi_agent(lambda cfg: BarOrientationEnv(cfg))
    config = (
        _ppo(env_cls, num_agents=6)
        .multi_agent(
            policies={"p0", "p1", "p2"},  # 3 modules of one architecture: a stacked group
            policy_mapping_fn=lambda agent_id, *a, **k: f"p{agent_id % 3}",
            stack_modules=stack_modules,
        )
        .training(train_batch_size=192, minibatch_size=64, num_epochs=2)
    )
    algo = config.build_algo()
    result = algo.train()
    losses = {m: result["learners"][m]["total_loss"] for m in ("p0", "p1", "p2")}
    weights = {m: algo.get_module(m).encoder.convs[1].weight.detach().clone() for m in losses}
    for module_id in losses:
        assert algo.get_module(module_id).encoder.__class__.__name__ == "CNNEncoder"
    algo.stop()
    return losses, weights


def test_multi_agent_ppo_with_cnn_modules_trains_stacked_as_alone():
    stacked_losses, stacked_weights = _multi_agent_cnn_run(stack_modules=True)
    alone_losses, alone_weights = _multi_agent_cnn_run(stack_modules=False)
    assert all(np.isfinite(v) for v in stacked_losses.values())
    for mid, loss in alone_losses.items():
        assert abs(stacked_losses[mid] - loss) < 1e-4, (mid, stacked_losses, alone_losses)
        torch.testing.assert_close(stacked_weights[mid], alone_weights[mid], atol=1e-5, rtol=1e-4)


def test_inference_policy_feeds_images_and_packed_rows_as_the_env_runner_does(tmp_path: Path):
    from rlmod.algorithms import InferencePolicy

    for dict_obs in (False, True):
        algo = _ppo(dict_obs=dict_obs).build_algo()
        algo.train()
        policy = InferencePolicy.from_checkpoint(algo.save_to_path(tmp_path / str(dict_obs)))
        module = algo.env_runner.module
        env = BarOrientationEnv({"dict_obs": dict_obs})
        for seed in range(5):
            obs, _ = env.reset(seed=seed)
            batch = {k: np.asarray(v)[None] for k, v in obs.items()} if dict_obs else obs[None]
            rows = algo.env_runner._env_to_module(batch, episode_starts=np.ones(1, bool))
            logits = module.forward_inference({"obs": torch.from_numpy(rows)})
            expected = int(logits["action_dist_inputs"].argmax(-1)[0])
            assert int(policy.compute_single_action(obs)) == expected
        if not dict_obs:  # the exported program takes uint8 images
            program = torch.export.load(policy.export(tmp_path / "policy.pt2"))
            image = torch.from_numpy(obs[None])
            assert int(program.module()(image)[0]) == int(policy.compute_single_action(obs))
        algo.stop()


def test_rllib_frame_stacking_keeps_stacked_images_uint8_for_the_cnn():
    from rlmod.connectors import FrameStackingEnvToModule

    config = _ppo().env_runners(
        env_to_module_connector=lambda env, *a: FrameStackingEnvToModule(num_frames=4)
    )
    algo = config.build_algo()
    seen = _record_dtypes(algo)
    algo.train()
    assert set(seen["runner"]) == {(np.dtype(np.uint8), (10, 10, 4))}
    assert {d for d, _ in seen["learner"]} == {torch.uint8}
    assert algo.get_module().encoder.convs[1].in_channels == 4
    algo.stop()


def test_a_checkpoint_restores_cnn_modules_with_their_conv_filters(tmp_path: Path):
    from rlmod.algorithms.algorithm import Algorithm

    filters = [[8, 3, 2], [16, [3, 2], 1, "valid"]]
    algo = _ppo(dict_obs=True).rl_module(model_config={"conv_filters": filters}).build_algo()
    algo.train()
    path = algo.save_to_path(tmp_path)
    weights = {k: v.clone() for k, v in algo.get_module().state_dict().items()}
    algo.stop()
    restored = Algorithm.from_checkpoint(path)
    module = restored.get_module()
    assert module.config.conv_filters == filters
    assert isinstance(module.observation_space, PackedObservationBox)
    assert weights.keys() == module.state_dict().keys()
    for name, value in module.state_dict().items():
        assert torch.equal(value, weights[name]), name
    restored.train()
    restored.stop()


class _BoolImages(gym.ObservationWrapper):
    """BarOrientationEnv with bool pixels, as MinAtar gives them."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 1, IMAGE, bool)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation > 0


def test_bool_images_stay_bool_to_the_module_and_in_parquet(tmp_path: Path):
    algo = (
        _ppo(lambda cfg: _BoolImages(BarOrientationEnv(cfg)))
        .offline_data(output=str(tmp_path))
        .build_algo()
    )
    seen = _record_dtypes(algo)
    algo.train()
    algo.stop()
    assert set(seen["runner"]) == {(np.dtype(bool), IMAGE)}
    assert {d for d, _ in seen["learner"]} == {torch.bool}
    assert read_columns(resolve_files(tmp_path), obs_shape=IMAGE)[Columns.OBS].dtype == bool
