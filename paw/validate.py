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


def lora_alpha(flag: str, alpha: float | None) -> float | None:
    """A LoRA alpha: finite and > 0 (PEFT scales the update by alpha / r: 0 switches it off, < 0 flips it)."""
    return finite(flag, alpha, positive=True)


def lora_rank(flag: str, rank: int | None, model=None, target_modules: str | Iterable[str] | None = None) -> None:
    """Refuse a LoRA rank below 1, or above ``min(out, in)`` of the smallest layer it would adapt.

    ``model`` is the (torch) model the LoRA goes on and ``target_modules`` PEFT's selection
    (``'all-linear'``, a list of name suffixes, or a regex); checked before PEFT builds the factors,
    so ``--rank 100000`` is one line, not gigabytes of ``A`` and ``B``.
    """
    if rank is None:
        return
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise PawError(f"{flag} {rank!r}: must be an integer of at least 1")
    if model is not None:
        rank_fits(flag, rank, lora_layer_shapes(model, target_modules))


def rank_fits(flag: str, rank: int, layers: Mapping[str, tuple[int, int]]) -> None:
    """Refuse ``rank`` above ``min(out, in)`` of the smallest of ``layers`` (``name -> (out, in)``).

    ``rank_fits('--rank', 33, {'k_proj': (16, 32)})`` -> PawError naming ``k_proj (16 x 32)``.
    """
    if not layers:
        return
    name, (out, inp) = min(layers.items(), key=lambda kv: (min(kv[1]), kv[0]))
    if rank > min(out, inp):
        raise PawError(f"{flag} {rank} is above min(out, in) = {min(out, inp)} of the smallest targeted layer "
                       f"{name} ({out} x {inp}); a LoRA's rank is at most that")


def lora_layer_shapes(model, target_modules: str | Iterable[str] | None) -> dict[str, tuple[int, int]]:
    """``name -> (out, in)`` of the linear layers PEFT's ``target_modules`` selects in ``model``.

    ``'all-linear'`` (or None): every ``nn.Linear`` but the output head, as PEFT does; a string: a
    regex on the full name; a list: names equal to an entry or ending in ``.entry``.
    """
    import re

    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or not name:
            continue
        if target_modules is None or target_modules == "all-linear":
            chosen = module is not head
        elif isinstance(target_modules, str):
            chosen = re.fullmatch(target_modules, name) is not None
        else:
            chosen = any(name == t or name.endswith(f".{t}") for t in target_modules)
        if chosen:
            out[name] = (module.out_features, module.in_features)
    return out


def finite_all(flag: str, values: Iterable[float] | None, *, limit: float | None = None) -> list[float] | None:
    """Every entry of a list flag (``--weights 0.5 nan``) checked with :func:`finite`."""
    return None if values is None else [finite(flag, v, limit=limit) for v in values]


def all_finite(tensor) -> bool:
    """Whether every entry is finite, exactly, at the cost of one sum in the common case.

    NaN and infinity propagate through addition (``inf + -inf`` is NaN), so a finite sum proves every
    entry finite; only a sum that is not finite (a NaN or infinite entry, or an overflow of finite
    ones) pays for the entry-by-entry check. About 15x faster than ``isfinite(t).all()`` on float32.
    """
    import torch

    if not torch.is_floating_point(tensor) or bool(torch.isfinite(tensor.sum())):
        return True
    return nonfinite(tensor) == 0


def nonfinite(tensor, *, chunk: int = 1 << 20) -> int:
    """Number of NaN or infinite entries of a tensor (0 for integer tensors).

    Counted in chunks of ``chunk`` entries: ``isfinite`` on a whole bfloat16 embedding would make
    several full-size temporaries, more memory than the merge that produced it. A tensor whose sum
    is finite has none (:func:`all_finite`), which is checked first.
    """
    import torch

    if not torch.is_floating_point(tensor) or bool(torch.isfinite(tensor.sum())):
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
