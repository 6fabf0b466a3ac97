"""Tests of the action distributions (rlmod/core/distributions.py) against torch.distributions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import distributions as td

from rlmod.core.distributions import (
    Categorical,
    DiagGaussian,
    MultiCategorical,
    dist_inputs_dim,
    make_action_dist,
)

B = 64
NVEC = [3, 2, 5]


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def test_categorical_matches_torch(gen):
    logits_p, logits_q = torch.randn(B, 6, generator=gen) * 3, torch.randn(B, 6, generator=gen)
    actions = torch.randint(0, 6, (B,), generator=gen)
    ours, ref = Categorical(logits_p), td.Categorical(logits=logits_p)
    torch.testing.assert_close(ours.logp(actions), ref.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    torch.testing.assert_close(
        ours.kl(Categorical(logits_q)), td.kl_divergence(ref, td.Categorical(logits=logits_q))
    )
    assert torch.equal(ours.deterministic_sample(), logits_p.argmax(-1))


def test_categorical_samples_follow_the_probabilities():
    torch.manual_seed(0)
    probs = torch.tensor([0.1, 0.2, 0.7])
    samples = Categorical(probs.log().expand(20_000, 3)).sample()
    freq = torch.bincount(samples, minlength=3).float() / 20_000
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0.0)


def test_multi_categorical_matches_a_product_of_torch_categoricals(gen):
    logits_p = torch.randn(B, sum(NVEC), generator=gen) * 2
    logits_q = torch.randn(B, sum(NVEC), generator=gen)
    actions = torch.stack([torch.randint(0, n, (B,), generator=gen) for n in NVEC], dim=-1)
    refs_p = [td.Categorical(logits=x) for x in logits_p.split(NVEC, dim=-1)]
    refs_q = [td.Categorical(logits=x) for x in logits_q.split(NVEC, dim=-1)]
    ours = MultiCategorical(logits_p, NVEC)
    torch.testing.assert_close(
        ours.logp(actions), sum(r.log_prob(actions[:, i]) for i, r in enumerate(refs_p))
    )
    torch.testing.assert_close(ours.entropy(), sum(r.entropy() for r in refs_p))
    kls = [td.kl_divergence(p, q) for p, q in zip(refs_p, refs_q, strict=True)]
    torch.testing.assert_close(ours.kl(MultiCategorical(logits_q, NVEC)), sum(kls))
    sample = ours.sample()
    assert sample.shape == (B, len(NVEC))
    assert all((sample[:, i] < n).all() for i, n in enumerate(NVEC))


def test_diag_gaussian_matches_torch(gen):
    d = 3

    def gaussian_inputs():  # means, then log standard deviations
        return torch.cat(
            [torch.randn(B, d, generator=gen), 0.5 * torch.randn(B, d, generator=gen)], dim=-1
        )

    inputs_p, inputs_q = gaussian_inputs(), gaussian_inputs()
    actions = torch.randn(B, d, generator=gen) * 2

    def ref(inputs):
        mean, log_std = inputs.chunk(2, dim=-1)
        return td.Independent(td.Normal(mean, log_std.exp()), 1)

    ours = DiagGaussian(inputs_p)
    torch.testing.assert_close(ours.logp(actions), ref(inputs_p).log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref(inputs_p).entropy())
    torch.testing.assert_close(
        ours.kl(DiagGaussian(inputs_q)), td.kl_divergence(ref(inputs_p), ref(inputs_q))
    )
    assert torch.equal(ours.deterministic_sample(), inputs_p[:, :d])


def test_kl_of_a_distribution_with_itself_is_zero(gen):
    for dist in (
        Categorical(torch.randn(B, 4, generator=gen)),
        MultiCategorical(torch.randn(B, sum(NVEC), generator=gen), NVEC),
        DiagGaussian(torch.randn(B, 4, generator=gen)),
    ):
        torch.testing.assert_close(dist.kl(dist), torch.zeros(B), atol=1e-6, rtol=0.0)


@pytest.mark.parametrize(
    "space, dim, cls",
    [
        (gym.spaces.Discrete(4), 4, Categorical),
        (gym.spaces.MultiDiscrete(NVEC), 10, MultiCategorical),
        (gym.spaces.Box(-1, 1, (2, 3)), 12, DiagGaussian),
    ],
)
def test_dist_inputs_dim_and_make_action_dist(space, dim, cls):
    assert dist_inputs_dim(space) == dim
    assert isinstance(make_action_dist(space, torch.zeros(2, dim)), cls)


def test_unsupported_action_space_is_a_type_error():
    phrase = "is not supported; use Discrete, MultiDiscrete, Box, MultiBinary, or a Tuple/Dict"
    with pytest.raises(TypeError, match=phrase):
        dist_inputs_dim(gym.spaces.Text(4))
    with pytest.raises(TypeError, match=phrase):
        make_action_dist(gym.spaces.Text(4), torch.zeros(1, 3))


def test_bernoulli_matches_torch_for_multibinary(gen):
    logits = torch.randn(6, 3, generator=gen)
    dist = make_action_dist(gym.spaces.MultiBinary(3), logits)
    ref = torch.distributions.Bernoulli(logits=logits)
    actions = dist.sample()
    assert actions.shape == (6, 3) and set(actions.unique().tolist()) <= {0, 1}
    torch.testing.assert_close(dist.logp(actions), ref.log_prob(actions.float()).sum(-1))
    torch.testing.assert_close(dist.entropy(), ref.entropy().sum(-1))
    other = make_action_dist(gym.spaces.MultiBinary(3), torch.randn(6, 3, generator=gen))
    ref_other = torch.distributions.Bernoulli(logits=other.inputs)
    torch.testing.assert_close(
        dist.kl(other), torch.distributions.kl_divergence(ref, ref_other).sum(-1)
    )


def test_tuple_and_dict_action_spaces_are_products_of_their_parts(gen):
    space = gym.spaces.Dict(
        {
            "move": gym.spaces.Discrete(3),
            "aim": gym.spaces.Box(-1, 1, (2,)),
            "flags": gym.spaces.MultiBinary(2),
        }
    )
    assert list(space.spaces) == ["aim", "flags", "move"]  # gymnasium sorts the keys
    assert dist_inputs_dim(space) == 4 + 2 + 3
    inputs = torch.randn(5, 9, generator=gen)
    dist = make_action_dist(space, inputs)
    actions = dist.sample()
    assert actions.shape == (5, 2 + 2 + 1)
    parts = [
        make_action_dist(sub, x)
        for sub, x in zip(
            space.spaces.values(), torch.split(inputs, [4, 2, 3], dim=-1), strict=True
        )
    ]
    expected = (
        parts[0].logp(actions[:, :2])
        + parts[1].logp(actions[:, 2:4])
        + parts[2].logp(actions[:, 4].long())
    )
    torch.testing.assert_close(dist.logp(actions), expected)
    torch.testing.assert_close(dist.entropy(), sum(p.entropy() for p in parts))
    tup = make_action_dist(gym.spaces.Tuple(list(space.spaces.values())), inputs)
    torch.testing.assert_close(tup.logp(actions), expected)


def test_logp_of_box_actions_is_per_row(gen):
    inputs = torch.randn(5, 4, generator=gen)
    assert DiagGaussian(inputs).logp(torch.zeros(5, 2)).shape == (5,)
    assert np.isfinite(DiagGaussian(inputs).entropy().numpy()).all()


def test_categorical_with_extreme_logits_matches_torch():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4096, 2, generator=gen) * 4
    logits[0] = torch.tensor([60.0, -60.0])  # all mass on action 0
    logits[1] = torch.tensor([-60.0, 60.0])  # all mass on action 1
    actions = torch.randint(0, 2, (4096,), generator=gen)
    ref = td.Categorical(logits=logits)
    torch.testing.assert_close(Categorical(logits).logp(actions), ref.log_prob(actions))
    torch.manual_seed(0)
    samples = Categorical(logits).sample()
    assert samples.dtype == torch.int64 and samples.shape == (4096,)
    assert samples[0] == 0 and samples[1] == 1


def test_categorical_sample_follows_the_probabilities():
    torch.manual_seed(0)
    probs = torch.tensor([0.3, 0.7])
    samples = Categorical(probs.log().expand(40_000, 2)).sample()
    assert abs(samples.float().mean().item() - 0.7) < 0.01


@pytest.mark.parametrize("num_actions", [2, 5])
def test_categorical_sampling_stream_does_not_depend_on_the_batch_size(num_actions):
    # One RNG stream, B * n uniforms in row order: a seeded batch's first rows get the
    # same actions whether the batch has 16 rows or 8,192 (no size-dependent sampler).
    logits = torch.randn(8192, num_actions, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(0)
    small = Categorical(logits[:16]).sample()
    torch.manual_seed(0)
    large = Categorical(logits).sample()
    assert torch.equal(small, large[:16])
