"""What every `rlmod` subcommand shares: the one-line error and the exit codes.

Used by the subcommands in `rlmod.cli`; `rlmod.cli.main` prints a CLIError as one line.
"""

from __future__ import annotations

EXIT_OK, EXIT_NOT_SOLVED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


class CLIError(Exception):
    """A mistake on the command line: printed as one `error:` line, exit code 2."""
