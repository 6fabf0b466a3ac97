"""Every action that reaches the env is inside its declared space (module-to-env
connectors, rlmod/connectors/module_to_env.py, through a real SingleAgentEnvRunner)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

try:  # a dev dependency (pyproject.toml); the other tests here run without it
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    st = None

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import SingleAgentEnvRunner


class _Recorder(gym.Env):
    """Observes zeros, records every action it gets; episodes of 4 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, config: dict) -> None:
        self.action_space = config["action_space"]
        self.observation_space = config.get("observation_space", self.observation_space)
        self.seen = config["seen"]
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.seen.append(action)
        self.t += 1
        return self.observation_space.sample(), 1.0, False, self.t >= 4, {}


def _sample_actions(
    action_space: gym.Space,
    *,
    explore: bool = True,
    steps: int = 12,
    observation_space: gym.Space | None = None,
) -> list:
    seen: list = []
    env_config = {"action_space": action_space, "seen": seen}
    if observation_space is not None:
        env_config["observation_space"] = observation_space
    config = (
        PPOConfig()
        .environment(_Recorder, env_config=env_config)
        .env_runners(num_envs_per_env_runner=3)
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=config)
    runner.sample(num_timesteps=steps, explore=explore)
    runner.stop()
    return seen


if st is not None:

    def _bound(draw) -> tuple[float, float]:
        low = draw(st.sampled_from([-np.inf, -3.0, -1.0, 0.0, 0.5]))
        high = draw(st.sampled_from([np.inf, low + 0.01, low + 1.0, low + 5.0]))
        return low, (np.inf if not np.isfinite(high) else high)

    @st.composite
    def _boxes(draw) -> gym.spaces.Box:
        shape = draw(st.sampled_from([(1,), (3,), (2, 2)]))
        bounds = [_bound(draw) for _ in range(int(np.prod(shape)))]
        low = np.array([b[0] for b in bounds], np.float32).reshape(shape)
        high = np.array([b[1] for b in bounds], np.float32).reshape(shape)
        return gym.spaces.Box(low, high, dtype=np.float32)

    _leaf = st.one_of(
        st.builds(
            lambda n, s: gym.spaces.Discrete(n, start=s), st.integers(1, 5), st.integers(-3, 6)
        ),
        st.builds(
            lambda nvec, s: gym.spaces.MultiDiscrete(nvec, start=[s] * len(nvec)),
            st.lists(st.integers(1, 4), min_size=1, max_size=3),
            st.integers(-2, 3),
        ),
        _boxes(),
        st.sampled_from([gym.spaces.MultiBinary(3), gym.spaces.MultiBinary([2, 2])]),
    )
    _spaces = st.one_of(
        _leaf,
        st.lists(_leaf, min_size=1, max_size=3).map(gym.spaces.Tuple),
        st.lists(_leaf, min_size=1, max_size=3).map(
            lambda parts: gym.spaces.Dict({f"k{i}": p for i, p in enumerate(parts)})
        ),
    )

    @settings(max_examples=40, deadline=None)
    @given(space=_spaces, explore=st.booleans())
    def test_every_action_that_reaches_the_env_is_in_its_space(space, explore):
        seen = _sample_actions(space, explore=explore)
        assert len(seen) >= 12
        for action in seen:
            assert space.contains(action), (space, action)
else:

    def test_every_action_that_reaches_the_env_is_in_its_space():
        pytest.skip("needs hypothesis: pip install -e '.[dev]'")


def test_discrete_start_is_honoured():
    seen = _sample_actions(gym.spaces.Discrete(3, start=5), steps=60)
    assert set(int(a) for a in seen) == {5, 6, 7}


def test_box_clips_finite_dimensions_and_leaves_infinite_ones_alone():
    space = gym.spaces.Box(
        np.array([-1.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32)
    )
    seen = np.array(_sample_actions(space, steps=300))
    assert seen[:, 0].min() >= -1.0 and seen[:, 0].max() <= 1.0
    assert np.abs(seen[:, 1]).max() > 1.0  # unbounded: no clip, no squash


def test_box_of_shape_2x2_and_multibinary_and_tuple_actions_train():
    for space in (
        gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32),
        gym.spaces.MultiBinary(3),
        gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,))]),
    ):
        config = (
            PPOConfig()
            .environment(_Recorder, env_config={"action_space": space, "seen": []})
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
            .debugging(seed=0)
        )
        algo = config.build_algo()
        result = algo.train()
        assert result["learners"]["default_policy"]["num_non_finite_updates"] == 0
        algo.stop()


@pytest.mark.parametrize("obs_space", [gym.spaces.MultiBinary(4), gym.spaces.MultiBinary([2, 3])])
def test_a_top_level_multibinary_observation_is_fed_as_is(obs_space):
    config = (
        PPOConfig()
        .environment(
            _Recorder,
            env_config={
                "action_space": gym.spaces.Discrete(2),
                "seen": [],
                "observation_space": obs_space,
            },
        )
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=config)
    module_obs_space = runner.get_spaces()["default_policy"][0]
    assert module_obs_space.shape == (int(np.prod(obs_space.shape)),)
    batch = runner.sample(num_timesteps=8)["default_policy"]
    assert batch["obs"].dtype == np.float32
    assert set(np.unique(batch["obs"]).tolist()) <= {0.0, 1.0}
    runner.stop()
