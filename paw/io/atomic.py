"""Write a folder or file atomically: build it beside its destination, then rename into place.

A crash or a bad input half-way leaves only a hidden temporary folder behind (removed on error),
never an output that looks finished.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from paw.errors import PawError


def check_output(path: str | Path, *, overwrite: bool) -> Path:
    """Refuse an existing output unless ``overwrite``; call before any heavy work."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise PawError("output already exists (pass --overwrite to replace it)", path=path)
    return path


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder that becomes ``path`` when the block succeeds."""
    path = check_output(path, overwrite=overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace(tmp, path)


def _replace(tmp: Path, path: Path) -> None:
    if path.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.replace(path, trash / path.name)
        os.replace(tmp, path)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, path)


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", **kwargs) -> Iterator:
    """Open a temporary file beside ``path``; it replaces ``path`` when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
