"""No NaN or Inf reaches disk unless the user asked for it (``--allow-nonfinite``).

Every output is staged by :mod:`paw.io.atomic`; just before anything is moved into place,
:func:`check_staged_tensors` reads back each ``.safetensors`` file of the staged output and refuses
one holding NaN/Inf, naming the file and the tensor, so nothing is half-written and no writer can
forget the check (PEFT's ``save_pretrained``, ``safetensors.save_file``, a future writer). Writers
that see each tensor anyway (the sharded model writer) call :func:`refuse_nonfinite_tensor` as
they write and :func:`mark_checked` the file, so a 16 GB merge is not read twice.

Whether NaN/Inf may be written is one per-run setting, :func:`nonfinite_policy`, opened by the CLI
around every command that has ``--allow-nonfinite`` and by the library pipelines that take
``allow_nonfinite=``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from paw.io.lazy_checkpoint import SafetensorsFile
from paw.validate import refuse_nonfinite

_allow: list[bool] = []     # the --allow-nonfinite of the runs in progress, innermost last
_checked: set[str] = set()  # staged tensor files whose writer already refused NaN/Inf tensor by tensor


@contextlib.contextmanager
def nonfinite_policy(allow: bool) -> Iterator[None]:
    """Outputs committed inside this block may hold NaN/Inf if ``allow`` (``--allow-nonfinite``).

    An enclosing block that allows them keeps allowing them: the flag is the user's wish for the
    whole command, and a library call inside it passing ``allow_nonfinite=False`` does not undo it.
    """
    _allow.append(bool(allow) or nonfinite_allowed())
    try:
        yield
    finally:
        _allow.pop()


def nonfinite_allowed() -> bool:
    """True inside a :func:`nonfinite_policy` block that allows NaN/Inf in outputs."""
    return bool(_allow and _allow[-1])


def refuse_nonfinite_tensor(output: str | os.PathLike, name: str, tensor, *, counts: dict | None = None,
                            what: str = "not written") -> None:
    """The guard where tensors reach disk: NaN/Inf in ``tensor`` raises :class:`~paw.validate.NonFinite`
    naming ``output``, the tensor and ``--allow-nonfinite``, unless :func:`nonfinite_allowed` (then it
    is counted in ``counts``). ``what`` says why, e.g. that a training diverged::

        out/adapter_model.safetensors: not written: tensor 'base_model...lora_A.weight' holds 64 NaN/Inf
        value(s) of 64; pass --allow-nonfinite to write it anyway
    """
    refuse_nonfinite(name, tensor, what=what, allow=nonfinite_allowed(), counts=counts, path=output)


def mark_checked(path: str | os.PathLike) -> None:
    """Record a staged tensor file whose tensors all went through :func:`refuse_nonfinite_tensor`."""
    _checked.add(os.path.realpath(path))


def forget_checked(staging: str | os.PathLike) -> None:
    """Drop the records of files under a staging folder that is gone."""
    prefix = os.path.realpath(staging) + os.sep
    _checked.difference_update([p for p in _checked if p.startswith(prefix)])


def check_staged_tensors(new: Path, parent: Path) -> None:
    """Read back every ``.safetensors`` file under staging folder ``new`` that no writer checked and
    refuse NaN/Inf, naming it by where it would have appeared (under ``parent``)."""
    if nonfinite_allowed():
        return
    for file in sorted(new.rglob("*.safetensors")):
        if file.is_symlink() or not file.is_file() or os.path.realpath(file) in _checked:
            continue
        source = SafetensorsFile(file)
        shown = parent / file.relative_to(new)
        for key in source.keys():
            refuse_nonfinite_tensor(shown, key, source.get(key))
