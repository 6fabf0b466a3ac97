"""Which checkpoint a path given to `rlmod` names: the directory itself, or a run dir's
newest.

Used by `rlmod train --resume`, `rlmod evaluate` and `rlmod record`.
"""

from __future__ import annotations

from pathlib import Path

from rlmod.cli.errors import CLIError


def checkpoint_path(path: Path) -> Path:
    """A checkpoint directory itself (RUN_DIR/best included), or the newest complete
    checkpoint of a run dir."""
    from rlmod.utils import checkpoints

    found = checkpoints.resolve_checkpoint(path)
    if not (found / checkpoints.METADATA_FILE).is_file():
        raise CLIError(
            f"{path} is neither a checkpoint (no metadata.json) nor a run dir with complete "
            "checkpoints in checkpoints/."
        )
    return found
