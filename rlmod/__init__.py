"""rlmod: reinforcement learning where one config describes every module as a spec.

EnvRunners build inference-only modules and sample episodes; Learners build full modules,
turn episodes into batches and update them; the Algorithm wires these and reports.
"""

from rlmod.env.registry import register_env

__version__ = "0.1.0"

__all__ = ["__version__", "register_env"]
