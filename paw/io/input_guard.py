"""Inputs are read-only: every path a run reads is recorded, and an output over one is refused.

Inputs are the ``inputs=`` a writer is given and every path this run resolved as a model, adapter or
tokenizer (:func:`note_input`, inside an :func:`input_scope`). An output that equals, contains or lies
inside an input, or holds a hard link of an input file, is refused with or without ``overwrite``
(:func:`check_not_input`, which every writer of :mod:`paw.io.atomic` calls before and after its block).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from stat import S_ISDIR, S_ISREG

from paw.errors import PawError

_scopes: list[set[str]] = []  # real paths read by the runs in progress, innermost last (see input_scope)


@contextlib.contextmanager
def input_scope() -> Iterator[None]:
    """Collect every input this block resolves; outputs written inside it may not touch them.

    The CLI runs each command in one scope; library pipelines may open their own. A nested scope
    (a command run from inside another, as the benchmark does) starts empty, so one step's inputs
    do not forbid a later step from rewriting its own scratch files.
    """
    _scopes.append(set())
    try:
        yield
    finally:
        _scopes.pop()


def note_input(path: str | os.PathLike) -> None:
    """Record ``path`` as an input of the run in progress (no effect outside an :func:`input_scope`)."""
    if _scopes:
        _scopes[-1].add(os.path.realpath(path))


def check_not_input(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Refuse an output that equals, contains or lies inside an input (``inputs`` or the scope's).

    Paths are compared after resolving symbolic links, and a hard link is the same file: an
    output (or a file inside an output folder) with the device and inode of an input file, or of a
    file inside an input folder, is refused like the input itself.
    """
    out = os.path.realpath(path)
    raws = {*(os.path.realpath(p) for p in inputs if p is not None and str(p)), *(_scopes[-1] if _scopes else ())}
    for raw in raws:
        if out == raw or _same_file(out, raw):
            how = "is"
        elif raw.startswith(out.rstrip(os.sep) + os.sep):
            how = "contains"
        elif out.startswith(raw.rstrip(os.sep) + os.sep):
            how = "lies inside"
        else:
            continue
        raise PawError(f"the output {how} the input {raw}; PAW never modifies its inputs, "
                       "choose another output path", path=path)
    _check_hard_links(path, out, raws)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_hard_links(path, out: str, inputs: Iterable[str]) -> None:
    """Refuse an output holding a hard link of an input file (one inode under two names)."""
    linked = {(dev, ino): name for name, (dev, ino, links) in _files(out, follow=False) if links > 1}
    if not linked:  # only a file with more than one name can be a hard link of an input: the common case stops here
        return
    for raw in sorted(inputs):
        for name, (dev, ino, _) in _files(raw, follow=True):
            hit = linked.get((dev, ino))
            if hit is not None:
                how = "is" if hit == out else f"contains {hit}, which is"
                raise PawError(f"the output {how} a hard link of the input {name} (the same file under another "
                               "name); PAW never modifies its inputs, choose another output path", path=path)


def _files(root: str, *, follow: bool) -> Iterator[tuple[str, tuple[int, int, int]]]:
    """``(path, (st_dev, st_ino, st_nlink))`` of the regular files at or under ``root`` (none if absent)."""
    stat = os.stat if follow else os.lstat
    try:
        top = stat(root)
    except OSError:
        return
    if not S_ISDIR(top.st_mode):
        if S_ISREG(top.st_mode):
            yield root, (top.st_dev, top.st_ino, top.st_nlink)
        return
    for folder, _dirs, names in os.walk(root):  # an input's symlinked files count (a hub snapshot's blobs)
        for name in names:
            full = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                st = stat(full)
                if S_ISREG(st.st_mode):
                    yield full, (st.st_dev, st.st_ino, st.st_nlink)
