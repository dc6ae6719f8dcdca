"""Which tensors of a base and its fine-tunes can be compared, with one reason per skipped name.

A name is compared when every checkpoint stores it with the base's shape and a float dtype; the
decision reads headers only (no tensor is loaded). Task vectors and merges share it, and
:func:`paw.io.stream.iter_aligned` then reads the chosen names one at a time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from paw.io.checkpoint import Checkpoint

FLOAT_DTYPES = {"float64", "float32", "float16", "bfloat16"}


@dataclass
class Alignment:
    """Names every checkpoint has with the base's shape and a float dtype, and why the rest were skipped."""

    names: list[str]
    skipped: dict[str, str] = field(default_factory=dict)


def align(base: Checkpoint, models: Sequence[Checkpoint], *, include: str | None = None,
          exclude: str | None = None) -> Alignment:
    """Compare headers only (no tensor is read). Names keep the base's order."""
    inc = re.compile(include) if include else None
    exc = re.compile(exclude) if exclude else None
    names, skipped = [], {}
    for name in base:
        if (inc and not inc.search(name)) or (exc and exc.search(name)):
            continue
        reason = _skip_reason(name, base, models)
        if reason:
            skipped[name] = reason
        else:
            names.append(name)
    for model in models:  # names only a fine-tune has are skipped too, not ignored
        for name in model:
            if name not in base and name not in skipped and (not inc or inc.search(name)) \
                    and not (exc and exc.search(name)):
                skipped[name] = f"missing in the base ({base.name})"
    return Alignment(names, dict(sorted(skipped.items())))


def _skip_reason(name: str, base: Checkpoint, models: Sequence[Checkpoint]) -> str | None:
    if base.dtype(name) not in FLOAT_DTYPES:
        return f"non-float dtype {base.dtype(name)}"
    shape = base.shape(name)
    for model in models:
        if name not in model:
            return f"missing in {model.name}"
        if model.shape(name) != shape:
            return f"shape mismatch in {model.name}: {list(model.shape(name))} vs base {list(shape)}"
        if model.dtype(name) not in FLOAT_DTYPES:
            return f"non-float dtype {model.dtype(name)} in {model.name}"
    return None
