"""State files: a nested state dict as one JSON tree plus one safetensors file, and back.

Used by `rlmod.utils.checkpoints` for every checkpoint component. Tensors and numpy arrays
go to `state.safetensors`, everything else (numbers, strings, lists, dicts) to
`state.json`, where each array is replaced by a reference to its safetensors key. Reading
uses json and the safetensors library only: no pickle, no `torch.load`, no `eval`, so a
state file from a stranger runs no code. Parts of a tree (one module of a thousand) load
alone: only the keys under that part are read from disk.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlmod.errors import CheckpointError

STATE_JSON = "state.json"
STATE_TENSORS = "state.safetensors"
_TENSOR, _NDARRAY = "__tensor__", "__ndarray__"

_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def _escape(part: str) -> str:
    """A dict key as one segment of a '/'-joined tensor key (JSON-pointer escaping)."""
    return part.replace("~", "~0").replace("/", "~1")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def flatten_state(state: Any, prefix: str = "") -> tuple[Any, dict[str, torch.Tensor]]:
    """The JSON tree of `state` (arrays replaced by references) and the arrays by key.

    Raises TypeError naming the path of a value that is neither JSON-able nor an array.
    """
    tensors: dict[str, torch.Tensor] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            tensors[path] = value
            return {_TENSOR: path}
        if isinstance(value, np.ndarray):
            # Writable: arrays from Ray's object store are read-only (torch warns on those).
            tensors[path] = torch.from_numpy(np.require(value, requirements=("C", "W")))
            return {_NDARRAY: path}
        if isinstance(value, np.generic):
            return value.item()
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, Mapping):
            for k in value:
                if not isinstance(k, str):
                    raise TypeError(f"State key {k!r} at {path or '/'} is not a string.")
            if len(value) == 1 and next(iter(value)) in (_TENSOR, _NDARRAY):
                # read back, it would be taken for a reference to a stored array
                raise TypeError(
                    f"State dict at {path or '/'} has the one key {next(iter(value))!r}, "
                    "which state files reserve for array references."
                )
            return {
                k: walk(v, f"{path}/{_escape(k)}" if path else _escape(k)) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [walk(v, f"{path}/{i}" if path else str(i)) for i, v in enumerate(value)]
        raise TypeError(
            f"State value at {path or '/'} is a {type(value).__name__}; states hold tensors, "
            "numpy arrays, numbers, strings, lists and dicts only (no pickled objects)."
        )

    return walk(state, prefix), tensors


def write_safetensors(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """Writes `tensors` in the safetensors format (8-byte header size, JSON header, raw
    little-endian data). Durability is the caller's: `checkpoints.atomic_directory` flushes
    the whole directory at once before renaming it into place.

    Written here rather than with `safetensors.torch.save_file` because that one copies
    every tensor into a bytes object first: with 1,000 modules (12,000 tensors) this writer
    takes 0.6x its time and stays within torch.save's. Files are read back with the
    safetensors library itself, which checks the header against the file size.
    """
    header: dict[str, Any] = {}
    parts: list[torch.Tensor] = []
    offset = 0
    for key, tensor in tensors.items():
        t = tensor.detach().to("cpu").contiguous()
        if t.dtype not in _DTYPES:
            raise TypeError(f"Tensor {key!r} has dtype {t.dtype}, which safetensors cannot store.")
        nbytes = t.numel() * t.element_size()
        header[key] = {
            "dtype": _DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
        parts.append(t)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format aligns the data to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in parts:
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy().data)


def write_json(path: Path, data: Any, *, indent: int | None = None) -> None:
    """Writes JSON (flushed to disk with its directory by `checkpoints.atomic_directory`).
    Compact by default, encoded by `json.dumps` in one piece: `json.dump` (and any
    `indent`) runs json's pure-Python encoder, 3x as slow on a checkpoint's metadata."""
    text = json.dumps(data, indent=indent, separators=None if indent else (",", ":"))
    with open(path, "w") as f:
        f.write(text)


def read_json(path: Path, *, expect: type = dict) -> Any:
    """Reads a JSON file; CheckpointError naming the file if it is missing, not JSON, or
    not of the `expect`ed type."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} is missing: this is not a complete rlmod checkpoint directory (saves "
            "write it last, so a directory without it is an interrupted save or another "
            "format)."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); the file is corrupt.") from None
    except OSError as e:  # a directory, a permission, a device error
        raise CheckpointError(f"{path} cannot be read ({e.strerror or e}).") from None
    except RecursionError:
        raise CheckpointError(
            f"{path} nests deeper than Python can read; no checkpoint rlmod writes does, so "
            "the file is corrupt or crafted."
        ) from None
    if not isinstance(data, expect):
        raise CheckpointError(
            f"{path} holds a {type(data).__name__}, expected a {expect.__name__}; the file is "
            "corrupt or from another program."
        )
    return data


