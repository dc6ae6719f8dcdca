"""The finite-number policy: NaN and infinity are refused on the way in and on the way out.

- Flags: a knob given ``nan`` or ``inf`` is refused before any work (:func:`finite`).
- Inputs: a tensor holding NaN or Inf is reported by model and tensor name (:func:`nonfinite`).
- Outputs: a model or adapter is never written with non-finite values unless the user asked for
  it (``--allow-nonfinite``); :func:`refuse_nonfinite` is the one check every writer calls.
- Statistics of undefined quantities are ``nan``, never a number that looks fine: the cosine of a
  zero vector is nan, and a clamp such as ``max(-1, min(1, x))`` must not turn nan into 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from paw.errors import PawError

ALLOW_HINT = "pass --allow-nonfinite to write it anyway"


class NonFinite(PawError):
    """A tensor holds NaN or infinite values where the output must be finite."""


FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32: tensor arithmetic runs in float32


def finite(flag: str, value: float | None, *, positive: bool = False, limit: float | None = None) -> float | None:
    """``value`` if it is a finite number (> 0 with ``positive``, ``|value| <= limit``); else a PawError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PawError(f"{flag} {value!r} is not a finite number")
    if positive and value <= 0:
        raise PawError(f"{flag} must be positive, got {value}")
    if limit is not None and abs(value) > limit:
        raise PawError(f"{flag} {value!r} is too large (the arithmetic is float32: at most {limit:.4g})")
    return float(value)


def finite_all(flag: str, values: Iterable[float] | None, *, limit: float | None = None) -> list[float] | None:
    """Every entry of a list flag (``--weights 0.5 nan``) checked with :func:`finite`."""
    return None if values is None else [finite(flag, v, limit=limit) for v in values]


def nonfinite(tensor, *, chunk: int = 1 << 20) -> int:
    """Number of NaN or infinite entries of a tensor (0 for integer tensors).

    Counted in chunks of ``chunk`` entries: ``isfinite`` on a whole bfloat16 embedding would make
    several full-size temporaries, more memory than the merge that produced it.
    """
    import torch

    if not torch.is_floating_point(tensor):
        return 0
    flat = tensor.reshape(-1)
    bad = 0
    for start in range(0, flat.numel(), chunk):
        part = flat[start:start + chunk]
        if not bool(torch.isfinite(part).all()):
            bad += int(part.numel() - torch.isfinite(part).sum())
    return bad


def refuse_nonfinite(name: str, tensor, *, what: str, allow: bool = False, counts: dict | None = None,
                     path=None) -> None:
    """Raise :class:`NonFinite` if ``tensor`` holds NaN/Inf, unless ``allow`` (then count it in ``counts``).

    ``what`` says whose tensor it is (``"merged output"``, ``"model ft1"``); ``path`` is the file or
    folder the message starts with (the input holding it, or the output that would).
    """
    bad = nonfinite(tensor)
    if not bad:
        return
    if not allow:
        raise NonFinite(f"{what}: tensor {name!r} holds {bad} NaN/Inf value(s) of {tensor.numel()}; "
                        f"{ALLOW_HINT}", path=path)
    if counts is not None:
        counts[name] = counts.get(name, 0) + bad


def refuse_nonfinite_all(tensors: Mapping[str, Any], *, what: str, allow: bool = False) -> dict[str, int]:
    """:func:`refuse_nonfinite` over a mapping; returns ``{name: count}`` of what ``allow`` let through."""
    counts: dict[str, int] = {}
    for name, tensor in tensors.items():
        refuse_nonfinite(name, tensor, what=what, allow=allow, counts=counts)
    return counts


def clamp_cosine(value: float) -> float:
    """Clip a cosine into [-1, 1] against rounding; ``nan`` stays ``nan`` (``max(-1, min(1, nan))`` is 1)."""
    return value if math.isnan(value) else max(-1.0, min(1.0, value))
