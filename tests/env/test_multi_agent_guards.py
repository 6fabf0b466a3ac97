"""MultiAgentEnvRunner guards: non-finite and ill-shaped observations named by agent, env
failures survived (the Algorithm stays usable) or restarted in place."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmod.algorithms.ppo import PPOConfig
from rlmod.env import MultiAgentEnv, MultiAgentEnvRunner
from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
from rlmod.errors import EnvError

BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


@pytest.fixture(
    params=[MultiAgentEnvRunner, ReferenceMultiAgentEnvRunner], ids=["vectorized", "reference"]
)
def runner_cls(request: pytest.FixtureRequest) -> type:
    """Both multi-agent EnvRunners: they must pass the same tests."""
    return request.param


class _Pair(MultiAgentEnv):
    """Agents "x" and "y", episodes of 5 steps, reward 1 per agent and step. At step
    `bad_at` (while `armed[0]`), agent "y" gets what `kind` says, or step() raises."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.config = config or {}
        self.possible_agents = ["x", "y"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, BOX)
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.t = 0
        return {a: np.zeros(2, np.float32) for a in self.possible_agents}, {}

    def step(self, action_dict: dict[Any, Any]):
        self.t += 1
        obs: dict[str, Any] = {a: np.full(2, 0.1, np.float32) for a in self.possible_agents}
        rew = dict.fromkeys(self.possible_agents, 1.0)
        armed = self.config.get("armed", [True])
        if armed[0] and self.t == self.config.get("bad_at", 3):
            armed[0] = self.config.get("repeat", False)
            kind = self.config["kind"]
            if kind == "raise":
                raise RuntimeError("motor stalled")
            obs["y"] = {
                "nan": np.array([0.0, np.nan], np.float32),
                "list": [0.1, 0.1],
                "float64": np.full(2, 0.1),
                "shape": np.zeros(3, np.float32),
            }.get(kind, obs["y"])
            if kind == "inf_reward":
                rew["y"] = -np.inf
            if kind == "stranger":
                obs["z"] = np.zeros(2, np.float32)
        over = self.t >= 5
        return obs, rew, {"__all__": False}, {"__all__": over}, {}


