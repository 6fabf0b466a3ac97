"""The EnvRunners' guard against Discrete / MultiDiscrete / MultiBinary observations outside
their space (rlmod/utils/space_checks.py, `out_of_space_rows`, called from rlmod/env): named
(env, sub-env or agent, step, value) in an EnvError, or, with
`on_non_finite_env_data="truncate_episode"`, the episode ended as for a NaN. Without it `-1`
one-hot encodes as the last state, `[3, 0]` sets a bit of the next component, `4` ends in
numpy's IndexError, and a MultiBinary 2 reaches the module as 2.0."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnv, MultiAgentEnvRunner, SingleAgentEnvRunner
from rlmod.errors import EnvError

DISCRETE = gym.spaces.Discrete(4)
MULTI = gym.spaces.MultiDiscrete([3, 3])


def _zero(space: gym.Space) -> Any:
    return 0 if isinstance(space, gym.spaces.Discrete) else np.zeros(space.shape, space.dtype)


class _Cells(gym.Env):
    """Observations of `config["space"]`, all zero except `config["bad"]` at step 3 of the
    first episode (or of every episode with `repeat`). Episodes of 5 steps, reward 1."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict) -> None:
        self.config = config
        self.observation_space = config["space"]
        self.t = 0
        self.armed = True

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return _zero(self.observation_space), {}

    def step(self, action):
        self.t += 1
        obs = _zero(self.observation_space)
        if self.armed and self.t == 3:
            obs = self.config["bad"]
            self.armed = self.config.get("repeat", False)
        return obs, 1.0, False, self.t >= 5, {}


def _config(space: gym.Space, bad: Any, *, num_envs: int = 1, **settings: Any) -> PPOConfig:
    config = (
        PPOConfig()
        .environment(_Cells, env_config={"space": space, "bad": bad})
        .env_runners(num_envs_per_env_runner=num_envs)
        .training(train_batch_size=40, minibatch_size=20, num_epochs=1)
        .debugging(seed=0)
    )
    for name, value in settings.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize(
    ("space", "bad", "value"),
    [
        (DISCRETE, -1, r"-1"),
        (DISCRETE, 4, r"4"),
        (MULTI, np.array([3, 0]), r"\[3, 0\]"),
        (MULTI, np.array([0, -1]), r"\[0, -1\]"),
        (gym.spaces.MultiBinary(2), np.array([0, 2], np.int8), r"\[0, 2\]: its entry 1 is 2"),
    ],
)
def test_single_agent_observation_outside_its_space_is_named(space, bad, value):
    runner = SingleAgentEnvRunner(config=_config(space, bad, num_envs=2))
    with pytest.raises(
        EnvError,
        match=(
            rf"env=<class '.*_Cells'> returned an observation outside its observation space "
            rf"in sub-env 0 at step 3 of this EnvRunner: obs is {value}.*"
            r"on_non_finite_env_data='truncate_episode'"
        ),
    ):
        runner.sample(num_timesteps=20)
    # The runner stays usable: the next call starts every sub-env afresh.
    batch = runner.sample(num_timesteps=20)["default_policy"]
    assert len(batch["obs"]) >= 20
    runner.stop()


def test_the_error_says_which_values_the_space_holds():
    runner = SingleAgentEnvRunner(config=_config(MULTI, np.array([3, 0])))
    with pytest.raises(EnvError, match=r"entry 0 is 3, outside 0\.\.2 of MultiDiscrete\(\[3 3\]\)"):
        runner.sample(num_timesteps=10)
    runner = SingleAgentEnvRunner(config=_config(gym.spaces.Discrete(4, start=1), 0))
    with pytest.raises(EnvError, match=r"obs is 0, outside 1\.\.4 of Discrete\(4, start=1\)"):
        runner.sample(num_timesteps=10)


@pytest.mark.parametrize(("space", "bad"), [(DISCRETE, -1), (MULTI, np.array([3, 0]))])
def test_truncate_mode_ends_the_episode_and_no_wrong_one_hot_reaches_the_batch(space, bad):
    runner = SingleAgentEnvRunner(
        config=_config(space, bad, num_envs=2, on_non_finite_env_data="truncate_episode")
    )
    batch = runner.sample(num_timesteps=30)["default_policy"]
    metrics = runner.get_metrics()
    assert metrics["num_episodes_truncated_non_finite"] == 2  # one per sub-env
    assert 3 in metrics["episode_lens"]
    # Every observation the module saw is the one-hot of the zero observation.
    np.testing.assert_array_equal(
        batch["obs"], np.broadcast_to(batch["obs"][0], batch["obs"].shape)
    )
    np.testing.assert_array_equal(batch["new_obs"], batch["obs"])
    runner.stop()


def test_an_observation_outside_its_space_at_reset_is_named():
    class _BadStart(_Cells):
        def reset(self, *, seed=None, options=None):
            return 7, {}

    config = (
        PPOConfig()
        .environment(_BadStart, env_config={"space": DISCRETE, "bad": 0})
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=config)
    with pytest.raises(
        EnvError,
        match=r"outside its observation space in sub-env 0 at "
        r"reset \(step 0 of this EnvRunner\): obs is 7",
    ):
        runner.sample(num_timesteps=10)


