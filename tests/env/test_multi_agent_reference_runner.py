"""The oracle test: MultiAgentEnvRunner samples what ReferenceMultiAgentEnvRunner samples.

Both runners get one config and seed and sample the same calls; their per-module batches
must agree column by column, row by row (both order rows by slot, then time), along with
the episode metrics. Greedy actions compare on every layout (stacked forward passes
included); sampled actions where no modules are stacked (then both draw one torch stream
in the same order).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmod import register_env
from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.columns import Columns
from rlmod.env import MultiAgentEnv, MultiAgentEnvRunner
from rlmod.env.multi_agent_env import ALL_AGENTS
from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
from rlmod.testing import MultiAgentCartPole

EXACT = (Columns.ACTIONS, Columns.TERMINATEDS, Columns.TRUNCATEDS, Columns.EPS_ID)
EXACT += (Columns.SEQ_ENDS,)


class ComeAndGoEnv(MultiAgentEnv):
    """Six agents that come and go. Agents 0-2 start; 3-5 join at random steps (rewarded
    in the step they join, before they ever act). Each step a random half of the live
    agents observes; an agent leaves with probability 0.06 (terminated or truncated, with
    a final observation half of the time); rewards depend on the action; "__all__"
    terminates when nobody is live or at random (game over) and truncates at t=30."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.possible_agents = list(range(6))
        box = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.observation_spaces = dict.fromkeys(self.possible_agents, box)
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.rng = np.random.default_rng(0)

    def _obs(self, agents: set) -> dict:
        return {a: np.array([a, self.t, self.rng.normal()], np.float32) for a in sorted(agents)}

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t, self.live, self.joined = 0, {0, 1, 2}, {0, 1, 2}
        self.acting = {0, 1, 2}
        return self._obs(self.acting), {}

    def step(self, action_dict):
        assert set(action_dict) == self.acting, (sorted(action_dict), sorted(self.acting))
        self.t += 1
        for a in range(3, 6):
            if a not in self.joined and self.rng.random() < 0.15:
                self.joined.add(a)
                self.live.add(a)
        rewards = {a: float(action_dict.get(a, 0)) - 0.25 * a for a in sorted(self.live)}
        done = {a for a in sorted(self.live) if self.rng.random() < 0.06}
        final = {a for a in sorted(done) if self.rng.random() < 0.5}
        self.live -= done
        observers = {a for a in sorted(self.live) if self.rng.random() < 0.5} | final
        if self.live and not observers & self.live:  # see test_an_env_with_nobody_acting...
            observers.add(min(self.live))
        truncated_ones = {a for a in sorted(done) if self.rng.random() < 0.5}
        terminateds = {a: True for a in sorted(done - truncated_ones)}
        game_over = self.t >= 8 and self.rng.random() < 0.04  # ends agents without flags
        terminateds[ALL_AGENTS] = not self.live or game_over
        truncateds = {a: True for a in sorted(truncated_ones)}
        truncateds[ALL_AGENTS] = self.t >= 30
        over = terminateds[ALL_AGENTS] or truncateds[ALL_AGENTS]
        self.acting = set() if over else observers - done
        return self._obs(observers), rewards, terminateds, truncateds, {}


