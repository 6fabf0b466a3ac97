"""argparse types and the options several `rlmod` subcommands share (--trust,
--gym-packages).

Used by the subcommand modules of `rlmod.cli` when they build their parsers.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

MAX_SEED = 2**64 - 1
"""The largest seed torch takes (the same bound as config.debugging(seed=...))."""


def add_trust_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="PACKAGE",
        type=package_name,
        help="A package whose classes and functions a config or checkpoint may name, besides "
        "rlmod (repeatable). Anything else is refused before it is imported.",
    )


def add_gym_packages_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gym-packages",
        nargs="+",
        default=[],
        metavar="PACKAGE",
        type=package_name,
        help="Packages to import before the env is made, so that the gymnasium IDs they "
        "register exist (e.g. ale_py for ALE/Pong-v5), as rl-baselines3-zoo's option.",
    )


def count(low: int, high: int | None = None) -> Any:
    """argparse type: an int >= low (and <= high if given; argparse reports the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {value}")
        return value

    return parse


def dir_path(text: str) -> Path:
    """argparse type: a non-empty path (an empty one, e.g. an unset shell variable, would
    mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (pass a directory, e.g. runs/my-run)")
    return Path(text)


def package_name(text: str) -> str:
    """argparse type: a dotted package name such as mypkg or mypkg.envs."""
    if not text or not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"expected a package name such as mypkg or mypkg.envs, got {text!r}"
        )
    return text


def finite(*, positive: bool = False) -> Any:
    """argparse type: a finite float (> 0 if `positive`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or (positive and value <= 0):
            raise argparse.ArgumentTypeError(
                f"must be a finite number{' > 0' if positive else ''}, got {text!r}"
            )
        return value

    return parse