def _config(env_config: dict, num_envs: int = 2) -> PPOConfig:
    return (
        PPOConfig()
        .environment(_Pair, env_config=env_config)
        .env_runners(num_envs_per_env_runner=num_envs)
        .multi_agent(policies={"px", "py"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
        .training(train_batch_size=40, minibatch_size=20, num_epochs=1)
        .debugging(seed=0)
    )


@pytest.mark.parametrize(
    ("kind", "phrase"),
    [
        ("nan", r"non-finite \(NaN or inf\) obs for agent 'y' in env 0 at step 3 of its episode"),
        ("inf_reward", r"non-finite \(NaN or inf\) rewards for agent 'y' in env 0 at step 3"),
        (
            "list",
            r"observation of agent 'y' in env 0 at step 3 of its episode is a list, not a "
            r"numpy array of shape \(2,\) and dtype float32",
        ),
        (
            "float64",
            r"observation of agent 'y' .* has shape \(2,\) and dtype float64, but the "
            r"space declares shape \(2,\) and dtype float32",
        ),
        ("shape", r"observation of agent 'y' .* has shape \(3,\)"),
    ],
)
def test_bad_agent_observations_and_rewards_are_named(kind, phrase, runner_cls):
    runner = runner_cls(config=_config({"kind": kind}))
    with pytest.raises(EnvError, match=phrase):
        runner.sample(num_timesteps=20)
    runner.stop()


def test_an_agent_outside_possible_agents_is_named(runner_cls):
    runner = runner_cls(config=_config({"kind": "stranger"}))
    with pytest.raises(EnvError, match=r"agent 'z', which is not in its possible_agents"):
        runner.sample(num_timesteps=20)
    runner.stop()


def test_the_observation_check_can_be_turned_off(runner_cls):
    config = _config({"kind": "float64"}).env_runners(check_agent_observations=False)
    runner = runner_cls(config=config)
    with pytest.raises(Exception) as info:  # noqa: PT011 - whatever torch or numpy says
        runner.sample(num_timesteps=20)
    assert not isinstance(info.value, EnvError)
    runner.stop()


@pytest.mark.parametrize("where", ["step", "policy_mapping_fn"])
def test_after_an_env_or_mapping_error_the_algorithm_stays_usable(where, runner_cls):
    armed = [True]
    config = _config({"kind": "raise", "armed": armed if where == "step" else [False]})
    config.env_runners(env_runner_cls=runner_cls)
    if where == "policy_mapping_fn":
        calls = [0]

        def mapping(aid, episode, **kw):
            calls[0] += 1
            if calls[0] == 7:  # an agent of a later episode
                raise KeyError("no such team")
            return f"p{aid}"

        config.multi_agent(policy_mapping_fn=mapping)
    algo = config.build_algo()
    if where == "step":
        with pytest.raises(
            EnvError,
            match=r"\(env 0 of this EnvRunner\) raised in step\(\) at "
            r"step 3 of its episode .*RuntimeError\('motor stalled'\)",
        ):
            algo.train()
    else:
        with pytest.raises(KeyError, match="no such team"):
            algo.train()
    result = algo.train()  # was: IndexError in every later train()
    runners = result["env_runners"]
    assert runners["num_env_steps_sampled"] == result["num_env_steps_sampled_lifetime"] == 40
    assert runners["episode_return_min"] == runners["episode_return_max"] == 10.0
    algo.stop()


def test_restart_failed_sub_environments_recreates_the_env_and_drops_its_episode():
    config = _config({"kind": "raise", "armed": [True]}).fault_tolerance(
        restart_failed_sub_environments=True
    )
    runner = MultiAgentEnvRunner(config=config)
    batch = runner.sample(num_timesteps=30)
    metrics = runner.get_metrics()
    assert metrics["num_sub_env_restarts"] == 1
    assert set(metrics["episode_returns"]) == {10.0}  # only whole episodes
    assert set(metrics["episode_lens"]) == {5}
    # Counters count exactly the rows in the batch: 15 steps of 2 envs, less the 3 steps
    # of the dropped episode (the failed one included); 2 agents each.
    rows = sum(len(b["obs"]) for b in batch.values())
    assert metrics["num_env_steps"] == 27
    assert metrics["num_agent_steps"] == rows == 54
    for b in batch.values():  # every finished agent-episode in the batch is whole
        for eps in np.unique(b["eps_id"]):
            sel = b["eps_id"] == eps
            if (b["terminateds"][sel] | b["truncateds"][sel]).any():
                assert sel.sum() == 5
    # It goes on sampling: the next call works and finds no failure.
    runner.sample(num_timesteps=20)
    assert runner.get_metrics()["num_sub_env_restarts"] == 0
    runner.stop()


class _Actions(MultiAgentEnv):
    """Two agents with a Tuple and a Discrete(start=5) action space; asserts each action
    it gets is in its agent's space."""

    SPACES = {
        "t": gym.spaces.Tuple(
            [gym.spaces.Discrete(2, start=-1), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)]
        ),
        "d": gym.spaces.Discrete(3, start=5),
    }

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.possible_agents = ["t", "d"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, BOX)
        self.action_spaces = dict(self.SPACES)
        self.seen: list = (config or {}).get("seen", [])
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.t = 0
        return {a: np.zeros(2, np.float32) for a in self.possible_agents}, {}

    def step(self, action_dict: dict[Any, Any]):
        self.seen.extend(action_dict.items())
        self.t += 1
        obs = {a: np.zeros(2, np.float32) for a in self.possible_agents}
        return (
            obs,
            dict.fromkeys(self.possible_agents, 1.0),
            {"__all__": False},
            {"__all__": self.t >= 4},
            {},
        )


def test_multi_agent_actions_are_inside_each_agents_space(runner_cls):
    seen: list = []
    config = (
        PPOConfig()
        .environment(_Actions, env_config={"seen": seen})
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(policies={"pt", "pd"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
        .debugging(seed=0)
    )
    runner = runner_cls(config=config)
    runner.sample(num_timesteps=40)
    assert len(seen) == 80
    for agent, action in seen:
        assert _Actions.SPACES[agent].contains(action), (agent, action)
    assert {int(a) for agent, a in seen if agent == "d"} == {5, 6, 7}
    runner.stop()


def test_policy_mapping_fn_gets_a_documented_episode_at_set_up_too(runner_cls):
    seen = []

    def mapping(aid, episode, **kw):
        seen.append(episode.id_)  # was: AttributeError on episode=None at set-up
        return f"p{aid}" if episode.env_index >= 0 else "nope"

    runner = runner_cls(config=_config({"armed": [False]}).multi_agent(policy_mapping_fn=mapping))
    runner.sample(num_timesteps=10)
    assert -1 in seen and max(seen) >= 0
    runner.stop()


def test_truncate_mode_is_refused_for_multi_agent_with_a_message():
    config = _config({}).env_runners(on_non_finite_env_data="truncate_episode")
    with pytest.raises(ValueError, match="built for single-agent EnvRunners only"):
        config.build_algo()


def test_an_env_that_always_raises_stops_training_with_an_env_error():
    """Issue 30, item 11: with restart_failed_sub_environments=True the env was recreated
    at every step forever and train() returned results with nothing sampled."""
    config = _config(
        {"kind": "raise", "bad_at": 1, "armed": [True], "repeat": True}
    ).fault_tolerance(restart_failed_sub_environments=True)
    algo = config.build_algo()
    with pytest.raises(
        EnvError,
        match=r"env=<class '.*_Pair'> \(env 0 of this EnvRunner\) "
        r"raised 10 times in a row .*RuntimeError\('motor stalled'\)",
    ):
        algo.train()
    algo.stop()


def test_a_zero_d_integer_array_is_a_discrete_observation_as_in_gymnasium():
    """PettingZoo's bundled envs (e.g. rps_v2) return Discrete observations as 0-d arrays."""
    from rlmod.env.guards import bad_observation

    space = gym.spaces.Discrete(4)
    assert space.contains(np.array(2)) and bad_observation(space, np.array(2)) is None
    assert bad_observation(space, np.int64(2)) is None and bad_observation(space, 2) is None
    for bad in (np.array([2]), np.array(2.0), 2.0, "2"):
        assert "not an int for Discrete(4)" in bad_observation(space, bad), bad
