"""Tests of MultiAgentEnvRunner (rlmod/env/multi_agent_env_runner.py) and the multi-module rules.

Pins DESIGN.md rules 1-4 for several modules: EnvRunners never build learner-only modules
(Learners do), weight sync carries none of their weights, per-module config overrides
(same object / cached copy, the overridden lr in the optimizer), spaces per module,
mapping errors; plus the runner's rows against a plain-Python reference of the
multi-agent bookkeeping (rewards between acting steps add up, final observations,
"__all__", agents that join late or leave without a final observation).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod import register_env
from rlmod.algorithms.ppo import PPOConfig
from rlmod.callbacks import RLlibCallback
from rlmod.core import MultiRLModuleSpec, RLModule, RLModuleSpec
from rlmod.env import ENV_SPACES_KEY, EnvRunnerGroup, MultiAgentEnv, MultiAgentEnvRunner
from rlmod.env.multi_agent_env import ALL_AGENTS
from rlmod.env.multi_agent_reference_runner import ReferenceMultiAgentEnvRunner
from rlmod.errors import UnknownModuleIDError
from rlmod.testing import MultiAgentCartPole

BOX2 = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
TWO = gym.spaces.Discrete(2)


@pytest.fixture(
    params=[MultiAgentEnvRunner, ReferenceMultiAgentEnvRunner], ids=["vectorized", "reference"]
)
def runner_cls(request: pytest.FixtureRequest) -> type:
    """Both multi-agent EnvRunners: they must pass the same tests."""
    return request.param


# ---------------------------------------------------------------------- test envs
class TurnEnv(MultiAgentEnv):
    """Three agents with a fixed schedule that exercises every bookkeeping case.

    obs = [agent code, t]. "a" observes every step and terminates at t=6 (final obs);
    "b" observes at even t only but is rewarded every step; "c" joins at t=2 (rewarded in
    that step before it ever acted), observes at t=2, 3, 5 and is terminated at t=7
    without a final obs; nobody observes at t=7; the episode is truncated by "__all__"
    alone at t=9, while "b" waits for its obs.
    """

    CODE = {"a": 0, "b": 1, "c": 2}
    OBS_AT = {"a": set(range(7)), "b": {0, 2, 4, 6, 8}, "c": {2, 3, 5}}
    REWARD = {"a": 1.0, "b": 0.5, "c": 2.0}

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.possible_agents = ["a", "b", "c"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, BOX2)
        self.action_spaces = dict.fromkeys(self.possible_agents, TWO)

    def _obs(self) -> dict:
        return {
            a: np.array([self.CODE[a], self.t], np.float32)
            for a in self.possible_agents
            if self.t in self.OBS_AT[a]
        }

    def reset(self, *, seed=None, options=None):
        self.t = 0
        self.agents = ["a", "b"]
        self._expect = set(self._obs())
        return self._obs(), {}

    def step(self, action_dict):
        assert set(action_dict) == self._expect, (sorted(action_dict), sorted(self._expect))
        self.t += 1
        t = self.t
        active = [
            a
            for a, (start, end) in {"a": (0, 6), "b": (0, 9), "c": (2, 7)}.items()
            if start <= t <= end
        ]
        rewards = {a: self.REWARD[a] for a in active}
        obs = self._obs()
        terminateds = {"a": True} if t == 6 else {"c": True} if t == 7 else {}
        terminateds[ALL_AGENTS] = False
        truncateds = {ALL_AGENTS: t == 9}
        self._expect = {a for a in obs if not terminateds.get(a)}
        self.agents = [a for a in active if a not in terminateds]
        return obs, rewards, terminateds, truncateds, {}


class Recording:
    """Mixin: logs every reset and step (what the env got and returned)."""

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        self.log.append(("reset", {a: np.copy(o) for a, o in obs.items()}))
        return obs, infos

    def step(self, action_dict):
        out = super().step(action_dict)
        self.log.append(
            ("step", dict(action_dict), *({k: np.copy(v) for k, v in d.items()} for d in out[:4]))
        )
        return out


class RecordingTurnEnv(Recording, TurnEnv):
    def __init__(self, config=None):
        super().__init__(config)
        self.log: list = []


class RecordingCartPole(Recording, MultiAgentCartPole):
    def __init__(self, config=None):
        super().__init__(config)
        self.log: list = []


register_env("rec_turn", RecordingTurnEnv)
register_env("rec_cartpole", RecordingCartPole)


def reference_rows(log: list, module_of) -> list[tuple]:
    """The rows a multi-agent EnvRunner must produce from one env's log, in plain Python.

    A row opens when an agent acts and closes when it next observes (or is flagged done,
    or the episode ends); its reward is everything the agent got since it last acted
    (rewards before its first action go to its first row).
    """
    rows: list[tuple] = []
    pending: dict = {}
    hanging: dict = defaultdict(float)
    last_obs: dict = {}

    def close(agent, new_obs, term, trunc):
        row = pending.pop(agent)
        rows.append(
            (
                module_of(agent),
                row["obs"].tobytes(),
                row["action"],
                row["reward"],
                new_obs.tobytes(),
                term,
                trunc,
            )
        )

    for event in log:
        if event[0] == "reset":
            pending, hanging, last_obs = {}, defaultdict(float), dict(event[1])
            continue
        _, actions, obs, rew, te, tr = event
        for agent, action in actions.items():
            pending[agent] = {
                "obs": last_obs[agent],
                "action": int(action),
                "reward": hanging.pop(agent, 0.0),
            }
        for agent, r in rew.items():
            if agent in pending:
                pending[agent]["reward"] += float(r)
            else:
                hanging[agent] += float(r)
        term_all, trunc_all = bool(te[ALL_AGENTS]), bool(tr[ALL_AGENTS])
        over = term_all or trunc_all

        def flags(agent, te=te, tr=tr, term_all=term_all, trunc_all=trunc_all):
            own_t, own_u = bool(te.get(agent, False)), bool(tr.get(agent, False))
            if (term_all or trunc_all) and not (own_t or own_u):
                return term_all, not term_all and trunc_all
            return own_t, own_u

        for agent, o in obs.items():
            if agent in pending:
                close(agent, o, *flags(agent))
        for agent in {*te, *tr} - {ALL_AGENTS} - set(obs):
            if agent in pending and any(flags(agent)):
                close(agent, pending[agent]["obs"], *flags(agent))
        if over:
            for agent in list(pending):
                close(agent, pending[agent]["obs"], term_all, not term_all)
        last_obs = {a: o for a, o in obs.items() if not any(flags(a))}
    return rows


def runner_rows(batches: list[dict]) -> list[tuple]:
    out = []
    for batch in batches:
        for mid, cols in batch.items():
            for i in range(len(cols["obs"])):
                out.append(
                    (
                        mid,
                        cols["obs"][i].tobytes(),
                        int(cols["actions"][i]),
                        float(cols["rewards"][i]),
                        cols["new_obs"][i].tobytes(),
                        bool(cols["terminateds"][i]),
                        bool(cols["truncateds"][i]),
                    )
                )
    return out


def check_sequences(batch: dict) -> None:
    """Rows of one agent-episode are contiguous; seq_ends mark ends and episode ends."""
    for cols in batch.values():
        eps, ends = cols["eps_id"], cols["seq_ends"]
        change = np.flatnonzero(eps[1:] != eps[:-1])
        assert len(np.unique(eps)) == len(change) + 1, "an eps_id appears in two places"
        assert ends[change].all() and ends[-1]
        assert ends[cols["terminateds"] | cols["truncateds"]].all()


def ma_config(
    env: Any = MultiAgentCartPole,
    env_config: dict | None = None,
    num_envs: int = 2,
    policies: Any = None,
    mapping: Any = None,
) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, env_config={"num_agents": 4} if env_config is None else env_config)
        .env_runners(num_envs_per_env_runner=num_envs)
        .multi_agent(
            policies=policies or {"p0", "p1"},
            policy_mapping_fn=mapping or (lambda aid, episode: f"p{aid % 2}"),
        )
        .training(train_batch_size=128, minibatch_size=64, num_epochs=2)
        .debugging(seed=0)
    )


# ---------------------------------------------------------------------- rows vs reference
def test_rows_match_the_reference_on_the_turn_env(runner_cls):
    code = {"a": "pa", "b": "pb", "c": "pa"}
    config = ma_config(
        "rec_turn", {}, num_envs=1, policies={"pa", "pb"}, mapping=lambda aid, episode: code[aid]
    )
    runner = runner_cls(config=config)
    batches = [runner.sample(num_timesteps=n) for n in (4, 7, 9, 5)]  # cuts mid-episode
    for b in batches:
        check_sequences(b)
    expected = reference_rows(runner.envs[0].log, code.get)
    assert sorted(runner_rows(batches)) == sorted(expected)
    # Spot checks by hand (obs = [agent code, t]).
    rows = {(r[0], tuple(np.frombuffer(r[1], np.float32))): r for r in expected}
    b_first = rows[("pb", (1.0, 0.0))]  # b waits t=1, 2: 0.5 + 0.5
    assert b_first[3] == 1.0 and np.frombuffer(b_first[4], np.float32).tolist() == [1, 2]
    c_first = rows[("pa", (2.0, 2.0))]  # 2.0 before c ever acted + 2.0 for its action
    assert c_first[3] == 4.0
    c_last = rows[("pa", (2.0, 5.0))]  # terminated at t=7 with no final obs
    assert c_last[3:] == (4.0, c_last[1], True, False)
    b_last = rows[("pb", (1.0, 8.0))]  # closed by truncateds["__all__"] alone
    assert b_last[3:] == (0.5, b_last[1], False, True)
    a_last = rows[("pa", (0.0, 5.0))]
    assert np.frombuffer(a_last[4], np.float32).tolist() == [0, 6] and a_last[5]


def test_rows_match_the_reference_on_cartpole_with_three_modules(runner_cls):
    config = ma_config(
        "rec_cartpole",
        {"num_agents": 6},
        num_envs=3,
        policies={"p0", "p1", "p2"},
        mapping=lambda aid, ep: f"p{aid % 3}",
    )
    runner = runner_cls(config=config)
    batches = [runner.sample(num_timesteps=90), runner.sample(num_timesteps=150)]
    for b in batches:
        check_sequences(b)
    expected = [r for env in runner.envs for r in reference_rows(env.log, lambda a: f"p{a % 3}")]
    got = runner_rows(batches)
    assert len(got) > 500
    assert sorted(got) == sorted(expected)
    metrics = runner.get_metrics()
    assert metrics["num_env_steps"] == 240
    assert metrics["num_agent_steps"] == sum(
        len(e[1]) for env in runner.envs for e in env.log if e[0] == "step"
    )
    # Per-module returns sum the module's agents; per-agent returns are each agent's.
    assert sum(metrics["episode_returns"]) == pytest.approx(
        sum(sum(v) for v in metrics["module_episode_returns"].values())
    )
    assert sorted(metrics["agent_episode_returns"]) == list(range(6))


def test_action_logp_of_each_module_is_the_log_prob_of_its_recorded_actions(runner_cls):
    runner = runner_cls(config=ma_config(num_envs=2))
    runner.sample(num_timesteps=30)
    for mid, cols in runner.sample(num_timesteps=60).items():  # incl. rows carried over
        dist = runner.module[mid].action_dist(torch.from_numpy(cols["action_dist_inputs"]))
        expected = dist.logp(torch.from_numpy(cols["actions"])).numpy()
        np.testing.assert_allclose(cols["action_logp"], expected, rtol=1e-6, err_msg=mid)


def test_num_episodes_returns_whole_episodes_only(runner_cls):
    runner = runner_cls(config=ma_config(num_envs=3))
    batch = runner.sample(num_episodes=4)
    metrics = runner.get_metrics()
    assert len(metrics["episode_returns"]) >= 4
    rows = sum(len(c["obs"]) for c in batch.values())
    # CartPole pays 1.0 per agent step: rows of the whole episodes, nothing more.
    assert rows == pytest.approx(sum(metrics["episode_returns"]))
    for cols in batch.values():
        last = np.flatnonzero(cols["seq_ends"])
        assert (cols["terminateds"] | cols["truncateds"])[last].all()


# ---------------------------------------------------------------------- one pass per module
def test_one_forward_pass_per_module_per_step_and_one_mapping_per_agent_episode(runner_cls):
    """With stacking off (stacked groups: tests/env/test_module_groups.py)."""
    calls: list = []

    def mapping(aid, episode):
        if episode.id_ >= 0:  # not the set-up call (SETUP_EPISODE)
            calls.append((episode.id_, aid))
        return f"p{aid % 2}"

    config = ma_config(env_config={"num_agents": 8}, num_envs=4, mapping=mapping)
    runner = runner_cls(config=config.multi_agent(stack_modules=False))
    forwards = defaultdict(list)

    def counting(orig, mid):
        def forward(batch):
            forwards[mid].append(len(batch["obs"]))
            return orig(batch)

        return forward

    for mid, sub in runner.module.items():
        sub.forward_exploration = counting(sub.forward_exploration, mid)
    runner.sample(num_timesteps=4 * 60)
    # At most one per step (not one per agent); a step where all of a module's agents
    # are done and wait for their env's reset has none for it.
    assert 50 <= len(forwards["p0"]) <= 60 and 50 <= len(forwards["p1"]) <= 60
    assert max(forwards["p0"]) == 16  # 4 agents x 4 envs in one batch
    assert len(calls) == len(set(calls))  # once per agent per episode
    assert len({ep for ep, _ in calls}) >= 5  # episodes ended and restarted


# ---------------------------------------------------------------------- spaces
class DiscreteObsEnv(MultiAgentEnv):
    """Two kinds of agents: "x*" see Discrete(5), "y*" see Box(3); one-step episodes."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["x0", "x1", "y0"]
        box = gym.spaces.Box(-1, 1, (3,), np.float32)
        self.observation_spaces = {
            "x0": gym.spaces.Discrete(5),
            "x1": gym.spaces.Discrete(5),
            "y0": box,
        }
        self.action_spaces = {"x0": TWO, "x1": TWO, "y0": gym.spaces.Discrete(3)}

    def reset(self, *, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {"x0": 1, "x1": 4, "y0": np.zeros(3, np.float32)}, {}

    def step(self, action_dict):
        obs = {"x0": 2, "x1": 3, "y0": np.ones(3, np.float32)}
        rew = dict.fromkeys(obs, 1.0)
        self.agents = []
        return obs, rew, {ALL_AGENTS: True}, {ALL_AGENTS: False}, {}


def test_spaces_per_module_are_after_the_env_to_module_connectors(runner_cls):
    config = ma_config(
        DiscreteObsEnv, {}, num_envs=2, policies={"x", "y"}, mapping=lambda aid, ep: aid[0]
    )
    runner = runner_cls(config=config)
    spaces = runner.get_spaces()
    assert spaces[ENV_SPACES_KEY] == (gym.spaces.Discrete(5), TWO)  # the first agent's
    assert spaces["x"] == (gym.spaces.Box(0.0, 1.0, (5,), np.float32), TWO)  # one-hot
    assert spaces["y"] == (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(3))
    assert runner.module["x"].observation_space == spaces["x"][0]
    batch = runner.sample(num_timesteps=6)
    eye = np.eye(5, dtype=np.float32)
    assert {tuple(o) for o in batch["x"]["obs"]} == {tuple(eye[1]), tuple(eye[4])}
    assert {tuple(o) for o in batch["x"]["new_obs"]} == {tuple(eye[2]), tuple(eye[3])}
    assert batch["y"]["actions"].max() <= 2


def test_pettingzoo_team_spaces(runner_cls):
    pytest.importorskip("pettingzoo")
    from rlmod.env.pettingzoo_env import ParallelPettingZooEnv
    from rlmod.testing.pettingzoo_envs import TwoTeamGuessingEnv

    register_env("two_teams_test", lambda cfg: ParallelPettingZooEnv(TwoTeamGuessingEnv(**cfg)))
    config = ma_config(
        "two_teams_test", {}, policies={"red", "blue"}, mapping=lambda aid, ep: aid.split("_")[0]
    )
    runner = runner_cls(config=config)
    spaces = runner.get_spaces()
    assert spaces["red"][0].shape == (3,) and spaces["blue"][0].shape == (5,)
    assert spaces["blue"][1] == gym.spaces.Discrete(5)
    batch = runner.sample(num_timesteps=50)
    assert batch["blue"]["obs"].shape[1] == 5
    assert len(batch["red"]["obs"]) == 50 * 2  # 50 env steps, two red agents


# ---------------------------------------------------------------------- learner-only (rule 1)
class TinyLearnerOnly(RLModule):
    """A learner-only module (think curiosity model) with its own loss."""

    def setup(self) -> None:
        self.net = torch.nn.Linear(4, 3)

    def _forward(self, batch):
        return {"features": self.net(batch["obs"])}

    def compute_self_supervised_loss(self, *, learner, module_id, config, batch, fwd_out):
        return fwd_out["features"].pow(2).mean()


def learner_only_config(**kwargs) -> PPOConfig:
    box = MultiAgentCartPole().observation_spaces[0]
    icm = RLModuleSpec(
        module_class=TinyLearnerOnly, observation_space=box, action_space=TWO, learner_only=True
    )
    return ma_config(**kwargs).rl_module(
        rl_module_spec=MultiRLModuleSpec(rl_module_specs={"icm": icm})
    )


def test_env_runner_never_builds_a_learner_only_module_but_the_learner_does(runner_cls):
    algo = learner_only_config().env_runners(env_runner_cls=runner_cls).build_algo()
    runner = algo.env_runner
    assert sorted(runner.module.keys()) == ["p0", "p1"]
    assert sorted(runner.get_spaces()) == [ENV_SPACES_KEY, "p0", "p1"]
    names = [n for n, _ in runner.module.named_parameters()]
    assert names and not any("icm" in n or n.split(".")[1] not in ("p0", "p1") for n in names)
    assert not any(".vf" in n for n in names)  # inference-only: no value function
    learner = algo.learner_group.learner
    assert sorted(learner.module.keys()) == ["icm", "p0", "p1"]
    assert any(n.startswith("_rl_modules.icm.") for n, _ in learner.module.named_parameters())
    algo.stop()


def test_weight_sync_carries_no_learner_only_weights(runner_cls):
    algo = learner_only_config().env_runners(env_runner_cls=runner_cls).build_algo()
    sent: list = []
    runner = algo.env_runner
    orig = runner.set_state
    runner.set_state = lambda state: (sent.append(state), orig(state))
    algo.train()  # trains, then syncs
    assert sent and sorted(sent[-1]["rl_module"]) == ["p0", "p1"]
    for mid, weights in sent[-1]["rl_module"].items():
        assert not any(k.startswith("vf") for k in weights), mid  # inference-only part
        for k, v in weights.items():  # what the runner holds is what the learner holds
            np.testing.assert_array_equal(runner.module[mid].state_dict()[k].numpy(), v)
    with pytest.raises(UnknownModuleIDError, match="icm"):
        runner.set_state({"rl_module": {"icm": {}}})
    algo.stop()


# ---------------------------------------------------------------------- overrides (rule 4)
def test_get_config_for_module_same_object_or_cached_frozen_copy():
    config = ma_config().rl_module(
        algorithm_config_overrides_per_module={"p1": {"lr": 1e-2, "entropy_coeff": 0.03}}
    )
    assert config.get_config_for_module("p0") is config
    p1 = config.get_config_for_module("p1")
    assert p1 is not config and p1 is config.get_config_for_module("p1")
    assert (p1.lr, p1.entropy_coeff) == (1e-2, 0.03)
    assert (config.lr, config.entropy_coeff) == (5e-5, 0.0)
    assert p1.is_frozen
    with pytest.raises(AttributeError, match="frozen"):
        p1.lr = 1.0


def test_learner_optimizer_uses_the_overridden_lr():
    config = ma_config().rl_module(algorithm_config_overrides_per_module={"p1": {"lr": 1e-2}})
    algo = config.build_algo()
    learner = algo.learner_group.learner
    assert learner._optimizers["p0"].param_groups[0]["lr"] == 5e-5
    assert learner._optimizers["p1"].param_groups[0]["lr"] == 1e-2
    result = algo.train()
    assert result["learners"]["p1"]["default_optimizer_learning_rate"] == 1e-2
    assert result["learners"]["p0"]["default_optimizer_learning_rate"] == 5e-5
    algo.stop()


def test_unknown_override_setting_fails_at_validate():
    config = ma_config().rl_module(algorithm_config_overrides_per_module={"p1": {"lrr": 1}})
    with pytest.raises(ValueError, match="'lrr'.*Did you mean 'lr'"):
        config.validate()


# ---------------------------------------------------------------------- policies_to_train
def test_only_policies_to_train_change_the_others_keep_their_weights_bit_for_bit():
    config = ma_config().multi_agent(policies_to_train=["p0"])
    algo = config.build_algo()
    learner = algo.learner_group.learner
    before = {
        m: {k: v.clone() for k, v in learner.module[m].state_dict().items()} for m in ("p0", "p1")
    }
    runner_p1 = {k: v.clone() for k, v in algo.env_runner.module["p1"].state_dict().items()}
    result = algo.train()
    algo.train()
    assert "p1" not in result["learners"]
    after = {m: learner.module[m].state_dict() for m in ("p0", "p1")}
    assert all(torch.equal(before["p1"][k], after["p1"][k]) for k in before["p1"])
    assert not all(torch.equal(before["p0"][k], after["p0"][k]) for k in before["p0"])
    assert all(
        torch.equal(runner_p1[k], v) for k, v in algo.env_runner.module["p1"].state_dict().items()
    )
    assert "p1" not in learner._optimizers
    algo.stop()


def test_policies_to_train_naming_an_unknown_module_fails_at_validate():
    with pytest.raises(UnknownModuleIDError, match="policies_to_train names 'p2'"):
        ma_config().multi_agent(policies_to_train=["p0", "p2"]).validate()


# ---------------------------------------------------------------------- mapping errors
def test_mapping_to_an_unknown_module_names_agent_and_module(runner_cls):
    config = ma_config(mapping=lambda aid, ep: "p9" if aid == 3 else "p0")
    with pytest.raises(UnknownModuleIDError, match=r"agent 3 to module 'p9'.*not among"):
        runner_cls(config=config)


def test_mapping_unknown_only_at_run_time_is_caught_when_sampling(runner_cls):
    config = ma_config(mapping=lambda aid, ep: f"p{aid % 2}" if ep.id_ <= 0 else "px")
    runner = runner_cls(config=config)
    with pytest.raises(UnknownModuleIDError, match=r"agent 0 to module 'px'"):
        runner.sample(num_timesteps=2 * 600)


def test_mapping_to_a_learner_only_module_is_an_error(runner_cls):
    config = learner_only_config(mapping=lambda aid, ep: "icm" if aid == 2 else "p0")
    with pytest.raises(UnknownModuleIDError, match=r"agent 2 to module 'icm'.*learner-only"):
        runner_cls(config=config)


def test_two_agents_with_different_spaces_on_one_module_names_both(runner_cls):
    config = ma_config(DiscreteObsEnv, {}, policies={"p"}, mapping=lambda aid, ep: "p")
    with pytest.raises(
        ValueError,
        match=r"Agents 'x0' and 'y0' are both mapped to module 'p'"
        r".*Discrete\(5\).*Box",
    ):
        runner_cls(config=config)


def test_space_checks_compare_each_pair_of_space_objects_once():
    # Each env has its own (equal) space objects; with 1,000 modules the check compared
    # them once per module and env. Equal pairs are remembered, unequal ones never are.
    runner = MultiAgentEnvRunner(config=ma_config().env_runners(num_envs_per_env_runner=3))
    spaces = runner._spaces
    box = gym.spaces.Box(-1, 1, (4,), np.float32)
    copy, other = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Box(-2, 2, (4,), np.float32)
    assert spaces._same(box, copy) and (id(box), id(copy)) in spaces._equal
    assert spaces._same(box, copy)
    assert not spaces._same(box, other) and (id(box), id(other)) not in spaces._equal
    assert not spaces._same(box, other)


def test_a_single_agent_env_is_refused_with_a_hint(runner_cls):
    config = ma_config("CartPole-v1", {})
    with pytest.raises(TypeError, match="not an rlmod MultiAgentEnv.*ParallelPettingZooEnv"):
        runner_cls(config=config)


# ---------------------------------------------------------------------- state
def test_get_state_set_state_round_trip(runner_cls):
    a = runner_cls(config=ma_config())
    b = runner_cls(config=ma_config().debugging(seed=1))
    state = a.get_state()
    assert sorted(state["rl_module"]) == ["p0", "p1"]
    assert all(isinstance(v, np.ndarray) for w in state["rl_module"].values() for v in w.values())
    b.set_state(state)
    obs = torch.zeros(3, 4)
    for mid in ("p0", "p1"):
        with torch.no_grad():
            torch.testing.assert_close(
                a.module[mid].forward_inference({"obs": obs})["action_dist_inputs"],
                b.module[mid].forward_inference({"obs": obs})["action_dist_inputs"],
            )


def test_train_reports_module_and_agent_returns(runner_cls):
    algo = ma_config(num_envs=4).env_runners(env_runner_cls=runner_cls).build_algo()
    result = {}
    for _ in range(3):
        result = algo.train()
    env_runners = result["env_runners"]
    assert sorted(env_runners["module_episode_returns_mean"]) == ["p0", "p1"]
    assert sorted(env_runners["agent_episode_returns_mean"]) == ["0", "1", "2", "3"]  # RLlib: str
    assert env_runners["num_agent_steps_sampled"] > env_runners["num_env_steps_sampled"]
    algo.stop()


# ---------------------------------------------------------------------- which runner
@pytest.mark.parametrize(
    ("num_agents", "num_envs", "expected"),
    [
        (2, 1, ReferenceMultiAgentEnvRunner),
        (10, 1, ReferenceMultiAgentEnvRunner),  # 10 agents x envs: the threshold
        # the vectorized runner is a fast path: RLMOD_PLAIN_PATHS=1 runs the plain one
        pytest.param(4, 4, MultiAgentEnvRunner, marks=pytest.mark.fast_path),
        pytest.param(100, 1, MultiAgentEnvRunner, marks=pytest.mark.fast_path),
    ],
)
def test_the_plain_runner_is_the_default_for_few_agents_x_envs(num_agents, num_envs, expected):
    config = ma_config(env_config={"num_agents": num_agents}, num_envs=num_envs)
    group = EnvRunnerGroup(config=config)
    assert type(group.local_env_runner) is expected
    group.stop()


def test_settings_the_plain_runner_lacks_pick_the_vectorized_one(tmp_path):
    class EpisodeHook(RLlibCallback):
        def on_episode_end(self, **kwargs):
            pass

    settings = [
        lambda c: c.fault_tolerance(restart_failed_sub_environments=True),
        lambda c: c.offline_data(output=str(tmp_path)),
        lambda c: c.callbacks(EpisodeHook),
    ]
    for setting in settings:
        config = setting(ma_config(num_envs=1))
        assert EnvRunnerGroup._default_runner_cls(config) is MultiAgentEnvRunner
        with pytest.raises(ValueError, match="ReferenceMultiAgentEnvRunner does not support"):
            ReferenceMultiAgentEnvRunner(config=config)
    assert EnvRunnerGroup._default_runner_cls(ma_config(num_envs=1)) is (
        ReferenceMultiAgentEnvRunner
    )
    chosen = ma_config(num_envs=1).env_runners(env_runner_cls=MultiAgentEnvRunner)
    assert type(EnvRunnerGroup(config=chosen).local_env_runner) is MultiAgentEnvRunner
