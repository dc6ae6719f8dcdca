"""Write outputs atomically, never over an input, one writer at a time.

An output (a folder, a file, or a set of sibling files such as ``OUT.model`` + ``OUT.vocab``) is
built in one hidden staging folder beside it, ``.NAME.tmp-<pid>-<random>``, and moved into place
when the block succeeds. What this guarantees:

- **Inputs are read-only.** An output that equals, contains or lies inside an input is refused,
  with or without ``overwrite``. Inputs are the ``inputs=`` given and every path this run resolved
  as a model, adapter or tokenizer (:mod:`paw.io.input_guard`).
- **One writer per output.** The existence check and the moves run under an exclusive lock
  (``.NAME.lock``, released by the kernel if the process dies), and the final move refuses to
  replace anything (``renameat2(RENAME_NOREPLACE)``), so a second run aimed at the same output gets
  a clean error instead of silently replacing the first. Only ``overwrite=True`` replaces.
- **kill -9 at any moment** leaves the destination absent, the previous complete output or the new
  one. Before it moves anything the staging folder gets a ``COMMIT`` list; the next run that writes
  the same name finds staging folders of dead runs (their pid gone), puts the previous output back
  if a replacement was cut short, and removes them.
- **Modes like ``cp``.** Every file and folder moved into place has 0666/0777 minus the umask,
  not the private 0600/0700 of temporary files (``safetensors`` writes 0600), so colleagues can
  read a merged model or an adapter under umask 022.
- **No NaN/Inf on disk unless asked.** Before anything moves, every ``.safetensors`` file of the
  output that its writer did not already check tensor by tensor is read back and refused if it
  holds NaN or Inf, naming the file and the tensor, unless the run allows it (``--allow-nonfinite``,
  :mod:`paw.io.finite`). PEFT's ``save_pretrained`` and any future writer are covered too.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from paw.errors import PawError
from paw.io.finite import check_staged_tensors, forget_checked
from paw.io.input_guard import check_not_input

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking, the no-replace move still applies
    fcntl = None

_COMMIT = "COMMIT"
_STAGING = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[^/]+$")


class OutputInUse(PawError):
    """Another live process holds the lock on this output."""


# ---------------------------------------------------------------- before writing

def check_output(path: str | os.PathLike, *, overwrite: bool, inputs: Iterable = ()) -> Path:
    """Refuse an output over an input, or an existing one unless ``overwrite``; call before heavy work.

    Also fails fast when another live run is writing ``path``, and tidies what dead runs left there.
    """
    path = Path(path)
    _check_path(path, inputs)
    if path.parent.is_dir():
        with _locked(path, fail_fast_only=True):  # an unwritable folder is reported when writing starts
            _clean_stale(path.parent, path.name)
    _check_exists(path, overwrite)
    return path


def _check_path(path: Path, inputs: Iterable) -> None:
    check_not_input(path, inputs)
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise PawError(f"cannot create the output: {parent} is a file, not a folder", path=path)
            break
    if len(os.fsencode(path.name)) > 200:
        raise PawError("output file name is too long (over 200 bytes)", path=path)


def _check_exists(path: Path, overwrite: bool) -> None:
    if os.path.lexists(path) and not overwrite:
        raise PawError("output already exists (pass --overwrite to replace it)", path=path)


# ---------------------------------------------------------------- public writers

@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, *, overwrite: bool = False, inputs: Iterable = ()) -> Iterator[Path]:
    """Yield an empty folder that becomes ``path`` when the block succeeds."""
    path = Path(path)
    with atomic_outputs([path], overwrite=overwrite, inputs=inputs) as staging:
        folder = staging / path.name
        folder.mkdir()
        yield folder


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", *, overwrite: bool = True, inputs: Iterable = (),
                **kwargs) -> Iterator:
    """Open a new file that becomes ``path`` when the block succeeds (replacing it unless ``overwrite=False``)."""
    path = Path(path)
    with atomic_outputs([path], overwrite=overwrite, inputs=inputs) as staging:
        with open(staging / path.name, mode, **kwargs) as f:
            yield f


@contextlib.contextmanager
def atomic_outputs(paths: Sequence[str | os.PathLike], *, overwrite: bool = False,
                   inputs: Iterable = ()) -> Iterator[Path]:
    """Yield a staging folder; what the block puts there under the outputs' names is moved into place.

    ``paths`` share one parent folder; the first is the primary output and is moved last, so that
    while it is absent the set counts as not written. Outputs the block did not create are skipped
    (and, with ``overwrite``, an old copy of them is removed so no stale companion is left).
    """
    outputs = [Path(p) for p in paths]
    parent = outputs[0].parent
    if any(p.parent != parent for p in outputs) or len({p.name for p in outputs}) != len(outputs):
        raise ValueError("atomic_outputs: the outputs must be distinct names in one folder")
    inputs = list(inputs)
    for out in outputs:
        _check_path(out, inputs)
    _mkdir(parent, outputs[0])
    with _locked(outputs[0]):
        _clean_stale(parent, outputs[0].name)
        for out in outputs:
            _check_exists(out, overwrite)
        staging = _oserror(outputs[0], lambda: Path(tempfile.mkdtemp(
            prefix=f".{outputs[0].name}.tmp-{os.getpid()}-", dir=parent)))
        try:
            (staging / "new").mkdir()
            yield staging / "new"
            if not os.path.lexists(staging / "new" / outputs[0].name):
                raise ValueError(f"atomic_outputs: the block did not create {outputs[0].name}")
            check_staged_tensors(staging / "new", parent)
            for out in outputs:  # the block may have read more inputs: the check must be current
                _check_path(out, inputs)
                _check_exists(out, overwrite)
            _oserror(outputs[0], lambda: _commit(staging, outputs, overwrite=overwrite))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            forget_checked(staging)


# ---------------------------------------------------------------- commit and recovery

def _commit(staging: Path, outputs: list[Path], *, overwrite: bool) -> None:
    new, old = staging / "new", staging / "old"
    order = [*outputs[1:], outputs[0]]  # companions first, the primary last
    present = [p for p in order if os.path.lexists(new / p.name)]
    old.mkdir()
    (staging / _COMMIT).write_text(json.dumps([p.name for p in order]), encoding="utf-8")
    moved: list[Path] = []
    try:
        for out in [outputs[0], *outputs[1:]]:  # the primary leaves first: a cut-short run reads as absent
            if os.path.lexists(out):
                if not overwrite:
                    _raise_appeared(out)
                os.rename(out, old / out.name)
        for out in present:
            _fix_mode(new / out.name)
            try:
                _rename_noreplace(new / out.name, out)
            except FileExistsError:
                _raise_appeared(out)
            moved.append(out)
    except BaseException:  # put everything back as it was
        for out in moved:
            with contextlib.suppress(OSError):
                os.rename(out, new / out.name)
        _restore(old, outputs[0].parent)
        raise


def _raise_appeared(out: Path):
    raise PawError("output appeared while this run was writing (another program wrote it); this run's "
                   "result was discarded", path=out)


def _restore(old: Path, parent: Path) -> None:
    """Put back outputs that a cut-short replacement had moved aside."""
    for entry in old.iterdir():
        if not os.path.lexists(parent / entry.name):
            os.rename(entry, parent / entry.name)


def _recover(staging: Path, parent: Path) -> None:
    """Undo or finish a dead run's commit, then remove its staging folder."""
    commit = staging / _COMMIT
    if commit.exists():
        try:
            order = json.loads(commit.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            order = []
        if order and os.path.lexists(staging / "new" / order[-1]):  # the primary never arrived: roll back
            for name in order[:-1]:
                if not os.path.lexists(staging / "new" / name):  # this companion was moved in: take it out
                    _remove(parent / name)
            if (staging / "old").is_dir():
                _restore(staging / "old", parent)
    shutil.rmtree(staging, ignore_errors=True)


def _clean_stale(parent: Path, locked_name: str) -> None:
    """Recover and remove staging folders beside the output whose process is gone."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        match = _STAGING.match(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False) or _alive(int(match["pid"])):
            continue
        if match["name"] == locked_name:
            _recover(Path(entry.path), parent)
            continue
        try:
            with _locked(parent / match["name"]):
                _recover(Path(entry.path), parent)
        except PawError:  # that output is being written right now: leave its folder alone
            continue


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# ---------------------------------------------------------------- the lock

@contextlib.contextmanager
def _locked(out: Path, *, fail_fast_only: bool = False) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``out`` exclusively; a live holder means a clean error, not a wait.

    ``fail_fast_only``: a folder where no lock file can be created is let through (the writer
    reports it), but a live holder is still an error.
    """
    if fcntl is None:  # pragma: no cover
        yield
        return
    lock = out.parent / f".{out.name}.lock"
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            if fail_fast_only:
                yield
                return
            fd = _oserror(out, lambda: os.open(lock, os.O_RDWR | os.O_CREAT, 0o666))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise OutputInUse(f"another run{f' (pid {holder})' if holder else ''} is writing this output "
                              "right now; wait for it to finish or choose another output", path=out) from None
        try:  # the file locked must still be the one at that path (a finishing holder unlinks it)
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)