def write_state(directory: Path, state: Mapping[str, Any]) -> None:
    """Writes `state` as `state.json` + `state.safetensors` into `directory` (either file
    only if it has something to hold)."""
    if not state:
        return
    tree, tensors = flatten_state(state)
    if tensors:
        write_safetensors(directory / STATE_TENSORS, tensors)
    write_json(directory / STATE_JSON, tree)


def write_tensors(directory: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """Writes a flat name -> tensor state (one module's weights) as `state.safetensors`
    alone, without a `state.json`: one file fewer per module, which with 1,000 modules is
    1,000 files fewer to create and read. `read_state` reads it back as that flat dict.
    Written even when empty, so a missing file is always a damaged checkpoint."""
    write_safetensors(directory / STATE_TENSORS, {_escape(k): v for k, v in tensors.items()})


def read_state(
    directory: Path, *, select: Iterable[str] | None = None, skip_prefixes: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Reads what `write_state` (or `write_tensors`: a `state.safetensors` without a
    `state.json`, read as a flat dict of tensors) wrote.

    Args:
        directory: The component directory.
        select: Top-level keys to read (default: all); only their arrays are loaded.
        skip_prefixes: Second-level keys starting with these are left out and not loaded
            (e.g. a module's training-only layers for an inference-only load).
    """
    if not (directory / STATE_JSON).exists() and (directory / "metadata.json").exists():
        if (directory / STATE_TENSORS).exists():  # write_tensors: a flat dict of tensors
            return _read_flat(directory, select)
        tree = {}  # a component with no state of its own (write_state wrote nothing)
    else:
        tree = read_json(directory / STATE_JSON)
    try:
        return _load_tree(directory, tree, select, skip_prefixes)
    except RecursionError:  # a tree json could read, nested too deep to walk
        raise CheckpointError(
            f"{directory / STATE_JSON} nests deeper than Python can walk; no checkpoint rlmod "
            "writes does, so the file is corrupt or crafted."
        ) from None


def _load_tree(
    directory: Path,
    tree: dict[str, Any],
    select: Iterable[str] | None,
    skip_prefixes: tuple[str, ...],
) -> dict[str, Any]:
    """`read_state` after the JSON is read: the selected parts, arrays loaded."""
    if select is not None:
        select = list(select)
        missing = [k for k in select if k not in tree]
        if missing:
            raise CheckpointError(
                f"{directory / STATE_JSON} has no entry {missing[0]!r}; it has {sorted(tree)[:10]}."
            )
        tree = {k: tree[k] for k in select}
    if skip_prefixes:
        tree = {
            k: {n: v for n, v in sub.items() if not n.startswith(skip_prefixes)}
            if isinstance(sub, dict)
            else sub
            for k, sub in tree.items()
        }
    file = directory / STATE_TENSORS
    if not _has_references(tree):
        return _unflatten(tree, None)
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ImportError("Reading checkpoints needs safetensors: pip install safetensors") from e
    try:
        with safe_open(str(file), framework="pt") as f:
            available = set(f.keys())

            def load(key: str) -> torch.Tensor:
                if key not in available:
                    raise CheckpointError(
                        f"{file} has no tensor {key!r}, which {directory / STATE_JSON} refers "
                        "to; the two files come from different saves or one is corrupt."
                    )
                return f.get_tensor(key)

            return _unflatten(tree, load)
    except FileNotFoundError:
        raise CheckpointError(f"{file} is missing; the checkpoint is incomplete.") from None
    except SafetensorError as e:
        raise CheckpointError(
            f"{file} is not a valid safetensors file ({e}); it is truncated, corrupt, or "
            "not a safetensors file at all (rlmod never loads pickles)."
        ) from None


def _read_flat(directory: Path, select: Iterable[str] | None) -> dict[str, Any]:
    """What `write_tensors` wrote: every tensor of `state.safetensors` by its name."""
    file = directory / STATE_TENSORS
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as f:
            state = {_unescape(k): f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    except SafetensorError as e:
        raise CheckpointError(
            f"{file} is not a valid safetensors file ({e}); it is truncated, corrupt, or "
            "not a safetensors file at all (rlmod never loads pickles)."
        ) from None
    if select is not None:
        missing = [k for k in select if k not in state]
        if missing:
            raise CheckpointError(f"{file} has no tensor {missing[0]!r}.")
        state = {k: state[k] for k in select}
    return state


def _has_references(tree: Any) -> bool:
    if isinstance(tree, dict):
        if len(tree) == 1 and next(iter(tree)) in (_TENSOR, _NDARRAY):
            return True
        return any(_has_references(v) for v in tree.values())
    if isinstance(tree, list):
        return any(_has_references(v) for v in tree)
    return False


def _unflatten(tree: Any, load: Any) -> Any:
    if isinstance(tree, dict):
        if len(tree) == 1:
            ((key, value),) = tree.items()
            if key == _TENSOR and isinstance(value, str):
                return load(value)
            if key == _NDARRAY and isinstance(value, str):
                return load(value).numpy()
        return {k: _unflatten(v, load) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_unflatten(v, load) for v in tree]
    return tree
