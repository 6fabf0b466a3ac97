"""Env-to-module pieces written as RLlib's docs write them (ConnectorV2 subclasses, an
observation preprocessor, FlattenObservations / MeanStdFilter / FrameStackingEnvToModule
by RLlib's names), on an env with Dict observations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors import (
    ConnectorV2,
    FlattenObservations,
    FrameStacking,
    FrameStackingEnvToModule,
    MeanStdFilter,
    SingleAgentObservationPreprocessor,
)
from rlmod.core.columns import Columns
from rlmod.env import SingleAgentEnvRunner


class GoalEnv(gym.Env):
    """Dict observations: a position and a goal index; reward for moving toward the goal."""

    observation_space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "goal": gym.spaces.Discrete(3),
        }
    )
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config=None):
        self._t = 0
        self._obs = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._obs = {
            "pos": self.np_random.uniform(-1, 1, 2).astype(np.float32),
            "goal": int(self.np_random.integers(3)),
        }
        return self._obs, {}

    def step(self, action):
        self._t += 1
        reward = float(action == self._obs["goal"])
        self._obs = {
            "pos": self.np_random.uniform(-1, 1, 2).astype(np.float32),
            "goal": int(self.np_random.integers(3)),
        }
        return self._obs, reward, False, self._t >= 10, {"t": self._t}


class PosAndGoalOneHot(SingleAgentObservationPreprocessor):
    """RLlib's preprocessor pattern: the raw Dict observation in, one flat vector out."""

    seen_types: set = set()

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        assert isinstance(input_observation_space, gym.spaces.Dict)  # raw: user pieces first
        return gym.spaces.Box(-1.0, 1.0, (5,), np.float32)

    def preprocess(self, observation, episode):
        type(self).seen_types.add(type(observation))
        out = np.zeros(5, np.float32)
        out[:2] = observation["pos"]
        out[2 + int(observation["goal"])] = 1.0
        return out


class DoublePositions(ConnectorV2):
    """A ConnectorV2 on the batch: scales the raw Dict's positions; rlmod's default
    flattening runs after it (as RLlib's defaults run after user pieces)."""

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kwargs):
        assert rl_module is not None and len(episodes) == len(batch[Columns.OBS]["pos"])
        batch[Columns.OBS] = {**batch[Columns.OBS], "pos": batch[Columns.OBS]["pos"] * 2.0}
        return batch


def config_with(factory) -> PPOConfig:
    return (
        PPOConfig()
        .environment(GoalEnv)
        .env_runners(num_envs_per_env_runner=3, env_to_module_connector=factory)
        .training(train_batch_size=120, minibatch_size=60, num_epochs=1)
        .debugging(seed=0)
    )


def test_observation_preprocessor_sees_raw_dict_observations_and_sets_the_module_space():
    received = {}

    def factory(env, spaces, device):
        received.update(spaces)
        return PosAndGoalOneHot()

    algo = config_with(factory).build_algo()
    spaces = algo.env_runner.get_spaces()
    assert spaces["default_policy"][0] == gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    assert isinstance(spaces["__env_single__"][0], gym.spaces.Dict)
    assert received["__env_single__"][0] == GoalEnv.observation_space
    result = algo.train()
    assert PosAndGoalOneHot.seen_types == {dict}
    batch = algo.env_runner.sample(num_timesteps=30)["default_policy"]
    obs = batch[Columns.OBS]
    assert obs.shape[1] == 5 and np.all(obs[:, 2:].sum(1) == 1.0)  # one-hot goal
    assert result["env_runners"]["num_episodes"] > 0
    algo.stop()


def test_a_connector_v2_on_the_batch_runs_before_the_default_flattening():
    runner = SingleAgentEnvRunner(config=config_with(lambda env, spaces, device: DoublePositions()))
    obs = runner.sample(num_timesteps=30)["default_policy"][Columns.OBS]
    flat = runner.get_spaces()["default_policy"][0]
    assert flat.shape == (5,)  # Dict(goal: Discrete(3), pos: Box(2)) flattened after it
    assert np.abs(obs[:, 3:]).max() > 1.0  # positions doubled (raw ones lie in [-1, 1])


def test_rllib_named_pieces_flatten_then_normalize_a_dict_observation():
    factory = lambda env, spaces, device: [  # noqa: E731 - as RLlib's docs write it
        FlattenObservations(),
        MeanStdFilter(clip_by_value=5.0),
    ]
    runner = SingleAgentEnvRunner(config=config_with(factory))
    assert runner.get_spaces()["default_policy"][0] == gym.spaces.Box(-5.0, 5.0, (5,), np.float32)
    obs = runner.sample(num_timesteps=300)["default_policy"][Columns.OBS]
    assert np.abs(obs).max() <= 5.0 and abs(obs[100:].mean()) < 0.5


def test_frame_stacking_env_to_module_stacks_along_the_last_axis():
    image = gym.spaces.Box(0.0, 1.0, (2, 2, 1), np.float32)  # RLlib's case: last axis 1
    piece = FrameStackingEnvToModule(image, gym.spaces.Discrete(2), num_frames=3)
    assert piece.observation_space.shape == (2, 2, 3)
    frames = [np.full((1, 2, 2, 1), float(i), np.float32) for i in range(4)]
    out = [piece(f, episode_starts=np.array([i == 0])) for i, f in enumerate(frames)]
    assert out[0][0, 0, 0].tolist() == [0.0, 0.0, 0.0]  # filled with the first frame
    assert out[3][0, 0, 0].tolist() == [1.0, 2.0, 3.0]  # oldest first
    flat = FrameStackingEnvToModule(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), num_frames=2
    )
    assert flat.observation_space.shape == (8,)


def test_frame_stacking_keeps_uint8_frames_uint8():
    image = gym.spaces.Box(0, 255, (2, 2, 1), np.uint8)
    piece = FrameStackingEnvToModule(image, gym.spaces.Discrete(2), num_frames=4)
    assert piece.observation_space == gym.spaces.Box(0, 255, (2, 2, 4), np.uint8)
    out = piece(np.full((3, 2, 2, 1), 200, np.uint8), episode_starts=np.ones(3, bool))
    assert out.dtype == np.uint8 and piece.observation_space.contains(out[0])
    flat = FrameStacking(num_frames=2)
    flat.set_input_spaces(gym.spaces.Box(0, 255, (3,), np.uint8), gym.spaces.Discrete(2))
    out = flat(np.full((1, 3), 7, np.uint8), episode_starts=np.ones(1, bool))
    assert out.dtype == np.float32 == flat.observation_space.dtype  # flat stacks: float32


def test_rllib_options_rlmod_does_not_have_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="as_learner_connector"):
        FrameStackingEnvToModule(num_frames=2, as_learner_connector=True)
    with pytest.raises(ValueError, match="agent_ids"):
        FlattenObservations(agent_ids=["a"])


def test_a_connector_v2_that_returns_no_batch_is_named():
    class Forgetful(ConnectorV2):
        def __call__(self, *, rl_module, batch, episodes, **kwargs):
            return None

    with pytest.raises(TypeError, match="Forgetful.__call__ must return the batch"):
        SingleAgentEnvRunner(config=config_with(lambda env, spaces, device: Forgetful())).sample(
            num_timesteps=3
        )
