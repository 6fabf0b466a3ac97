"""Tests of the test envs: MultiAgentCartPole's semantics and physics, TwoTeamGuessingEnv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

from rlmod.testing import MultiAgentCartPole

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _balance(obs: np.ndarray) -> int:
    """A linear controller that keeps CartPole up for 500 steps."""
    return int(np.dot((0.1, 0.5, 3.0, 1.0), obs) > 0)


def _random_actions(env: MultiAgentCartPole, rng: np.random.Generator) -> dict[int, int]:
    return dict(zip(env.agents, rng.integers(0, 2, len(env.agents)).tolist(), strict=True))


# --- MultiAgentCartPole: spaces, reset, seeding -------------------------------------------------


def test_spaces_are_those_of_cartpole_v1() -> None:
    env = MultiAgentCartPole({"num_agents": 3})
    single = gym.make("CartPole-v1")
    assert env.possible_agents == [0, 1, 2]
    for aid in env.possible_agents:
        assert env.get_observation_space(aid) == single.observation_space
        assert env.get_action_space(aid) == single.action_space
    assert MultiAgentCartPole().max_num_agents == 2  # default num_agents


def test_reset_gives_every_agent_a_float32_obs_near_zero() -> None:
    env = MultiAgentCartPole({"num_agents": 4})
    obs, infos = env.reset(seed=1)
    assert list(obs) == env.agents == [0, 1, 2, 3]
    assert infos == {}
    for o in obs.values():
        assert o.shape == (4,) and o.dtype == np.float32
        assert np.all(np.abs(o) <= 0.05)
        assert env.get_observation_space(0).contains(o)


def test_reset_options_set_start_bounds_and_reject_unknown_keys() -> None:
    env = MultiAgentCartPole({"num_agents": 50})
    obs, _ = env.reset(seed=0, options={"low": 0.1, "high": 0.2})
    assert all(np.all((o >= 0.1) & (o <= 0.2)) for o in obs.values())
    with pytest.raises(ValueError, match="unknown options \\['lo'\\]"):
        env.reset(options={"lo": 0.1})


def test_same_seed_gives_same_episode_and_other_seed_differs() -> None:
    def rollout(seed: int) -> list[np.ndarray]:
        env = MultiAgentCartPole({"num_agents": 5})
        rng = np.random.default_rng(123)
        obs, _ = env.reset(seed=seed)
        frames = [np.stack(list(obs.values()))]
        for _ in range(10):
            obs, *_ = env.step(_random_actions(env, rng))
            frames.append(np.stack(list(obs.values())))
        return frames

    a, b, c = rollout(7), rollout(7), rollout(8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_reset_without_seed_continues_the_seeded_generator() -> None:
    env = MultiAgentCartPole()
    first, _ = env.reset(seed=0)
    second, _ = env.reset()
    assert not np.array_equal(first[0], second[0])
    again, _ = env.reset(seed=0)
    assert np.array_equal(first[0], again[0])


# --- MultiAgentCartPole: physics against gymnasium ----------------------------------------------


def test_physics_match_gymnasium_cartpole_vector_env() -> None:
    num_agents = 8
    env = MultiAgentCartPole({"num_agents": num_agents})
    ref = CartPoleVectorEnv(num_envs=num_agents)
    obs, _ = env.reset(seed=3)
    ref_obs, _ = ref.reset(seed=3)  # the same generator: PCG64 seeded with 3
    np.testing.assert_array_equal(np.stack(list(obs.values())), ref_obs)

    rng = np.random.default_rng(0)
    for _ in range(200):
        actions = rng.integers(0, 2, num_agents)
        obs, rewards, terminateds, _, _ = env.step(dict(enumerate(actions.tolist())))
        ref_obs, ref_rewards, ref_terminated, _, _ = ref.step(actions)
        np.testing.assert_array_equal(np.stack(list(obs.values())), ref_obs)
        assert list(rewards.values()) == ref_rewards.tolist()
        assert [terminateds[i] for i in range(num_agents)] == ref_terminated.tolist()
        if ref_terminated.any():  # the vector env autoresets; ours lets the agent leave
            break
    else:
        pytest.fail("no agent fell in 200 random steps")


@pytest.mark.parametrize("policy", ["random", "balance"])
def test_physics_match_single_cartpole_v1_until_done(policy: str) -> None:
    env = MultiAgentCartPole({"num_agents": 3})
    obs, _ = env.reset(seed=5)
    refs = []
    for aid in env.possible_agents:
        ref = gym.make("CartPole-v1")
        ref.reset(seed=0)
        ref.unwrapped.state = env._state[:, aid].copy()  # start from the same state
        refs.append(ref)
    rng = np.random.default_rng(1)
    alive = set(env.possible_agents)
    lengths = dict.fromkeys(alive, 0)
    while alive:
        actions = {
            aid: _balance(obs[aid]) if policy == "balance" else int(rng.integers(2))
            for aid in env.agents
        }
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        for aid, action in actions.items():
            ref_obs, ref_reward, ref_terminated, ref_truncated, _ = refs[aid].step(action)
            np.testing.assert_array_equal(obs[aid], ref_obs)
            assert rewards[aid] == ref_reward == 1.0
            assert terminateds[aid] == ref_terminated
            assert truncateds[aid] == ref_truncated
            lengths[aid] += 1
            if ref_terminated or ref_truncated:
                alive.remove(aid)
        assert set(env.agents) == alive
    if policy == "balance":
        assert set(lengths.values()) == {500}  # truncated by CartPole-v1's time limit


# --- MultiAgentCartPole: agents leaving, "__all__" ---------------------------------------------


def test_terminated_agents_leave_and_all_is_set_when_the_last_one_falls() -> None:
    env = MultiAgentCartPole({"num_agents": 6})
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    gone: set[int] = set()
    for _ in range(500):
        acting = set(env.agents)
        obs, rewards, terminateds, truncateds, _ = env.step(_random_actions(env, rng))
        assert set(obs) == set(rewards) == acting  # the last obs of a falling agent included
        assert set(terminateds) == set(truncateds) == acting | {"__all__"}
        assert not gone & set(obs)
        newly_gone = {aid for aid in acting if terminateds[aid]}
        assert set(env.agents) == acting - newly_gone
        gone |= newly_gone
        if not env.agents:
            break
        assert terminateds["__all__"] is False and truncateds["__all__"] is False
    assert gone == set(env.possible_agents)
    assert terminateds["__all__"] is True and truncateds["__all__"] is False
    with pytest.raises(RuntimeError, match="episode is over; call reset"):
        env.step({})


def test_time_limit_truncates_all_remaining_agents() -> None:
    env = MultiAgentCartPole({"num_agents": 3, "max_episode_steps": 4})
    obs, _ = env.reset(seed=0)
    for t in range(4):
        obs, _, terminateds, truncateds, _ = env.step({a: _balance(obs[a]) for a in env.agents})
        assert truncateds["__all__"] is (t == 3)
    assert terminateds == {0: False, 1: False, 2: False, "__all__": False}
    assert truncateds == {0: True, 1: True, 2: True, "__all__": True}
    assert env.agents == []


def test_actions_in_any_order_give_the_same_result() -> None:
    a, b = MultiAgentCartPole({"num_agents": 4}), MultiAgentCartPole({"num_agents": 4})
    a.reset(seed=2)
    b.reset(seed=2)
    actions = {0: 1, 1: 0, 2: 0, 3: 1}
    obs_a, *_ = a.step(actions)
    obs_b, *_ = b.step(dict(reversed(actions.items())))
    for aid in actions:
        np.testing.assert_array_equal(obs_a[aid], obs_b[aid])


def test_actions_for_missing_done_or_bad_agents_are_rejected() -> None:
    env = MultiAgentCartPole({"num_agents": 3})
    with pytest.raises(RuntimeError, match="before reset"):
        env.step({0: 0})
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"Missing agents: \[2\]"):
        env.step({0: 0, 1: 1})
    with pytest.raises(ValueError, match=r"not active \(done or unknown\): \[7\]"):
        env.step({0: 0, 1: 1, 2: 0, 7: 1})
    with pytest.raises(ValueError, match="the action of agent 1 is 2; actions must be 0"):
        env.step({0: 0, 1: 2, 2: 0})
    with pytest.raises(ValueError, match="must map int agent IDs"):
        env.step({"a": 0, 1: 1, 2: 0})


def test_numpy_actions_are_accepted() -> None:
    env = MultiAgentCartPole({"num_agents": 2})
    env.reset(seed=0)
    space = env.get_action_space(0)
    _, rewards, *_ = env.step({0: space.sample(), 1: np.array(1)})
    assert rewards == {0: 1.0, 1: 1.0}


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"num_agent": 3}, "unknown key 'num_agent'.*Did you mean 'num_agents'"),
        ({"num_agents": 0}, r"config\['num_agents'\] must be a positive int, got 0"),
        ({"max_episode_steps": 2.5}, r"config\['max_episode_steps'\] must be a positive int"),
    ],
)
def test_bad_config_names_the_key(config: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MultiAgentCartPole(config)


def test_thousand_agents_step() -> None:
    env = MultiAgentCartPole({"num_agents": 1000})
    obs, _ = env.reset(seed=0)
    obs, rewards, *_ = env.step(dict.fromkeys(env.agents, 0))
    assert len(obs) == len(rewards) == 1000


# --- TwoTeamGuessingEnv --------------------------------------------------------------------------


def test_two_team_guessing_env_passes_pettingzoo_api_test(capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("pettingzoo")
    from pettingzoo.test import parallel_api_test

    from rlmod.testing.pettingzoo_envs import TwoTeamGuessingEnv

    parallel_api_test(TwoTeamGuessingEnv(), num_cycles=100)
    assert "Passed Parallel API test" in capsys.readouterr().out


def test_two_team_guessing_env_rewards_right_guesses() -> None:
    pytest.importorskip("pettingzoo")
    from rlmod.testing import TwoTeamGuessingEnv

    env = TwoTeamGuessingEnv()
    assert env.possible_agents == ["red_0", "red_1", "blue_0", "blue_1"]
    assert env.observation_space("red_0").shape == (3,)
    assert env.observation_space("blue_1").shape == (5,)
    assert env.action_space("blue_1") == gym.spaces.Discrete(5)

    obs, _ = env.reset(seed=0)
    returns = dict.fromkeys(env.possible_agents, 0.0)
    for t in range(25):
        actions = {a: int(o.argmax()) for a, o in obs.items()}
        actions["red_1"] = (actions["red_1"] + 1) % 3  # red_1 always guesses wrong
        obs, rewards, terminations, truncations, _ = env.step(actions)
        for a, r in rewards.items():
            returns[a] += r
        assert not any(terminations.values())
        assert all(truncations.values()) is (t == 24)
    assert returns == {"red_0": 25.0, "red_1": 0.0, "blue_0": 37.5, "blue_1": 37.5}
    assert env.agents == []


def test_testing_imports_without_pettingzoo() -> None:
    code = (
        "import sys; sys.modules['pettingzoo'] = None\n"
        "from rlmod.testing import MultiAgentCartPole\n"
        "MultiAgentCartPole().reset(seed=0)\n"
        "try:\n"
        "    from rlmod.testing import TwoTeamGuessingEnv\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{_REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert "pip install 'rlmod[pettingzoo]'" in out.stdout
