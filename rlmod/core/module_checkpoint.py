"""One directory per module in a MultiRLModule checkpoint, as RLlib lays it out.

    rl_module/metadata.json     class (MultiRLModule), "module_ids", and "components": the
                                module directories
    rl_module/<module_id>/      one module's own checkpoint, the same files
                                `RLModule.save_to_path` writes: metadata.json (its class
                                and spec) and state.json + state.safetensors (its weights)

So a module's directory is real: copied out alone, `RLModule.from_checkpoint(dir)` builds
and loads it, and `algo.restore_from_path(dir, component="learner_group/learner/
rl_module/<module_id>")` restores it into a running Algorithm, as in RLlib.

Checkpoints written before this layout (rlmod 0.x up to main at b7e79a7: no "module_ids"
in rl_module/metadata.json) hold every module's weights in one `rl_module/state.safetensors`,
keys per module, and the specs in "module_specs"; they still load, and
`.../rl_module/<module_id>` paths are resolved into them as before.

Directory names: a module ID made only of ASCII letters, digits, `_` and `-` is its own
directory name (RLlib's layout); any other character is written `%XX` (its UTF-8 bytes), so
no ID can name a path outside its directory (`..`, `/`), a hidden file or a state file.
Names over 200 bytes are cut and end in `~` and a hash of the ID. The name is always derived
from the ID, never read from the checkpoint.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

from rlmod.errors import CheckpointError
from rlmod.utils.checkpoints import METADATA_FILE, StateDict, read_metadata
from rlmod.utils.state_files import STATE_JSON, STATE_TENSORS, read_state

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_MAX_NAME = 200


def module_dir_name(module_id: str) -> str:
    """The directory of module `module_id` inside a MultiRLModule checkpoint (one path
    segment; distinct IDs get distinct names)."""
    if _PLAIN.fullmatch(module_id) and len(module_id) <= _MAX_NAME:
        return module_id
    raw = module_id.encode("utf-8", "surrogatepass")
    name = "".join(
        c
        if _PLAIN.fullmatch(c)
        else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in module_id
    )
    if not name:
        return "%"  # the empty ID
    if len(name) > _MAX_NAME:
        name = f"{name[:150]}~{hashlib.sha256(raw).hexdigest()[:32]}"
    return name


def stored_module_ids(directory: Path, meta: Mapping[str, object]) -> list[str] | None:
    """The module IDs of a MultiRLModule checkpoint written with one directory per module,
    or None for any other directory (a single module's, or the older one-file layout)."""
    ids = meta.get("module_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(m, str) for m in ids):
        raise CheckpointError(
            f"{directory / METADATA_FILE}: field 'module_ids' must be a list of strings; the "
            "file is corrupt or was edited."
        )
    return ids


def module_directory(directory: Path, module_id: str) -> Path:
    """The directory of module `module_id` in the MultiRLModule checkpoint `directory`,
    which must exist (CheckpointError naming both otherwise)."""
    sub = directory / module_dir_name(module_id)
    if not sub.is_dir():
        raise CheckpointError(
            f"{sub} is missing or not a directory, but {directory / METADATA_FILE} lists "
            f"module {module_id!r}: the checkpoint is incomplete. Copy the module's directory "
            "back from the checkpoint it came from, or save again."
        )
    return sub


def stored_module_spec(module_dir: Path) -> dict[str, object] | None:
    """The spec dict in a module directory's metadata.json (checked by `read_metadata`),
    None if it holds none."""
    spec = read_metadata(module_dir).get("module_spec")
    return spec if isinstance(spec, dict) else None


def read_module_state(module_dir: Path) -> StateDict:
    """The weights in a module directory of a MultiRLModule checkpoint (metadata checked
    first). Saves always write its `state.safetensors`, so one missing is named."""
    read_metadata(module_dir)
    if not (module_dir / STATE_TENSORS).exists() and not (module_dir / STATE_JSON).exists():
        raise CheckpointError(
            f"{module_dir / STATE_TENSORS} is missing: the module's weights are gone, the "
            "checkpoint is incomplete. Copy the file back from the checkpoint it came from."
        )
    return read_state(module_dir)


def make_module_dir(directory: Path, module_id: str) -> Path:
    """Creates the directory of `module_id` during a save; two IDs that differ only in
    case (e.g. "P0" and "p0") on a file system that ignores case are a CheckpointError (the
    save is atomic, so the previous checkpoint stays)."""
    sub = directory / module_dir_name(module_id)
    try:
        sub.mkdir()
    except FileExistsError:
        raise CheckpointError(
            f"Cannot save module {module_id!r}: its directory {sub.name!r} already exists in "
            f"{directory}, so another module ID names the same directory on this file system "
            "(it ignores case). Rename one of the modules."
        ) from None
    return sub
