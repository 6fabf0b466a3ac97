"""Any env from the command line: what the text of --env means, and --gym-packages.

Used by `rlmod train` (through `rlmod.cli.settings.build_config`) and by the subcommands
that make envs from checkpoints (evaluate, record). Forms of --env:

- `CartPole-v1`, `ALE/Pong-v5`, a name registered with `rlmod.register_env` or with
  `gymnasium.register` by a package given to --gym-packages;
- `module:Env-v0`, gymnasium's own syntax: gymnasium imports `module` (which registers
  `Env-v0`) when the env is made. Typed on the command line, it is the user's choice; a
  config or checkpoint that names it later loads only with the module trusted;
- `module:Class` (or `module:make_env`), an import path, only with `--trust module`: it is
  imported and called, as any class a config names.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from typing import Any

from rlmod.cli.errors import CLIError

GYM_ID = re.compile(r"^(?:[\w:.-]+/)?[\w:.-]+?(?:-v\d+)$|/")
"""A gymnasium ID after the colon: versioned (`Env-v0`) or namespaced (`ns/Env`)."""


def env_setting(text: str, *, trusted_modules: Sequence[str] = ()) -> tuple[Any, tuple[str, ...]]:
    """The `env` setting for `--env text`, and the packages trusted while it is decoded."""
    trusted = tuple(trusted_modules)
    if ":" not in text:
        return text, trusted
    module, _, name = text.partition(":")
    if not module or not name or not all(p.isidentifier() for p in module.split(".")):
        raise CLIError(
            f"--env {text!r}: expected an env ID (CartPole-v1), gymnasium's module:Env-v0, "
            "or an import path module:Class with --trust module."
        )
    if GYM_ID.search(name):  # gymnasium's module:ID: the user typed the module to import
        return text, (*trusted, module)
    top = module.split(".")[0]
    if not any(module == t or module.startswith(f"{t}.") for t in trusted):
        raise CLIError(
            f"--env {text!r} names a class or function by import path, and rlmod imports "
            f"code only from packages you trust: add --trust {top}. (If {name} is a gymnasium "
            f"ID that {module} registers, give its version, --env {module}:{name}-v0, or "
            f"pass --gym-packages {module} --env {name}-v0.)"
        )
    return {"__import__": text}, trusted


def import_gym_packages(packages: Sequence[str]) -> None:
    """Imports each of --gym-packages (they register their envs with gymnasium)."""
    for package in packages:
        try:
            importlib.import_module(package)
        except ImportError as e:
            raise CLIError(
                f"--gym-packages {package}: cannot import it ({e}); install it into this "
                "Python environment first."
            ) from None
