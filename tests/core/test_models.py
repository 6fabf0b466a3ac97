"""Tests of the default models (rlmod/core/models.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rlmod.core.models import DefaultModelConfig, Linear, activation, mlp


def test_tanh_is_torchs_and_acting_equals_training_bit_for_bit():
    # One kernel with and without autograd: an EnvRunner's forward pass (inference mode)
    # and a Learner's (autograd) give the same numbers, so the first epoch's ratio is 1.
    assert type(activation("tanh")) is nn.Tanh
    net = mlp(4, [64, 64], activation_name="tanh", out_dim=2)
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0)) * 3
    with torch.inference_mode():
        acting = net(x)
    training = net(x)
    assert training.requires_grad
    assert torch.equal(acting, training.detach())


def test_mlp_orthogonal_init_and_small_output_gain():
    net = mlp(4, [8], activation_name="relu", out_dim=2, out_gain=0.01)
    hidden, out = net[0], net[2]
    assert isinstance(net[1], nn.ReLU)
    w = hidden.weight.detach()
    torch.testing.assert_close(w.T @ w, 2.0 * torch.eye(4), atol=1e-5, rtol=0)  # gain sqrt(2)
    assert float(out.weight.detach().abs().max()) <= 0.01 + 1e-6
    assert float(hidden.bias.detach().abs().sum()) == 0.0


def test_mlp_draws_what_nn_linear_and_orthogonal_init_draw():
    # models.Linear is nn.Linear on real devices: the same weights, the same RNG stream
    # after, so seeded runs did not change when it replaced nn.Linear.
    torch.manual_seed(5)
    net = mlp(4, [64, 64], activation_name="tanh", out_dim=2, out_gain=0.01)
    after = torch.get_rng_state()
    torch.manual_seed(5)
    plain = []
    for fan_in, fan_out, gain in [(4, 64, 2**0.5), (64, 64, 2**0.5), (64, 2, 0.01)]:
        layer = nn.Linear(fan_in, fan_out)
        nn.init.orthogonal_(layer.weight, gain=gain)
        nn.init.zeros_(layer.bias)
        plain.append(layer)
    assert torch.equal(after, torch.get_rng_state())
    for ours, theirs in zip([net[0], net[2], net[4]], plain, strict=True):
        assert isinstance(ours, nn.Linear)
        assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)


def test_mlp_on_the_meta_device_draws_nothing():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    with torch.device("meta"):
        net = mlp(4, [64], activation_name="tanh", out_dim=2)
        Linear(3, 3).reset_parameters()
    assert net[0].weight.is_meta
    assert torch.equal(before, torch.get_rng_state())


def test_model_config_names_a_bad_activation_and_unknown_keys():
    with pytest.raises(
        ValueError, match="model_config\\['fcnet_activation'\\]='gelu' is not a known activation"
    ):
        DefaultModelConfig(fcnet_activation="gelu")
    with pytest.raises(ValueError, match="unknown key 'fcnet_hiden'. Did you mean 'fcnet_hiddens'"):
        DefaultModelConfig.from_any({"fcnet_hiden": [32]})