def test_out_of_space_rows_checks_nested_spaces_and_passes_good_batches():
    from rlmod.utils.space_checks import out_of_space_rows  # here: the tests above run on old rlmod

    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1, 1, (2,)),
            "cell": DISCRETE,
            "pair": gym.spaces.Tuple((gym.spaces.Discrete(2), MULTI)),
        }
    )
    good = {
        "pos": np.zeros((3, 2), np.float32),
        "cell": np.array([0, 3, 1]),
        "pair": (np.array([0, 1, 1]), np.array([[0, 2], [2, 2], [1, 0]])),
    }
    assert out_of_space_rows(space, good, 3, "obs") is None
    bad = {**good, "pair": (np.array([0, 1, 1]), np.array([[0, 2], [2, 3], [1, 0]]))}
    found = out_of_space_rows(space, bad, 3, "obs")
    assert found is not None
    np.testing.assert_array_equal(found[0], [False, True, False])
    assert found[1] == "obs['pair'][1]"
    # Non-integral values (a multi-agent env's floats) are outside a Discrete space too.
    found = out_of_space_rows(DISCRETE, np.array([1.0, 1.5]), 2, "obs")
    assert found is not None and found[0].tolist() == [False, True]


@pytest.mark.parametrize(
    "space",
    [
        DISCRETE,
        gym.spaces.Discrete(3, start=-1),
        MULTI,
        gym.spaces.Dict({"c": DISCRETE, "m": MULTI}),
        gym.spaces.MultiBinary(3),
    ],
)
def test_the_fast_check_agrees_with_the_plain_one(space):
    from rlmod.utils.space_checks import SMALL_DISCRETE_BATCH, fits_space, out_of_space_rows

    rng = np.random.default_rng(0)
    fits = fits_space(space)
    assert fits is not None
    for num_rows in (0, 1, 5, SMALL_DISCRETE_BATCH, SMALL_DISCRETE_BATCH + 1, 200):
        for dtype in (np.int64, np.int32, np.uint8, np.float64):
            for _ in range(20):
                x = _random_batch(rng, space, num_rows, dtype)
                assert fits(x, num_rows) == (out_of_space_rows(space, x, num_rows, "o") is None)


def _random_batch(rng: np.random.Generator, space: gym.Space, num_rows: int, dtype: type) -> Any:
    """`num_rows` values of `space`'s shape as `dtype`, each entry one below its space's
    range to one above it (so some batches fit and some do not)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _random_batch(rng, sub, num_rows, dtype) for k, sub in space.spaces.items()}
    start, size = (
        (0, 2)
        if isinstance(space, gym.spaces.MultiBinary)
        else (space.start, getattr(space, "n", getattr(space, "nvec", 0)))
    )
    low = np.asarray(start) - (0 if dtype == np.uint8 else 1)
    high = np.asarray(start) + np.asarray(size)
    return rng.integers(low, high + 1, (num_rows, *space.shape)).astype(dtype)


# ---------------------------------------------------------------- multi-agent
class _Grid(MultiAgentEnv):
    """Agents "x" and "y" on `config["space"]` (Discrete(4) unless given); agent "y"
    observes `bad` at step 3 (or at reset, with `at_reset`)."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.config = config or {}
        self.space = self.config.get("space", DISCRETE)
        self.possible_agents = ["x", "y"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, self.space)
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.t = 0

    def _obs(self, bad: bool) -> dict[str, Any]:
        obs = {a: _zero(self.space) for a in self.possible_agents}
        if bad:
            obs["y"] = self.config["bad"]
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.t = 0
        return self._obs(self.config.get("at_reset", False)), {}

    def step(self, action_dict: dict[Any, Any]):
        self.t += 1
        obs = self._obs(self.t == 3 and not self.config.get("at_reset", False))
        rew = dict.fromkeys(self.possible_agents, 1.0)
        return obs, rew, {"__all__": False}, {"__all__": self.t >= 5}, {}


def _multi_agent_runner(**env_config: Any) -> MultiAgentEnvRunner:
    config = (
        PPOConfig()
        .environment(_Grid, env_config=env_config)
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(policies={"px", "py"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
        .debugging(seed=0)
    )
    return MultiAgentEnvRunner(config=config)


@pytest.mark.parametrize(
    ("space", "bad", "value"),
    [
        (DISCRETE, -1, "-1"),
        (DISCRETE, 4, "4"),
        (DISCRETE, 2.5, "2.5"),
        (MULTI, np.array([3, 0]), r"\[3, 0\]: its entry 0 is 3"),
        (MULTI, np.array([0, -1]), r"\[0, -1\]: its entry 1 is -1"),
        (
            gym.spaces.MultiBinary(2),
            np.array([0, 2], np.int8),
            r"\[0, 2\]: its entry 1 is 2, "
            r"outside 0\.\.1 of MultiBinary",
        ),
    ],
)
def test_multi_agent_observation_outside_its_space_is_named(space, bad, value):
    runner = _multi_agent_runner(space=space, bad=bad)
    with pytest.raises(
        EnvError,
        match=(
            rf"returned an observation outside its observation space for agent 'y' in env 0 "
            rf"at step 3 of its episode \(step \d+ of this EnvRunner\): obs is {value}"
        ),
    ):
        runner.sample(num_timesteps=40)
    runner.stop()


def test_multi_agent_observation_outside_its_space_at_reset_is_named():
    runner = _multi_agent_runner(bad=-1, at_reset=True)
    with pytest.raises(
        EnvError,
        match=r"outside its observation space for agent 'y' in env 0 "
        r"at step 0 of its episode.*obs is -1, outside 0\.\.3 of Discrete\(4\)",
    ):
        runner.sample(num_timesteps=40)
    runner.stop()


def test_multi_agent_good_observations_pass():
    runner = _multi_agent_runner(space=MULTI, bad=np.array([2, 2]))  # the space's corner
    batches = runner.sample(num_timesteps=40)
    assert {"px", "py"} <= set(batches)
    runner.stop()
