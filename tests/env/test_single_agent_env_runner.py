"""Tests of SingleAgentEnvRunner and EnvRunnerGroup (rlmod/env/single_agent_env_runner.py,
env_runner_group.py).

Pins DESIGN.md rule 1 (EnvRunners hold inference-only modules; weight sync sends only
their part) and rule 3 (`get_spaces()`), and the batch layout `sample()` returns.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod import register_env
from rlmod.algorithms.ppo import PPOConfig
from rlmod.connectors import ModuleToEnv
from rlmod.core import Columns
from rlmod.env import SingleAgentEnvRunner
from rlmod.env.env_runner import WEIGHTS_SEQ_NO
from rlmod.env.env_runner_group import EnvRunnerGroup
from rlmod.errors import EnvError
from rlmod.utils.seeding import seed_everything

COLUMNS = (
    Columns.OBS,
    Columns.NEXT_OBS,
    Columns.ACTIONS,
    Columns.REWARDS,
    Columns.TERMINATEDS,
    Columns.TRUNCATEDS,
    Columns.SEQ_ENDS,
    Columns.EPS_ID,
    Columns.ACTION_LOGP,
    Columns.ACTION_DIST_INPUTS,
)


@pytest.fixture
def frozen_lake_config() -> PPOConfig:
    return (
        PPOConfig()
        .environment("FrozenLake-v1")
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )


def runner_for(config: PPOConfig) -> SingleAgentEnvRunner:
    seed_everything(config.seed)  # what Algorithm.setup does before building runners
    return SingleAgentEnvRunner(config=config)


# ---------------------------------------------------------------------- rule 1
def test_env_runner_module_is_inference_only_without_value_function(cartpole_config):
    runner = runner_for(cartpole_config)
    assert runner.module.inference_only
    assert not [n for n, _ in runner.module.named_parameters() if "vf" in n]
    runner.stop()


def test_after_train_env_runner_weights_equal_learner_inference_only_weights(cartpole_config):
    algo = cartpole_config.build_algo()
    before = {k: v.clone() for k, v in algo.env_runner.module.get_state().items()}
    algo.train()
    learner_weights = algo.learner_group.get_weights(inference_only=True)["default_policy"]
    runner_state = algo.env_runner.module.get_state()
    assert runner_state.keys() == learner_weights.keys()
    for name, tensor in runner_state.items():
        np.testing.assert_array_equal(tensor.numpy(), learner_weights[name], err_msg=name)
    assert any(not np.array_equal(before[k].numpy(), learner_weights[k]) for k in before)
    full = algo.learner_group.get_weights(inference_only=False)["default_policy"]
    assert any("vf" in k for k in full) and not any("vf" in k for k in learner_weights)
    algo.stop()


def test_sync_weights_sends_only_inference_only_keys(cartpole_config):
    algo = cartpole_config.build_algo()
    sent = []
    runner = algo.env_runner
    set_state = runner.set_state

    def spy(state):
        sent.append(state)
        set_state(state)

    runner.set_state = spy
    algo.env_runner_group.sync_weights(from_learner_group=algo.learner_group)
    assert len(sent) == 1 and set(sent[0]) == {"rl_module", WEIGHTS_SEQ_NO}
    weights = sent[0]["rl_module"]
    assert set(weights) == {"default_policy"}
    assert set(weights["default_policy"]) == set(runner.module.get_state())
    assert not any(k.startswith(("vf.", "vf_encoder.")) for k in weights["default_policy"])
    algo.stop()


# ---------------------------------------------------------------------- rule 3
def test_get_spaces_on_frozen_lake_raw_and_one_hot(frozen_lake_config):
    algo = frozen_lake_config.build_algo()
    spaces = algo.env_runner.get_spaces()
    assert set(spaces) == {"__env__", "__env_single__", "default_policy"}
    assert spaces["__env_single__"] == (gym.spaces.Discrete(16), gym.spaces.Discrete(4))
    n = frozen_lake_config.num_envs_per_env_runner  # "__env__": the vector env's (RLlib's)
    assert spaces["__env__"] == (
        gym.spaces.MultiDiscrete([16] * n),
        gym.spaces.MultiDiscrete([4] * n),
    )
    one_hot = gym.spaces.Box(0.0, 1.0, (16,), np.float32)
    assert spaces["default_policy"] == (one_hot, gym.spaces.Discrete(4))
    assert algo.env_runner_group.get_spaces() == spaces
    learner_module = algo.learner_group.learner.module["default_policy"]
    assert learner_module.observation_space == one_hot
    assert algo.env_runner.module.observation_space == one_hot
    batch = algo.env_runner.sample(num_timesteps=20)["default_policy"]
    assert all(one_hot.contains(o) for o in batch[Columns.OBS])
    assert (batch[Columns.OBS].sum(-1) == 1).all()
    algo.stop()


def test_env_runner_group_get_spaces_equals_the_local_runners(cartpole_config):
    group = EnvRunnerGroup(config=cartpole_config)
    assert group.get_spaces() == group.local_env_runner.get_spaces()
    assert group.local_env_runner.module_ids == ["default_policy"]
    group.stop()


# ---------------------------------------------------------------------- sample()
def assert_consistent(batch: dict[str, np.ndarray]) -> int:
    assert set(COLUMNS) <= set(batch), set(COLUMNS) - set(batch)
    lengths = {k: len(v) for k, v in batch.items()}
    assert len(set(lengths.values())) == 1, lengths
    return lengths[Columns.OBS]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "FrozenLake-v1"])
def test_sample_num_timesteps_returns_consistent_columns(cartpole_config, env_id):
    runner = runner_for(cartpole_config.environment(env_id))
    batch = runner.sample(num_timesteps=100)["default_policy"]
    assert assert_consistent(batch) >= 100
    assert batch[Columns.ACTION_DIST_INPUTS].shape[1] == runner.module.action_space.n
    runner.stop()


def test_new_obs_is_next_obs_within_an_episode_and_seq_ends_at_dones(cartpole_config):
    runner = runner_for(cartpole_config)
    runner.sample(num_timesteps=64)  # start mid-episode for the second call
    b = runner.sample(num_timesteps=400)["default_policy"]
    eps, seq_ends = b[Columns.EPS_ID], b[Columns.SEQ_ENDS]
    done = b[Columns.TERMINATEDS] | b[Columns.TRUNCATEDS]
    assert done.any(), "400 CartPole steps of a random policy end some episodes"
    assert seq_ends[done].all()
    inside = ~seq_ends[:-1]
    assert (eps[1:][inside] == eps[:-1][inside]).all()
    np.testing.assert_array_equal(b[Columns.NEXT_OBS][:-1][inside], b[Columns.OBS][1:][inside])
    # A sequence that does not end in done is cut by the fragment end: once per sub-env.
    assert (seq_ends & ~done).sum() <= runner.num_envs
    assert seq_ends[-1]
    runner.stop()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_action_logp_is_the_log_prob_of_the_recorded_action(cartpole_config, env_id):
    # Log-probs are computed for the whole batch once sampling ends, not per step.
    runner = runner_for(cartpole_config.environment(env_id))
    batch = runner.sample(num_timesteps=200)["default_policy"]
    dist = runner.module.action_dist(torch.from_numpy(batch[Columns.ACTION_DIST_INPUTS]))
    expected = dist.logp(torch.from_numpy(batch[Columns.ACTIONS])).numpy()
    np.testing.assert_allclose(batch[Columns.ACTION_LOGP], expected, rtol=1e-6)
    assert batch[Columns.ACTION_LOGP].dtype == np.float32
    runner.stop()


def test_a_connector_that_records_action_logp_is_kept(cartpole_config):
    class RecordLogp(ModuleToEnv):  # a custom sampler: its own actions and log-probs
        def __call__(self, data, *, rl_module, explore, **kwargs):
            logits = data[Columns.ACTION_DIST_INPUTS]
            data[Columns.ACTIONS] = logits.argmax(-1)
            data[Columns.ACTION_LOGP] = torch.full(logits.shape[:1], -7.0)
            return data

    runner = runner_for(
        cartpole_config.env_runners(module_to_env_connector=lambda *a: RecordLogp())
    )
    batch = runner.sample(num_timesteps=64)["default_policy"]
    assert (batch[Columns.ACTION_LOGP] == -7.0).all()
    runner.stop()


def test_later_sample_calls_leave_earlier_batches_untouched(cartpole_config):
    # The EnvRunner reuses its step buffer across calls; what it returned must be a copy.
    runner = runner_for(cartpole_config)
    first = runner.sample(num_timesteps=128)["default_policy"]
    kept = {k: v.copy() for k, v in first.items()}
    runner.sample(num_timesteps=128)
    runner.sample(num_timesteps=512)  # grows the buffer
    for k, v in kept.items():
        np.testing.assert_array_equal(first[k], v, err_msg=k)
    runner.stop()


def test_sample_continues_episodes_across_calls(cartpole_config):
    runner = runner_for(cartpole_config)
    first = runner.sample(num_timesteps=40)["default_policy"]
    second = runner.sample(num_timesteps=40)["default_policy"]
    cut = first[Columns.SEQ_ENDS] & ~(first[Columns.TERMINATEDS] | first[Columns.TRUNCATEDS])
    open_eps = set(first[Columns.EPS_ID][cut])
    assert open_eps and open_eps <= set(second[Columns.EPS_ID])
    runner.stop()


@pytest.mark.parametrize("k", [1, 5])
def test_sample_num_episodes_returns_only_complete_episodes(cartpole_config, k):
    runner = runner_for(cartpole_config)
    runner.sample(num_timesteps=30)  # leave episodes half done: they must not show up
    b = runner.sample(num_episodes=k)["default_policy"]
    assert_consistent(b)
    episodes = np.unique(b[Columns.EPS_ID])
    assert len(episodes) >= k
    done = b[Columns.TERMINATEDS] | b[Columns.TRUNCATEDS]
    for eps_id in episodes:
        rows = np.flatnonzero(b[Columns.EPS_ID] == eps_id)
        assert (np.diff(rows) == 1).all(), "an episode's rows are contiguous"
        assert done[rows[-1]] and not done[rows[:-1]].any()
        assert b[Columns.SEQ_ENDS][rows[-1]]
        assert np.abs(b[Columns.OBS][rows[0]]).max() <= 0.05, "starts at a reset obs"
    runner.stop()


def test_sample_takes_timesteps_or_episodes_not_both(cartpole_config):
    runner = runner_for(cartpole_config)
    with pytest.raises(ValueError, match="takes num_timesteps or num_episodes, not both"):
        runner.sample(num_timesteps=10, num_episodes=1)
    runner.stop()


def test_default_sample_is_one_rollout_fragment_per_sub_env(cartpole_config):
    runner = runner_for(cartpole_config)
    batch = runner.sample()["default_policy"]
    target = cartpole_config.get_rollout_fragment_length() * runner.num_envs
    assert target == 256
    # The vector env steps all sub-envs at once, so the last step may overshoot a little.
    assert target <= len(batch[Columns.OBS]) < target + runner.num_envs
    runner.stop()


def test_two_runners_with_one_seed_sample_identical_batches(cartpole_config):
    batches = []
    for _ in range(2):
        runner = runner_for(cartpole_config)
        batches.append([runner.sample(num_timesteps=100)["default_policy"] for _ in range(2)])
        runner.stop()
    for a, b in zip(*batches, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    other = runner_for(cartpole_config.copy().debugging(seed=1))
    c = other.sample(num_timesteps=100)["default_policy"]
    assert not np.array_equal(c[Columns.OBS], batches[0][0][Columns.OBS])
    other.stop()


# ---------------------------------------------------------------------- failing envs
class _ExplodingEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        raise RuntimeError("boom")


register_env("rlmod-test-exploding-env", lambda env_config: _ExplodingEnv())


def test_env_that_raises_in_step_is_an_env_error_naming_the_env(cartpole_config):
    runner = runner_for(cartpole_config.environment("rlmod-test-exploding-env"))
    with pytest.raises(
        EnvError,
        match=r"env='rlmod-test-exploding-env' raised in step\(\) of "
        r"sub-env 0 at step 1 of this EnvRunner: "
        r"RuntimeError\('boom'\)",
    ):
        runner.sample(num_timesteps=10)
    runner.stop()


def test_one_cartpole_sub_env_steps_as_the_native_vector_env_would():
    """One sub-env of an ID with a native vectorized implementation is the plain env in a
    SyncVectorEnv (faster for one row); with one seed it steps exactly as the native one."""
    from rlmod.env.registry import make_vector_env

    one, two = make_vector_env("CartPole-v1", {}, 1), make_vector_env("CartPole-v1", {}, 2)
    assert isinstance(one, gym.vector.SyncVectorEnv)
    assert not isinstance(two, gym.vector.SyncVectorEnv)  # CartPole's vector_entry_point
    native = gym.make_vec("CartPole-v1", 1, vectorization_mode="vector_entry_point")
    obs, _ = one.reset(seed=3)
    np.testing.assert_array_equal(obs, native.reset(seed=3)[0])
    actions = np.random.default_rng(0).integers(0, 2, (600, 1))
    dones = 0
    for a in actions:  # several episodes: resets included
        got, want = one.step(a), native.step(a)
        for x, y in zip(got[:4], want[:4], strict=True):
            np.testing.assert_array_equal(x, y)
        dones += int(got[2][0] or got[3][0])
    assert dones >= 3
