"""Merges that look at the geometry of whole tensors: SLERP, NuSLERP, Multi-SLERP, Karcher mean, Model Stock.

Each is a pure function over tensors; :mod:`paw.merge.methods` registers them in
:data:`~paw.merge.methods.METHODS` under the signature ``f(base, deltas, weights, **params) -> merged
delta``. Unlike task arithmetic, an angle or a norm over the whole tensor decides every entry, so the
streamed merge hands them whole tensors (not row blocks). The formulas are those of mergekit's
methods of the same names (the references are in the registry), edge cases included.

With ``base`` the base's tensor (the reference: the first model when no base is given) and
``deltas[i] = M_i - base``, a method that interpolates full weights rebuilds ``M_i = base + deltas[i]``
and returns ``result - base``.

Hand-checkable numbers::

    slerp(0.5, [1, 0], [0, 1])          = [0.7071, 0.7071]       (orthogonal: the arc's midpoint)
    model_stock_ratio(cos=0.5, n=2)     = 2 * 0.5 / (1 + 0.5)  = 2/3
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SLERP_DOT_THRESHOLD = 0.9995  # |cos| above this: nearly collinear, SLERP falls back to linear interpolation


def _norm(v) -> float:
    import torch

    return float(torch.linalg.vector_norm(v, dtype=torch.float64))


_DOT_CHUNK = 1 << 22


def _dot(a, b) -> float:
    """Σ a·b in float64, in chunks of 2^22 entries (each chunk's dot summed in Python, in order).

    Every chunk is widened into the same two float64 buffers: a fresh 32 MB pair per chunk would
    be mapped and page-faulted anew each time (the same numbers, a third of SLERP's time).
    """
    import torch

    if a.numel() < _DOT_CHUNK:
        return float(torch.dot(a.reshape(-1).double(), b.reshape(-1).double()))
    xa, xb = torch.empty(_DOT_CHUNK, dtype=torch.float64, device=a.device), \
        torch.empty(_DOT_CHUNK, dtype=torch.float64, device=a.device)
    total = 0.0  # sum() of the chunk dots, as Python adds them: left to right from 0
    for x, y in zip(a.reshape(-1).split(_DOT_CHUNK), b.reshape(-1).split(_DOT_CHUNK), strict=True):
        total += float(torch.dot(xa[:x.numel()].copy_(x), xb[:y.numel()].copy_(y)))
    return float(total)


def slerp_coefficients(t: float, v0, v1, *, dot_threshold: float = SLERP_DOT_THRESHOLD,
                       eps: float = 1e-8) -> tuple[float, float]:
    """``(s0, s1)`` with ``slerp(t, v0, v1) = s0 v0 + s1 v1``, from the angle between the flattened tensors.

    Each tensor is divided by its L2 norm when that exceeds ``eps`` (a zero tensor stays zero, so its
    cosine with anything is 0: a right angle). When ``|cos θ| > dot_threshold`` the two are nearly
    collinear and ``sin θ`` is too small to divide by: plain linear interpolation, ``(1 - t, t)``.
    Otherwise ``s0 = sin((1 - t) θ) / sin θ`` and ``s1 = sin(t θ) / sin θ`` (Shoemake 1985).

    >>> slerp_coefficients(0.5, torch.tensor([1., 0.]), torch.tensor([0., 1.]))   # doctest: +SKIP
    (0.7071..., 0.7071...)
    """
    return _coefficients(t, *_gram(v0, v1), dot_threshold=dot_threshold, eps=eps)


def _coefficients(t: float, sq0: float, sq1: float, dot: float, *, dot_threshold: float = SLERP_DOT_THRESHOLD,
                  eps: float = 1e-8) -> tuple[float, float]:
    """:func:`slerp_coefficients` from ``|v0|², |v1|²`` and ``v0·v1``."""
    n0, n1 = math.sqrt(sq0), math.sqrt(sq1)
    cos = dot / ((n0 if n0 > eps else 1.0) * (n1 if n1 > eps else 1.0))
    if abs(cos) > dot_threshold:
        return 1.0 - t, t
    theta = math.acos(cos)
    return math.sin(theta - theta * t) / math.sin(theta), math.sin(theta * t) / math.sin(theta)


_GRAM_CHUNK = 1 << 16  # float32 entries: the chunk and its two float64 copies stay in L2 between the dots


def _gram(v0, v1=None, *, delta=None) -> tuple[float, float, float]:
    """``(|v0|², |v1|², v0·v1)`` in float64, in one pass; ``v1 = v0 + delta`` (float32) when ``delta`` is given.

    Each chunk is widened once into two small reused float64 buffers and the three dots are taken
    there (products of float32 numbers are exact in float64): one read of each input, where a norm,
    a norm and a dot over the whole tensors would widen them three times, and no copy of
    ``v0 + delta`` is made. Chunk sums are added in order, in Python floats.
    """
    import torch

    a = v0.reshape(-1)
    b = (v1 if delta is None else delta).reshape(-1)
    size = _GRAM_CHUNK if a.device.type == "cpu" else _DOT_CHUNK
    xa = torch.empty(min(size, a.numel()), dtype=torch.float64, device=a.device)
    xb = torch.empty_like(xa)
    summed = torch.empty(xa.numel(), dtype=a.dtype, device=a.device) if delta is not None else None
    sq0 = sq1 = dot = 0.0
    for start in range(0, a.numel(), size):
        x, y = a[start:start + size], b[start:start + size]
        if summed is not None:
            y = torch.add(x, y, out=summed[:x.numel()])  # v0 + delta, as one addition of the tensors rounds it
        wa, wb = xa[:x.numel()].copy_(x), xb[:y.numel()].copy_(y)
        sq0 += float(torch.dot(wa, wa))
        sq1 += float(torch.dot(wb, wb))
        dot += float(torch.dot(wa, wb))
    return sq0, sq1, dot


def slerp(t: float, v0, v1, **kwargs):
    """Spherical linear interpolation of two tensors of one shape: ``t = 0`` gives ``v0``, ``t = 1`` gives ``v1``.

    Norms are interpolated along with directions because ``v0`` and ``v1`` enter unnormalised.
    """
    s0, s1 = slerp_coefficients(t, v0, v1, **kwargs)
    return v0 * s0 + v1 * s1


def slerp_delta(base, deltas: Sequence, weights, *, t: float = 0.5):
    """SLERP from the base (``t = 0``) to the one fine-tune (``t = 1``), as a task vector.

    ``base + return value = s0 base + s1 M`` with ``M = base + Δ``: written ``(s0 + s1 - 1) base + s1 Δ``
    so that no copy of ``M`` is made.
    """
    if len(deltas) != 1:
        raise ValueError(f"slerp merges exactly one model into the base, got {len(deltas)}")
    s0, s1 = _coefficients(t, *_gram(base, delta=deltas[0]))
    return deltas[0].mul_(s1).add_(base, alpha=s0 + s1 - 1.0)


def nuslerp(t: float, v0, v1, *, dim: int = -1, flatten: bool = False, eps: float = 1e-8):
    """SLERP of corresponding vectors of two tensors: all entries at once (``flatten``) or per row/column.

    Vectors lie along ``dim`` (-1: each row; 0: each column). Each pair is normalised with its norm
    clamped at 1e-7; a pair whose ``|sin θ| < eps`` is interpolated linearly. Returns the shape of ``v0``.
    """
    import torch

    shape = v0.shape
    if flatten:
        v0, v1 = v0.reshape(-1), v1.reshape(-1)
    elif dim != -1:
        v0, v1 = v0.transpose(dim, -1), v1.transpose(dim, -1)
    u0 = v0 / torch.linalg.vector_norm(v0, dim=-1, keepdim=True).clamp(min=1e-7)
    u1 = v1 / torch.linalg.vector_norm(v1, dim=-1, keepdim=True).clamp(min=1e-7)
    theta = torch.acos((u0 * u1).sum(dim=-1, keepdim=True).clamp(-1, 1))
    del u0, u1
    sin = torch.sin(theta)
    out = (torch.sin((1 - t) * theta) * v0 + torch.sin(t * theta) * v1) / sin
    line = (sin.abs() < eps).expand_as(out)
    out = torch.where(line, (1 - t) * v0 + t * v1, out)
    if dim != -1 and not flatten:
        out = out.transpose(dim, -1)
    return out.reshape(shape)


def nuslerp_delta(base, deltas: Sequence, weights: Sequence[float], *, base_given: bool = True,
                  row_wise: bool = False, flatten: bool = True):
    """NuSLERP of two models at ``t = w_2 / (w_1 + w_2)`` (0.5 when the weights sum to about 0).

    With a base, the two task vectors are interpolated and added to it; without one, the two full
    models are (``base`` is then the first model and ``deltas[0]`` zero).
    """
    if len(deltas) != 2:
        raise ValueError(f"nuslerp merges exactly two models, got {len(deltas)}")
    total = float(weights[0]) + float(weights[1])
    t = 0.5 if abs(total) < 1e-6 else float(weights[1]) / total
    kwargs = {"dim": 0 if row_wise else -1, "flatten": flatten}
    if base_given:
        return nuslerp(t, deltas[0], deltas[1], **kwargs)
    return nuslerp(t, base + deltas[0], base + deltas[1], **kwargs).sub_(base)


def multislerp_delta(base, deltas: Sequence, weights: Sequence[float], *, base_given: bool = True,
                     normalize_weights: bool = True, eps: float = 1e-8):
    """Barycentric interpolation on the hypersphere of N tensors (task vectors with a base, else models).

    Each vector is projected to the unit sphere, mapped to the tangent space at the weighted mean
    direction, averaged there with the weights, mapped back with the exponential map and scaled by
    the weighted mean norm. With one model it is that model.
    """
    import torch

    if len(deltas) == 1:
        return deltas[0]
    vs = [d if base_given else base + d for d in deltas]
    w = [float(x) for x in weights]
    if normalize_weights:
        w = [x / sum(w) for x in w]
    norms = [_norm(v) for v in vs]
    units = [v / (n + eps) for v, n in zip(vs, norms, strict=True)]
    mean = sum(u * x for u, x in zip(units, w, strict=True))
    mean_norm = _norm(mean)
    if mean_norm < eps:
        if len(vs) == 2:
            res = vs[0] * w[0] + vs[1] * w[1]
            return res if base_given else res.sub_(base)
        raise ValueError("multislerp: the weighted mean direction is zero (antipodal inputs with balancing weights)")
    mean = mean / mean_norm
    tangent = torch.zeros_like(mean)
    for u, x in zip(units, w, strict=True):
        tangent.add_(u - mean * _dot(u, mean), alpha=x)
    size = _norm(tangent) + eps
    out = mean * math.cos(size) + tangent * (math.sin(size) / size)
    out = out * sum(n * x for n, x in zip(norms, w, strict=True))
    return out if base_given else out.sub_(base)


def karcher_mean(tensors: Sequence, alphas: Sequence[float], *, max_iter: int = 10, tol: float = 1e-5):
    """Weighted Riemannian (Karcher) mean of tensors' directions, scaled by the weighted mean norm.

    Directions ``u_i = x_i / |x_i|`` of the tensors with norm above ``tol`` start from their
    normalised weighted mean; each step moves along ``T = Σ a_i θ_i / sin θ_i (u_i - cos θ_i u)``
    (``θ_i`` the angle from the current mean ``u``; terms with ``θ_i < tol`` skipped) by the
    exponential map ``u <- cos|T| u + sin|T| T/|T|``, until ``|T| < tol`` or ``max_iter`` steps. The
    result is ``(Σ a_i |x_i|) u`` over all tensors, zero ones included (Grove & Karcher 1973).
    """
    import torch

    if len(tensors) == 1:
        return tensors[0]
    norms = [_norm(x) for x in tensors]
    keep = [i for i, n in enumerate(norms) if n > tol]
    if not keep:
        return torch.zeros_like(tensors[0])
    total = sum(alphas[i] for i in keep)
    a = [alphas[i] / total for i in keep]
    units = [tensors[i] / norms[i] for i in keep]
    u = sum(x * ui for x, ui in zip(a, units, strict=True))
    size = _norm(u)
    u = units[0].clone() if size < tol else u / size
    for _ in range(max_iter):
        step = torch.zeros_like(u)
        for x, ui in zip(a, units, strict=True):
            cos = min(1.0, max(-1.0, _dot(u, ui)))
            theta = math.acos(cos)
            if theta >= tol:
                step.add_(ui - u * cos, alpha=x * theta / math.sin(theta))
        length = _norm(step)
        if length < tol:
            break
        u = u * math.cos(length) + step * (math.sin(length) / length)
        size = _norm(u)
        if size > tol:
            u = u / size
    return u * sum(x * n for x, n in zip(alphas, norms, strict=True))


def karcher_delta(base, deltas: Sequence, weights, *, max_iter: int = 10, tol: float = 1e-5):
    """The Karcher mean of the full models with equal weights (as mergekit: per-model weights are not read)."""
    models = [base + d for d in deltas]
    return karcher_mean(models, [1.0 / len(models)] * len(models), max_iter=max_iter, tol=tol).sub_(base)


def model_stock_ratio(cos: float | object, n: int):
    """Model Stock's interpolation weight ``t = N cos θ / (1 + (N - 1) cos θ)`` (float or tensor ``cos``).

    Jang et al. 2024, "Model Stock: All we need is just a few fine-tuned models" (ECCV), eq. (2) for
    N fine-tunes at a common angle θ to each other around the base: ``t(cos=0.5, n=2) = 2/3``.
    """
    return (n * cos) / (1 + (n - 1) * cos)


def model_stock_delta(base, deltas: Sequence, weights, *, filter_wise: bool = False):
    """``t × mean(Δ_i)``: the base moved towards the fine-tunes' average by Model Stock's ratio.

    ``cos θ`` is the mean of the pairwise cosines of the task vectors (norm products clamped at 1e-6,
    cosines clamped to [-1, 1]), over the whole tensor or, with ``filter_wise``, per row (a 1-D tensor
    is one row). The weights are not read: the geometry sets the ratio.
    """
    import torch

    n = len(deltas)
    if n < 2:
        raise ValueError(f"model-stock needs at least two fine-tunes besides the base, got {n}")
    rows = (lambda d: d.reshape(1, -1) if d.dim() < 2 else d) if filter_wise else (lambda d: d.reshape(-1))
    flat = [rows(d) for d in deltas]
    norms = [torch.linalg.vector_norm(f, dim=-1) for f in flat]
    cosines = [((flat[i] * flat[j]).sum(dim=-1) / (norms[i] * norms[j]).clamp(min=1e-6)).clamp(-1, 1)
               for i in range(n) for j in range(i + 1, n)]
    cos = torch.stack(cosines).mean(dim=0).unsqueeze(-1)
    t = model_stock_ratio(cos, n)
    mean = deltas[0]
    for d in deltas[1:]:
        mean.add_(d)
    mean.div_(n)
    return (rows(mean) * t).reshape(base.shape)


def nearswap_delta(base, deltas: Sequence, weights, *, t: float = 0.5):
    """Move the base towards the one model where they are already close: weight ``clamp(t / |Δ|, 0, 1)``.

    ``|Δ|`` is clamped at 1e-6, so equal entries take the model's value; an entry that differs by more
    than ``t`` moves by exactly ``t`` towards the model.
    """
    if len(deltas) != 1:
        raise ValueError(f"nearswap merges exactly one model into the base, got {len(deltas)}")
    d = deltas[0]
    return (t / d.abs().clamp(min=1e-6)).clamp(0, 1).mul_(d)
