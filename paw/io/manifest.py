"""Provenance JSON written into every PAW output folder.

It holds the PAW version, the command line and the inputs (paths with file sizes), and no clock
time, so that the same inputs and seed give byte-identical folders.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from paw import __version__


def command_line() -> str:
    """The command line as the user typed it (``paw transfer-lora ...``), for the provenance JSON.

    Library pipelines record it when their caller passes no ``command``: a pipeline run by
    ``paw demo`` or the benchmark thus names the command that started it.
    """
    return " ".join(shlex.quote(a) for a in ["paw", *sys.argv[1:]])


def describe_input(spec: str | Path) -> dict[str, Any]:
    """``{'path': ..., 'bytes': total size}`` for a file or folder; cheap even for 8B models."""
    path = Path(spec)
    if path.is_dir():
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    elif path.exists():
        size = path.stat().st_size
    else:
        return {"path": str(spec)}
    return {"path": str(spec), "bytes": size}


def dumps(data: Any) -> str:
    """Deterministic JSON text (sorted keys, fixed indent, trailing newline)."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def write_json(path: str | Path, data: Any) -> None:
    Path(path).write_text(dumps(data), encoding="utf-8")


def write_manifest(folder: str | Path, filename: str, *, command: str, inputs: dict[str, Any],
                   **fields: Any) -> Path:
    """Write ``folder/filename`` with ``paw_version``, ``command``, ``inputs`` and ``fields``."""
    data = {"paw_version": __version__, "command": command, "inputs": inputs, **fields}
    out = Path(folder) / filename
    write_json(out, data)
    return out