class LoneFinalObsEnv(MultiAgentEnv):
    """ "a" and "b" act at t=0; at t=1 only "a" observes, its final obs (terminated), so
    nobody acts at t=2, which returns no observations; "b" observes again at t=3, and
    "__all__" truncates at t=4."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.possible_agents = [0, 1]
        box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_spaces = dict.fromkeys(self.possible_agents, box)
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {a: np.array([a, 0], np.float32) for a in (0, 1)}, {}

    def step(self, action_dict):
        self.t += 1
        obs = {1: {0: np.array([0, 1], np.float32)}, 3: {1: np.array([1, 3], np.float32)}}
        terminateds = {0: True} if self.t == 1 else {}
        terminateds[ALL_AGENTS] = False
        truncateds = {ALL_AGENTS: self.t == 4}
        return obs.get(self.t, {}), {1: 1.0}, terminateds, truncateds, {}


register_env("come_and_go", ComeAndGoEnv)
register_env("lone_final_obs", LoneFinalObsEnv)

ENVS = {
    "cartpole": (MultiAgentCartPole, {"num_agents": 5}),
    "come_and_go": ("come_and_go", {}),
    "lone_final_obs": ("lone_final_obs", {}),
}


def make_config(env: str, *, num_envs: int, num_modules: int) -> PPOConfig:
    env_cls, env_config = ENVS[env]
    return (
        PPOConfig()
        .environment(env_cls, env_config=env_config)
        .env_runners(num_envs_per_env_runner=num_envs)
        .multi_agent(
            policies={f"p{i}" for i in range(num_modules)},
            policy_mapping_fn=lambda aid, episode: f"p{aid % num_modules}",
        )
        .debugging(seed=3)
    )


def both_runners(config: PPOConfig) -> tuple[MultiAgentEnvRunner, ReferenceMultiAgentEnvRunner]:
    runner = MultiAgentEnvRunner(config=config)
    reference = ReferenceMultiAgentEnvRunner(config=config)
    reference.set_state({"rl_module": runner.get_state()["rl_module"]})  # same weights
    return runner, reference


def assert_same_batches(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for mid, cols in expected.items():
        assert sorted(got[mid]) == sorted(cols), mid
        for key, value in cols.items():
            msg = f"module {mid}, column {key}"
            assert got[mid][key].shape == value.shape, msg
            if key in EXACT:
                np.testing.assert_array_equal(got[mid][key], value, err_msg=msg)
            else:
                np.testing.assert_allclose(got[mid][key], value, rtol=1e-5, atol=1e-6, err_msg=msg)


def assert_same_metrics(got: dict, expected: dict) -> None:
    for key in ("num_env_steps", "num_agent_steps", "episode_lens"):
        assert got[key] == expected[key], key
    np.testing.assert_allclose(got["episode_returns"], expected["episode_returns"], rtol=1e-6)
    for key in ("module_episode_returns", "agent_episode_returns"):
        assert sorted(got[key]) == sorted(expected[key]), key
        for k, v in expected[key].items():
            np.testing.assert_allclose(got[key][k], v, rtol=1e-6, err_msg=f"{key}[{k}]")


@pytest.mark.parametrize("env", ["cartpole", "come_and_go"])
@pytest.mark.parametrize(("num_envs", "num_modules"), [(1, 2), (3, 4), (3, 3)])
def test_greedy_batches_match_the_reference(env: str, num_envs: int, num_modules: int) -> None:
    runner, reference = both_runners(make_config(env, num_envs=num_envs, num_modules=num_modules))
    total_rows = 0
    for n in (7, 40, 1, 95):  # calls cut episodes anywhere: open rows carry over
        got = runner.sample(num_timesteps=n * num_envs, explore=False)
        expected = reference.sample(num_timesteps=n * num_envs, explore=False)
        assert_same_batches(got, expected)
        total_rows += sum(len(c[Columns.OBS]) for c in expected.values())
    assert total_rows > 100
    metrics = reference.get_metrics()
    assert len(metrics["episode_lens"]) >= 2  # episodes ended and envs reset
    assert_same_metrics(runner.get_metrics(), metrics)


@pytest.mark.parametrize("env", ["cartpole", "come_and_go"])
def test_sampled_actions_match_the_reference_without_stacking(env: str) -> None:
    runner, reference = both_runners(make_config(env, num_envs=3, num_modules=2))
    for n in (20, 33):
        assert_same_batches(runner.sample(num_timesteps=n), reference.sample(num_timesteps=n))
    assert_same_metrics(runner.get_metrics(), reference.get_metrics())


def test_whole_episodes_match_the_reference() -> None:
    runner, reference = both_runners(make_config("come_and_go", num_envs=3, num_modules=3))
    runner.sample(num_timesteps=10, explore=False)  # then a call that restarts every env
    reference.sample(num_timesteps=10, explore=False)
    for kwargs in ({"num_episodes": 4}, {"num_timesteps": 12}):
        got = runner.sample(explore=False, **kwargs)
        assert_same_batches(got, reference.sample(explore=False, **kwargs))
    assert_same_metrics(runner.get_metrics(), reference.get_metrics())


def test_the_come_and_go_env_exercises_every_case() -> None:
    """Late joiners rewarded before acting, agents done with and without a final obs, by
    their own flags and by "__all__" (else the oracle tests above would prove less)."""
    reference = ReferenceMultiAgentEnvRunner(
        config=make_config("come_and_go", num_envs=1, num_modules=2)
    )
    batch = reference.sample(num_timesteps=200, explore=False)
    cols = {k: np.concatenate([c[k] for c in batch.values()]) for k in batch["p0"]}
    done_without_obs = (cols[Columns.NEXT_OBS] == cols[Columns.OBS]).all(axis=1)
    term, trunc = cols[Columns.TERMINATEDS], cols[Columns.TRUNCATEDS]
    assert (term & done_without_obs).any() and (term & ~done_without_obs).any()
    assert (trunc & done_without_obs).any() and (trunc & ~done_without_obs).any()
    late = cols[Columns.OBS][:, 0] >= 3
    assert late.any()


def test_an_env_with_nobody_acting_for_a_step_matches_the_reference() -> None:
    """Was an IndexError in GroupedRows.process: _begin_step kept an earlier step's acting
    slots for an env whose observers were all done while its episode went on."""
    runner, reference = both_runners(make_config("lone_final_obs", num_envs=1, num_modules=2))
    expected = reference.sample(num_timesteps=4, explore=False)
    rows = sorted(
        (float(c[Columns.OBS][i, 0]), float(c[Columns.REWARDS][i]), bool(c[Columns.TRUNCATEDS][i]))
        for c in expected.values()
        for i in range(len(c[Columns.OBS]))
    )
    assert rows == [(0.0, 0.0, False), (1.0, 1.0, True), (1.0, 3.0, False)]  # by hand
    assert_same_batches(runner.sample(num_timesteps=4, explore=False), expected)


def test_the_plain_paths_switch_selects_the_reference_runner_at_any_size():
    """The vectorized runner is a fast path: `.debugging(plain_paths=True)` runs the plain
    one even where the default rule (PLAIN_RUNNER_MAX_AGENT_SLOTS) picks the vectorized."""
    from rlmod.algorithms.ppo import PPOConfig
    from rlmod.env import MultiAgentEnvRunner
    from rlmod.env.env_runner_group import default_multi_agent_runner_cls
    from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
    from rlmod.fast_paths import plain_paths
    from rlmod.testing import MultiAgentCartPole

    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 20})
        .multi_agent(policies={"p"}, policy_mapping_fn=lambda aid, ep, **kw: "p")
    )
    if not plain_paths():  # (RLMOD_PLAIN_PATHS=1 turns the whole process plain)
        assert default_multi_agent_runner_cls(config) is MultiAgentEnvRunner
    plain = config.copy(copy_frozen=False).debugging(plain_paths=True)
    assert default_multi_agent_runner_cls(plain) is ReferenceMultiAgentEnvRunner
