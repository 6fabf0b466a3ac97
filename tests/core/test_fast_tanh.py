"""Tests of rlmod/core/fast_tanh.py: the stacked paths' tanh against torch's."""

from __future__ import annotations

import torch

from rlmod.core.fast_tanh import tanh_


def test_within_2e_7_of_the_exact_tanh_and_saturates_exactly():
    x = torch.cat([torch.linspace(-20, 20, 400_001), torch.tensor([-1e30, -100.0, 0.0, 1e30])])
    exact = torch.tanh(x.double())
    ours = tanh_(x.clone())
    assert ours.dtype == torch.float32
    assert float((ours.double() - exact).abs().max()) <= 2e-7
    assert ours[-4:].tolist() == [-1.0, -1.0, 0.0, 1.0]
    assert float(ours.abs().max()) <= 1.0  # an activation of tanh's range, nothing outside


def test_in_place_and_on_any_shape():
    x = torch.randn(3, 5, 7)
    want = torch.tanh(x)
    out = tanh_(x)
    assert out is x
    torch.testing.assert_close(out, want, atol=2e-7, rtol=0)
