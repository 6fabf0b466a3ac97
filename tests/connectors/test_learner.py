"""Tests of the learner connectors (rlmod/connectors/learner.py): GAE by hand.

gamma = 0.9, lambda = 0.8, so gamma * lambda = 0.72. One 4-step sequence, rewards
r = [1, 0, 2, 1], values V(s_t) = [0.5, 0.4, 0.3, 0.2], next values
V(s_{t+1}) = [0.4, 0.3, 0.2, 0.9] (0.9 is V of the last row's next observation):

    delta_t = r_t + 0.9 * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + 0.72 * A_{t+1}   (A after a sequence end is 0)

    t   delta                          A (terminated at t=3)        A (truncated / cut at t=3)
    0   1 + 0.36 - 0.5  =  0.86        0.86 + 0.72 * 1.63832        0.86 + 0.72 * 2.058224
                                          = 2.0395904                  = 2.34192128
    1   0 + 0.27 - 0.4  = -0.13        -0.13 + 0.72 * 2.456         -0.13 + 0.72 * 3.0392
                                          = 1.63832                    = 2.058224
    2   2 + 0.18 - 0.3  =  1.88        1.88 + 0.72 * 0.8 = 2.456    1.88 + 0.72 * 1.61 = 3.0392
    3   terminated: 1 - 0.2 = 0.8      0.8                          1.61
        truncated:  1 + 0.81 - 0.2 = 1.61

value_targets = A + V. A second sequence right after it (cut by the fragment end),
r = [1, 1], V = [0.1, 0.2], V' = [0.2, 0.5]: deltas 1.08 and 1.25, A = [1.98, 1.25].
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmod.connectors.learner import GeneralAdvantageEstimation, compute_gae
from rlmod.core import Columns, MultiRLModule, RLModule

GAMMA, LAMBDA = 0.9, 0.8
REWARDS = [1.0, 0.0, 2.0, 1.0]
VALUES = [0.5, 0.4, 0.3, 0.2]
NEXT_VALUES = [0.4, 0.3, 0.2, 0.9]
ADV_TERMINATED = [2.0395904, 1.63832, 2.456, 0.8]
ADV_BOOTSTRAPPED = [2.34192128, 2.058224, 3.0392, 1.61]
SECOND = {"rewards": [1.0, 1.0], "values": [0.1, 0.2], "next_values": [0.2, 0.5]}
ADV_SECOND = [1.98, 1.25]


def gae(rewards, values, next_values, terminateds, seq_ends):
    return compute_gae(
        np.array(rewards),
        np.array(values),
        np.array(next_values),
        np.array(terminateds, float),
        np.array(seq_ends, float),
        gamma=GAMMA,
        lambda_=LAMBDA,
    )


def test_gae_terminated_does_not_bootstrap():
    adv, targets = gae(REWARDS, VALUES, NEXT_VALUES, [0, 0, 0, 1], [0, 0, 0, 1])
    np.testing.assert_allclose(adv, ADV_TERMINATED, rtol=1e-6)
    np.testing.assert_allclose(targets, np.add(ADV_TERMINATED, VALUES), rtol=1e-6)
    assert adv.dtype == targets.dtype == np.float32


def test_gae_truncated_bootstraps_the_next_value():
    """A time limit (truncated, not terminated): the episode would have gone on."""
    adv, targets = gae(REWARDS, VALUES, NEXT_VALUES, [0, 0, 0, 0], [0, 0, 0, 1])
    np.testing.assert_allclose(adv, ADV_BOOTSTRAPPED, rtol=1e-6)
    np.testing.assert_allclose(targets, np.add(ADV_BOOTSTRAPPED, VALUES), rtol=1e-6)


def test_gae_does_not_leak_across_sequence_ends():
    """Terminated sequence, then a sequence cut by the fragment end."""
    adv, _ = gae(
        REWARDS + SECOND["rewards"],
        VALUES + SECOND["values"],
        NEXT_VALUES + SECOND["next_values"],
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0, 1],
    )
    np.testing.assert_allclose(adv, ADV_TERMINATED + ADV_SECOND, rtol=1e-6)


def test_gae_does_not_leak_across_a_seq_end_without_done():
    """A fragment-cut sequence (seq_end, not terminated) directly before another one:
    only seq_ends stops the recursion, and the cut sequence bootstraps."""
    adv, _ = gae(
        REWARDS + SECOND["rewards"],
        VALUES + SECOND["values"],
        NEXT_VALUES + SECOND["next_values"],
        [0] * 6,
        [0, 0, 0, 1, 0, 1],
    )
    np.testing.assert_allclose(adv, ADV_BOOTSTRAPPED + ADV_SECOND, rtol=1e-6)


def test_gae_with_lambda_one_is_the_discounted_return_minus_value():
    rewards = np.array([1.0, 2.0, 3.0])
    adv, targets = compute_gae(
        rewards,
        np.zeros(3),
        np.zeros(3),
        np.array([0, 0, 1.0]),
        np.array([0, 0, 1.0]),
        gamma=0.5,
        lambda_=1.0,
    )
    np.testing.assert_allclose(targets, [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0])


class _TableValues(RLModule):
    """V(obs) = obs[:, 0]: the test writes the values into the observations."""

    def compute_values(self, batch, embeddings=None):
        return batch[Columns.OBS][:, 0]


@pytest.mark.parametrize(
    "terminated, truncated, expected",
    [
        (True, False, ADV_TERMINATED),
        (False, True, ADV_BOOTSTRAPPED),
        (False, False, ADV_BOOTSTRAPPED),
    ],
    ids=["terminated", "truncated", "fragment-cut"],
)
def test_gae_connector_bootstraps_on_truncation_not_termination(terminated, truncated, expected):
    module = _TableValues(
        observation_space=gym.spaces.Box(-10, 10, (1,)), action_space=gym.spaces.Discrete(2)
    )
    cols = {
        Columns.OBS: torch.tensor(VALUES).unsqueeze(-1),
        Columns.NEXT_OBS: torch.tensor(NEXT_VALUES).unsqueeze(-1),
        Columns.REWARDS: torch.tensor(REWARDS),
        Columns.TERMINATEDS: torch.tensor([False, False, False, terminated]),
        Columns.TRUNCATEDS: torch.tensor([False, False, False, truncated]),
        Columns.SEQ_ENDS: torch.tensor([False, False, False, True]),
    }
    connector = GeneralAdvantageEstimation(gamma=GAMMA, lambda_=LAMBDA, normalize_advantages=False)
    out = connector({"p": cols}, rl_module=MultiRLModule({"p": module}))["p"]
    np.testing.assert_allclose(out[Columns.ADVANTAGES].numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(
        out[Columns.VALUE_TARGETS].numpy(), np.add(expected, VALUES), rtol=1e-6
    )
    np.testing.assert_allclose(out[Columns.VF_PREDS].numpy(), VALUES, rtol=1e-6)


def test_gae_connector_normalizes_advantages_and_skips_modules_without_values():
    space = gym.spaces.Box(-10, 10, (1,))
    cols = {
        Columns.OBS: torch.tensor(VALUES).unsqueeze(-1),
        Columns.NEXT_OBS: torch.tensor(NEXT_VALUES).unsqueeze(-1),
        Columns.REWARDS: torch.tensor(REWARDS),
        Columns.TERMINATEDS: torch.tensor([False, False, False, True]),
        Columns.SEQ_ENDS: torch.tensor([False, False, False, True]),
    }
    plain = RLModule(observation_space=space, action_space=gym.spaces.Discrete(2))
    multi = MultiRLModule(
        {
            "p": _TableValues(observation_space=space, action_space=gym.spaces.Discrete(2)),
            "no_vf": plain,
        }
    )
    out = GeneralAdvantageEstimation(gamma=GAMMA, lambda_=LAMBDA)(
        {"p": dict(cols), "no_vf": dict(cols)}, rl_module=multi
    )
    adv = out["p"][Columns.ADVANTAGES].numpy()
    assert abs(adv.mean()) < 1e-6 and adv.std() == pytest.approx(1.0, rel=1e-4)
    assert Columns.ADVANTAGES not in out["no_vf"]


class _CountingCNN(RLModule):
    """A small CNN value function over uint8 images that records the rows it is given."""

    def setup(self) -> None:
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(1)
        )
        self.rows: list[int] = []

    def compute_values(self, batch, embeddings=None):
        obs = batch[Columns.OBS]
        self.rows.append(obs.shape[0])
        return self.net(obs.float().permute(0, 3, 1, 2) / 255).squeeze(-1)


def test_gae_connector_passes_next_observations_only_where_they_are_not_the_next_row():
    """Rows of env-runner batches: new_obs is the next row's obs inside an episode, so the
    value pass takes obs plus the new_obs of episode and fragment ends only (here 3 of 12),
    and gives the values a pass over every new_obs gives."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (15, 6, 6, 2), dtype=np.uint8)
    # two episodes of one sub-env (rows 0-4 end terminated, 5-8 truncated), then a
    # fragment of another (rows 9-11, cut by the fragment end): each ends with its own
    # final observation, which is no row's obs
    obs = np.concatenate([frames[0:5], frames[6:10], frames[11:14]])
    new_obs = np.concatenate([frames[1:6], frames[7:11], frames[12:15]])
    ends = np.zeros(12, bool)
    ends[[4, 8, 11]] = True
    cols = {
        Columns.OBS: torch.from_numpy(obs),
        Columns.NEXT_OBS: torch.from_numpy(new_obs),
        Columns.REWARDS: torch.ones(12),
        Columns.TERMINATEDS: torch.from_numpy(np.arange(12) == 4),
        Columns.SEQ_ENDS: torch.from_numpy(ends),
    }
    space = gym.spaces.Box(0, 255, (6, 6, 2), np.uint8)
    torch.manual_seed(0)
    module = _CountingCNN(observation_space=space, action_space=gym.spaces.Discrete(2))
    with torch.no_grad():
        v = module.compute_values({Columns.OBS: cols[Columns.OBS]}).numpy()
        v_next = module.compute_values({Columns.OBS: cols[Columns.NEXT_OBS]}).numpy()
    module.rows.clear()
    connector = GeneralAdvantageEstimation(gamma=GAMMA, lambda_=LAMBDA, normalize_advantages=False)
    out = connector({"p": dict(cols)}, rl_module=MultiRLModule({"p": module}))["p"]
    assert module.rows == [12 + 3]
    expected, _ = gae(np.ones(12), v, v_next, np.arange(12) == 4, ends)
    np.testing.assert_allclose(out[Columns.VF_PREDS].numpy(), v, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out[Columns.ADVANTAGES].numpy(), expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- GAE over many modules
def _random_sequences(rng: np.random.Generator, n: int, longest: int) -> np.ndarray:
    """seq_ends of `n` rows cut into sequences of 1..longest rows."""
    ends = np.zeros(n, bool)
    t = -1
    while t < n - 1:
        t = min(n - 1, t + int(rng.integers(1, longest + 1)))
        ends[t] = True
    return ends


def test_gae_recursion_over_all_sequences_at_once_matches_the_loop_bit_for_bit():
    """The vectorised path (many short sequences) against the plain backwards loop."""
    from rlmod.connectors.learner import _gae_recursion

    rng = np.random.default_rng(0)
    n = 5000
    seq_ends = _random_sequences(rng, n, 40)
    deltas = rng.normal(size=n)
    carry = np.where(seq_ends, 0.0, rng.uniform(0.5, 0.99, n))
    expected = np.empty(n)
    last = 0.0
    for t in range(n - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        expected[t] = last
    assert n >= 32 * 40  # the vectorised path runs
    np.testing.assert_array_equal(_gae_recursion(deltas, carry, seq_ends), expected)


class _PerModuleConfig:
    """get_config_for_module: module i has gamma 0.9 + 0.01 * i, lambda 0.95 - 0.02 * i."""

    def get_config_for_module(self, module_id: str) -> object:
        i = int(module_id[1:])
        return type("C", (), {"gamma": 0.9 + 0.01 * i, "lambda_": 0.95 - 0.02 * i})()


def test_gae_connector_over_all_modules_at_once_equals_each_module_alone():
    """Five modules (own gamma and lambda, different row counts, sequences cut anywhere,
    a module whose last row is no sequence end): one GAE over all their rows gives each
    module exactly what compute_gae gives on its rows alone."""
    rng = np.random.default_rng(1)
    space = gym.spaces.Box(-10, 10, (1,))
    mids = [f"p{i}" for i in range(5)]
    multi = MultiRLModule(
        {
            m: _TableValues(observation_space=space, action_space=gym.spaces.Discrete(2))
            for m in mids
        }
    )
    batch, expected = {}, {}
    for i, mid in enumerate(mids):
        n = 300 + 70 * i
        seq_ends = _random_sequences(rng, n, 6)
        seq_ends[-1] = i != 3  # module p3 ends mid-sequence
        term = seq_ends & (rng.random(n) < 0.5)
        v, v_next = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
        rewards = rng.normal(size=n).astype(np.float32)
        batch[mid] = {
            Columns.OBS: torch.from_numpy(v).unsqueeze(-1),
            Columns.NEXT_OBS: torch.from_numpy(v_next).unsqueeze(-1),
            Columns.REWARDS: torch.from_numpy(rewards),
            Columns.TERMINATEDS: torch.from_numpy(term),
            Columns.SEQ_ENDS: torch.from_numpy(seq_ends),
        }
        cfg = _PerModuleConfig().get_config_for_module(mid)
        adv, targets = compute_gae(
            rewards.astype(np.float64),
            v.astype(np.float64),
            v_next.astype(np.float64),
            term.astype(np.float64),
            seq_ends.astype(np.float64),
            gamma=cfg.gamma,
            lambda_=cfg.lambda_,
        )
        expected[mid] = ((adv - adv.mean()) / (adv.std() + 1e-8), targets)
    out = GeneralAdvantageEstimation(config=_PerModuleConfig())(batch, rl_module=multi)
    for mid in mids:
        np.testing.assert_array_equal(out[mid][Columns.ADVANTAGES].numpy(), expected[mid][0])
        np.testing.assert_array_equal(out[mid][Columns.VALUE_TARGETS].numpy(), expected[mid][1])


def test_gae_connector_with_stacked_modules_matches_unstacked():
    """Values of stacked modules come from one stacked pass per group: the same values
    (float tolerance) and advantages as module by module."""
    from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
    from rlmod.core.stacked import find_stack_groups

    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    rng = np.random.default_rng(2)
    torch.manual_seed(0)
    modules = {
        f"p{i}": DefaultPPORLModule(
            observation_space=box,
            action_space=gym.spaces.Discrete(2),
            model_config={"fcnet_hiddens": [8]},
        )
        for i in range(4)
    }
    plain = MultiRLModule(
        {
            m: type(mod)(
                observation_space=box,
                action_space=mod.action_space,
                model_config={"fcnet_hiddens": [8]},
            )
            for m, mod in modules.items()
        }
    )
    for m, mod in modules.items():
        plain[m].load_state_dict(mod.state_dict())
    stacked = MultiRLModule(modules)
    assert len(find_stack_groups(stacked)) == 1

    def batch() -> dict:
        out = {}
        for i, m in enumerate(modules):
            n = 50 + 10 * i
            out[m] = {
                Columns.OBS: torch.from_numpy(rng.uniform(-1, 1, (n, 4)).astype(np.float32)),
                Columns.NEXT_OBS: torch.from_numpy(rng.uniform(-1, 1, (n, 4)).astype(np.float32)),
                Columns.REWARDS: torch.ones(n),
                Columns.TERMINATEDS: torch.zeros(n, dtype=torch.bool),
                Columns.SEQ_ENDS: torch.from_numpy(_random_sequences(rng, n, 9)),
            }
        return out

    a = batch()
    b = {m: dict(cols) for m, cols in a.items()}
    out_a = GeneralAdvantageEstimation()(a, rl_module=stacked)
    out_b = GeneralAdvantageEstimation()(b, rl_module=plain)
    for m in modules:
        for col in (Columns.VF_PREDS, Columns.ADVANTAGES, Columns.VALUE_TARGETS):
            np.testing.assert_allclose(
                out_a[m][col].numpy(), out_b[m][col].numpy(), rtol=1e-5, atol=1e-5
            )


@pytest.mark.parametrize("num_sequences", [2, 64])  # the row loop and the all-at-once path
def test_a_nan_in_one_sequence_does_not_reach_the_others(num_sequences):
    # Modules' rows are concatenated into one GAE call: a NaN reward of one module (its
    # minibatches are then skipped by the Learner's guard) must leave the others finite.
    n = 3 * num_sequences
    rewards = np.ones(n)
    rewards[-2] = np.nan  # inside the last sequence
    seq_ends = np.zeros(n)
    seq_ends[2::3] = 1.0
    adv, _ = compute_gae(
        rewards, np.zeros(n), np.zeros(n), np.zeros(n), seq_ends, gamma=0.9, lambda_=1.0
    )
    assert np.isnan(adv[-3:-1]).all() and np.isfinite(adv[:-3]).all()


def test_a_non_finite_module_does_not_leak_into_the_others():
    """One GAE over all modules: a NaN in one module's rows stays in that module (the
    Learner then skips that module alone), on both recursion paths."""
    space = gym.spaces.Box(-10, 10, (1,))
    multi = MultiRLModule(
        {
            m: _TableValues(observation_space=space, action_space=gym.spaces.Discrete(2))
            for m in ("a", "b", "c")
        }
    )
    for rows, longest in ((4, 4), (200, 2)):  # plain loop; vectorised (many short sequences)
        batch = {}
        for mid in ("a", "b", "c"):
            v = torch.ones(rows)
            batch[mid] = {
                Columns.OBS: v.unsqueeze(-1),
                Columns.NEXT_OBS: v.unsqueeze(-1),
                Columns.REWARDS: torch.full((rows,), float("nan") if mid == "b" else 1.0),
                Columns.TERMINATEDS: torch.zeros(rows, dtype=torch.bool),
                Columns.SEQ_ENDS: torch.from_numpy(np.arange(rows) % longest == longest - 1),
            }
        out = GeneralAdvantageEstimation(normalize_advantages=False)(batch, rl_module=multi)
        assert torch.isfinite(out["a"][Columns.ADVANTAGES]).all()
        assert torch.isfinite(out["c"][Columns.ADVANTAGES]).all()
        assert torch.isnan(out["b"][Columns.ADVANTAGES]).all()
