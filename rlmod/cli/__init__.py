"""The `rlmod` command: train, evaluate, record, export, plot and compare runs from the shell.

Entry point `rlmod = "rlmod.cli:main"`. One small module per subcommand (train.py,
evaluate.py, record.py, export.py, plot.py, compare.py), with what they share beside them: the config
(settings.py), env forms (envs.py), options (arguments.py), errors (errors.py). Nothing here
imports torch until a subcommand runs, so `rlmod --help` is fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rlmod.cli.errors import EXIT_USAGE, CLIError
from rlmod.cli.settings import build_config

__all__ = ["CLIError", "build_config", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `rlmod ARGS...`; returns the exit code (argparse exits itself on --help and on
    malformed arguments)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="rlmod: %(levelname)s: %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except CLIError as e:
        message = " ".join(str(e).split())  # one line, whatever the library wrote
        print(f"rlmod {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE


def _build_parser() -> argparse.ArgumentParser:
    from rlmod import __version__
    from rlmod.cli import compare, evaluate, export, plot, record, train

    parser = argparse.ArgumentParser(
        prog="rlmod",
        description="rlmod: reinforcement learning where one config describes "
        "every module as a spec. EnvRunners sample, Learners train.",
    )
    parser.add_argument("--version", action="version", version=f"rlmod {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="Log at INFO level.")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module in (train, evaluate, record, export, plot, compare):
        module.add_parser(commands)
    return parser
