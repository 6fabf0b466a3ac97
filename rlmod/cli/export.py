"""`rlmod export RUN_DIR --format onnx|torch-export`: a checkpoint's greedy policy as one
file for serving outside Python or outside rlmod.

Uses `rlmod.algorithms.inference.InferencePolicy.export` (which silences the exporters' own
chatter and keeps small models' weights inside the .onnx file).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlmod.cli import arguments as a
from rlmod.cli.errors import EXIT_OK, CLIError

FORMATS = {"onnx": ("onnx", ".onnx"), "torch-export": ("torch", ".pt2")}
"""CLI format -> (InferencePolicy.export's format, file suffix)."""


def add_parser(commands: Any) -> None:
    export = commands.add_parser(
        "export",
        help="Write a checkpoint's greedy policy as an ONNX or torch.export file.",
        description="Write the greedy policy of a single-agent checkpoint (observation as "
        "the module sees it, after the env-to-module connectors, -> env action) as an ONNX "
        "model (onnxruntime) or a torch.export program (torch.export.load). Its input is "
        "named 'obs', with any batch size.",
        epilog="Example: rlmod export runs/cartpole --format onnx",
    )
    export.set_defaults(command="export", run=run)
    export.add_argument(
        "checkpoint",
        type=Path,
        metavar="RUN_DIR",
        help="A run dir (its newest checkpoint) or a checkpoint directory (e.g. RUN_DIR/best).",
    )
    export.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default="onnx",
        help="onnx (needs pip install onnx onnxscript) or torch-export (default: onnx).",
    )
    export.add_argument(
        "--output",
        type=Path,
        metavar="PATH",
        help="The file to write (default: RUN_DIR/exported/<checkpoint name>.onnx or .pt2). "
        "An existing file is not overwritten.",
    )
    a.add_trust_argument(export)


def default_output(checkpoint: Path, suffix: str) -> Path:
    """RUN_DIR/exported/<checkpoint name><suffix>, for RUN_DIR/checkpoints/NAME and
    RUN_DIR/best alike."""
    parent = checkpoint.parent
    run_dir = parent.parent if parent.name == "checkpoints" else parent
    return run_dir / "exported" / f"{checkpoint.name}{suffix}"


def run(args: argparse.Namespace) -> int:
    from rlmod.algorithms.inference import InferencePolicy
    from rlmod.cli.checkpoint_paths import checkpoint_path
    from rlmod.errors import CheckpointError

    path = checkpoint_path(args.checkpoint)
    fmt, suffix = FORMATS[args.format]
    output = args.output or default_output(path, suffix)
    if output.exists():
        raise CLIError(f"{output} already exists; rlmod does not overwrite it. Pass --output.")
    try:
        policy = InferencePolicy.from_checkpoint(path, trusted_modules=args.trust)
        output.parent.mkdir(parents=True, exist_ok=True)
        policy.export(output, format=fmt)
    except (CheckpointError, ValueError, TypeError, ImportError) as e:
        raise CLIError(str(e)) from None
    size_kib = output.stat().st_size / 1024
    print(f"Exported the greedy policy of {path} to {output} ({size_kib:,.0f} KiB).")
    if fmt == "onnx":
        print(
            f"  onnxruntime.InferenceSession({str(output)!r}).run(None, {{'obs': obs}})[0] "
            "-> actions"
        )
    else:
        print(f"  torch.export.load({str(output)!r}).module()(obs) -> actions")
    print(
        "  obs: float32 [batch, ...], as the module sees it (after the env-to-module connectors)."
    )
    return EXIT_OK
