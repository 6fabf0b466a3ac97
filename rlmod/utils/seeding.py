"""Seeding: one call that seeds numpy's legacy RNG, Python's and torch's from a config seed."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int | None) -> None:
    """Seeds random, numpy and torch; does nothing for None."""
    if seed is None:
        return
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def derive_seed(seed: int | None, *offsets: int) -> int | None:
    """A seed for a sub-component (EnvRunner i, its sub-env j) that differs from the base."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, *offsets]).generate_state(1)[0])
