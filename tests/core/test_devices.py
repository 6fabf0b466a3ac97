"""Learner devices (rlmod.core.devices): which settings put a Learner on the CPU (no GPUs
asked for; the driver's untrained copy beside remote Learners), which CUDA index a local
and a remote Learner get, the errors that name the setting and the fix when no GPU or
not that GPU is visible, and `cpu_tensors` over nested states.

CUDA availability is set per test (torch.cuda's own functions patched) where the rule
under test is the index, not the hardware; the Learner on a real GPU is tested in
tests/core/test_learner_device.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from rlmod.core.devices import CPU, cpu_tensors, learner_device


@dataclass
class Settings:
    num_gpus_per_learner: float = 0
    num_learners: int = 0
    local_gpu_idx: int = 0


def _visible_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_the_cpu_without_gpus_or_for_the_drivers_copy(monkeypatch: pytest.MonkeyPatch):
    _visible_gpus(monkeypatch, 0)  # the CPU path never asks torch for a GPU
    assert learner_device(Settings()) == CPU
    assert learner_device(Settings(num_gpus_per_learner=0.0), remote=True) == CPU
    assert learner_device(Settings(num_gpus_per_learner=1, num_learners=2)) == CPU


def test_local_and_remote_learners_get_their_cuda_index(monkeypatch: pytest.MonkeyPatch):
    _visible_gpus(monkeypatch, 2)
    assert learner_device(Settings(num_gpus_per_learner=1, local_gpu_idx=1)) == torch.device(
        "cuda", 1
    )
    # inside its Ray actor a remote Learner's GPU is always cuda:0 (Ray sets the visible one)
    remote = Settings(num_gpus_per_learner=0.5, num_learners=2, local_gpu_idx=1)
    assert learner_device(remote, remote=True) == torch.device("cuda", 0)


def test_a_gpu_index_that_is_not_visible_names_the_range(monkeypatch: pytest.MonkeyPatch):
    _visible_gpus(monkeypatch, 2)
    with pytest.raises(
        ValueError,
        match=r"local_gpu_idx=2 names a GPU, but only 2 are visible in this process .* "
        r"one of 0\.\.1",
    ):
        learner_device(Settings(num_gpus_per_learner=1, local_gpu_idx=2))


def test_no_gpu_names_the_setting_and_where(monkeypatch: pytest.MonkeyPatch):
    _visible_gpus(monkeypatch, 0)
    with pytest.raises(
        ValueError,
        match=r"num_gpus_per_learner=1 puts the Learner on a GPU, but torch.cuda.is_available\(\) "
        r"is False in this process .*\.learners\(num_gpus_per_learner=0\)",
    ):
        learner_device(Settings(num_gpus_per_learner=1))
    with pytest.raises(ValueError, match=r"is False in this remote Learner's Ray actor"):
        learner_device(Settings(num_gpus_per_learner=1, num_learners=1), remote=True)


def test_cpu_tensors_walks_nested_states_and_keeps_their_types():
    w = torch.ones(2, requires_grad=True)
    state = {"w": w * 2, "parts": [torch.zeros(1), (torch.ones(1), 3)], "name": "p0"}
    out = cpu_tensors(state)
    assert out["w"].device == CPU and not out["w"].requires_grad
    assert out["w"].tolist() == [2.0, 2.0]
    assert isinstance(out["parts"], list) and isinstance(out["parts"][1], tuple)
    assert out["parts"][1][1] == 3 and out["name"] == "p0"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cpu_tensors_moves_cuda_tensors_to_the_cpu():
    out = cpu_tensors({"x": [torch.ones(3, device="cuda")]})
    assert out["x"][0].device == CPU
