"""Where a Learner's modules and batches live: the one place that turns the config's
`num_gpus_per_learner` / `local_gpu_idx` into a torch device.

Used by Learner (`Learner.device`, read when it builds modules, optimizers and batches)
and by the Ray helper (a remote Learner's GPU is the one Ray assigned to its actor).
EnvRunners always run on the CPU; weights reach them as numpy arrays.
"""

from __future__ import annotations

from typing import Protocol

import torch

from rlmod.core.types import StateValue

CPU = torch.device("cpu")


class DeviceSettings(Protocol):
    """What `learner_device` reads from the config: AlgorithmConfig has these settings
    (a Protocol, so that core does not import the algorithms package)."""

    @property
    def num_gpus_per_learner(self) -> float: ...
    @property
    def num_learners(self) -> int: ...
    @property
    def local_gpu_idx(self) -> int: ...


def learner_device(config: DeviceSettings, *, remote: bool = False) -> torch.device:
    """The device of a Learner built from `config`.

    `num_gpus_per_learner=0`: the CPU. Otherwise a CUDA device: for a remote Learner
    (`remote=True`, inside its Ray actor) `cuda:0`, which is the GPU Ray assigned to the
    actor (Ray sets CUDA_VISIBLE_DEVICES per actor, fractional GPUs included); for the
    driver's Learner with `num_learners=0`, `cuda:<local_gpu_idx>`, an index into the
    visible GPUs; both as RLlib's `get_device` picks them. With `num_learners > 0` the
    driver's Learner is a copy that is never trained (it gives checkpoints their layout),
    so it stays on the CPU and the driver needs no GPU.

    Raises:
        ValueError: A GPU is asked for but torch sees none, or `local_gpu_idx` is not one
            of the visible GPUs. (RLlib fails with a bare AssertionError in the local case
            and leaves a remote Learner's actor pending for a GPU that never comes; rlmod
            names the setting and the fix.)
    """
    if float(config.num_gpus_per_learner) == 0 or (config.num_learners > 0 and not remote):
        return CPU
    where = "this remote Learner's Ray actor" if remote else "this process"
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build of torch"
        raise ValueError(
            f"num_gpus_per_learner={config.num_gpus_per_learner} puts the Learner on a "
            f"GPU, but torch.cuda.is_available() is False in {where} (torch "
            f"{torch.__version__}, {build}). Set .learners(num_gpus_per_learner=0) to "
            "train on the CPU, or run on a machine with an NVIDIA GPU and a CUDA build "
            "of torch."
        )
    index = 0 if remote else int(config.local_gpu_idx)
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"local_gpu_idx={index} names a GPU, but only {count} are visible in {where} "
            "(an index into CUDA_VISIBLE_DEVICES); set .learners(local_gpu_idx=...) to one "
            f"of 0..{count - 1}."
        )
    return torch.device("cuda", index)


def cpu_tensors(tree: StateValue) -> StateValue:
    """`tree` (nested dicts/lists/tuples) with every tensor moved to the CPU: what a
    Learner on a GPU sends over a process boundary (a CUDA tensor unpickled in a process
    without that GPU fails)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: cpu_tensors(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(cpu_tensors(v) for v in tree)
    return tree
