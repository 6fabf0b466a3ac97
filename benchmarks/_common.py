"""Helpers shared by the benchmark scripts: the commit measured and a table printer."""

from __future__ import annotations

import os
import platform
import subprocess


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, cwd=os.path.dirname(__file__))
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True,
                               cwd=os.path.dirname(__file__)).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(title: str) -> None:
    print(f"# {title}")
    print(f"commit {commit()}, python {platform.python_version()}, {os.cpu_count()} cores")


def table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(f"{r.get(c, '')}") for r in rows)) for c in columns}
    print("| " + " | ".join(c.ljust(widths[c]) for c in columns) + " |")
    print("|" + "|".join("-" * (widths[c] + 2) for c in columns) + "|")
    for r in rows:
        print("| " + " | ".join(f"{r.get(c, '')}".ljust(widths[c]) for c in columns) + " |")
