"""Provenance JSON written into every PAW output folder.

It holds the PAW version, the command (what produced the folder) and the inputs (paths with file
sizes), and no clock time, so that the same inputs and seed give byte-identical folders.

The command is never read from ``sys.argv``, which belongs to whatever process hosts PAW (pytest,
a notebook, a script). The CLI records the arguments it parsed (:func:`cli_invocation`,
:func:`command_line`); a pipeline called from Python records itself and its arguments
(:func:`records_call`): ``paw.transfer.folder_pipeline.transfer_adapter(adapter='lora', ..., method='auto')``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import inspect
import json
import os
import shlex
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from paw import __version__
from paw.io.json_file import read_json

_CLI_ARGS: ContextVar[tuple[str, ...] | None] = ContextVar("paw_cli_args", default=None)


@contextlib.contextmanager
def cli_invocation(args: Sequence[str]) -> Iterator[None]:
    """Inside this block :func:`command_line` is ``paw ARGS`` (``paw.cli.main`` wraps each run in it)."""
    token = _CLI_ARGS.set(tuple(str(a) for a in args))
    try:
        yield
    finally:
        _CLI_ARGS.reset(token)


def command_line() -> str:
    """The command being run, as typed (``paw transfer-lora --adapter lora ...``), quoted for a shell.

    Only the CLI calls this; outside :func:`cli_invocation` there is no command line to report.
    """
    args = _CLI_ARGS.get()
    if args is None:
        return "paw (not run through paw.cli.main: arguments unknown)"
    return " ".join(shlex.quote(a) for a in ("paw", *args))


def call_text(func, arguments: dict[str, Any]) -> str:
    """``'paw.bpe.pipeline.train_files(options=TrainOptions(files=['a.txt'], vocab_size=300, ...), ...)'``: a call,
    readable and stable.

    Paths show as strings, enums as their value, dataclasses field by field, other objects by
    their type only (``<Tokenizer>``), so the text carries no memory address.
    """
    shown = ", ".join(f"{k}={_show(v)}" for k, v in arguments.items())
    return f"{func.__module__}.{func.__qualname__}({shown})"


def records_call(func):
    """Decorate a pipeline whose keyword ``command=None`` means "record this call".

    A caller that passes ``command`` (the CLI passes :func:`command_line`) keeps it; any other call
    records the function and every argument, defaults included.
    """
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if kwargs.get("command") is None:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            kwargs["command"] = call_text(func, {k: v for k, v in bound.arguments.items() if k != "command"})
        return func(*args, **kwargs)

    return wrapper


def _show(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return _show(value.value)
    if isinstance(value, (str, int, float, bool, type(None))):
        return repr(value)
    if isinstance(value, Path):
        return repr(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(f"{f.name}={_show(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({fields})"
    return f"<{type(value).__name__}>"


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
    """Write ``data`` as JSON in one step: a reader (another process on the same work folder) sees the old
    file or the new one, never half of it; a failed write leaves the old file as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def rewrite_json(path: str | Path, fix) -> bool:
    """Write ``fix(contents)`` over the JSON file ``path`` where it differs; True when written. A file that
    needs nothing is left byte for byte."""
    config = read_json(path)
    fixed = fix(config)
    if fixed == config:
        return False
    write_json(path, fixed)
    return True


def write_manifest(folder: str | Path, filename: str, *, command: str, inputs: dict[str, Any],
                   **fields: Any) -> Path:
    """Write ``folder/filename`` with ``paw_version``, ``command``, ``inputs`` and ``fields``."""
    data = {"paw_version": __version__, "command": command, "inputs": inputs, **fields}
    out = Path(folder) / filename
    write_json(out, data)
    return out
