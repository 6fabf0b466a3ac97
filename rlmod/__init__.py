"""rlmod: reinforcement learning where one config describes every module as a spec.

EnvRunners build inference-only modules and sample episodes; Learners build full modules,
turn episodes into batches and update them; the Algorithm wires these and reports.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "register_env"]


def __getattr__(name: str) -> Any:
    """`rlmod.register_env`, imported on first use: importing rlmod (and `rlmod --help`)
    then does not import torch, which takes seconds."""
    if name == "register_env":
        from rlmod.env.registry import register_env

        return register_env
    raise AttributeError(f"module 'rlmod' has no attribute {name!r}")