# ---------------------------------------------------------------- file-system primitives

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _renameat2():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2_fn = _renameat2()


def _rename_noreplace(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst``; raise FileExistsError if ``dst`` exists, atomically where the OS can."""
    if _renameat2_fn is not None:
        if _renameat2_fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(dst))
    if src.is_file() and not src.is_symlink():
        os.link(src, dst)  # refuses an existing dst atomically
        os.unlink(src)
        return
    if os.path.lexists(dst):  # a folder: checked under the lock (and rename refuses a non-empty one)
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fix_mode(path: Path) -> None:
    """Give every file and folder of an output the mode a plain ``open``/``mkdir`` would (what ``cp`` gives).

    Temporary folders are 0700 and ``safetensors`` (so PEFT's and transformers' ``save_pretrained``)
    writes its files 0600, whatever the umask; symbolic links are left alone.
    """
    mask = _umask()
    if path.is_symlink():
        return
    if not path.is_dir():
        os.chmod(path, 0o666 & ~mask)
        return
    for folder, _dirs, names in os.walk(path):
        os.chmod(folder, 0o777 & ~mask)
        for name in names:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                os.chmod(full, 0o666 & ~mask)


def work_folder(path: str | os.PathLike) -> Path:
    """``path`` as a folder for intermediate work (created with its parents); one clear line if it cannot be."""
    path = Path(path)
    _mkdir(path, path)
    return path


def _mkdir(parent: Path, out: Path) -> None:
    _oserror(out, lambda: parent.mkdir(parents=True, exist_ok=True))


def _oserror(out: Path, action):
    """Run ``action``; an OSError becomes one line naming the output (read-only, a file as parent, ...)."""
    try:
        return action()
    except OSError as err:
        raise PawError(f"cannot write the output: {err.strerror or err}"
                       + (f" ({err.filename})" if err.filename and str(err.filename) != str(out) else ""),
                       path=out) from None
