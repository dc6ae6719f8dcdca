"""Sparsifiers and selections that need a whole tensor: DELLA's magnitude-ranked drop, SCE, norm rescaling.

Pure tensor functions, registered by :mod:`paw.merge.methods`. Each works on one tensor at a time
(``delta``: shape S, float32) and, like the other sparsifiers, may overwrite what it is given.

Tiny example of DELLA's keep probabilities (one row, ``density 0.5``, ``epsilon 0.1``)::

    |Δ|   = [0.3, 0.1, 0.2]     ranks (ascending) 3, 1, 2     rank_norm 1, 0, 0.5
    p_keep = 0.4 + 0.2 * rank_norm = [0.6, 0.4, 0.5]
"""

from __future__ import annotations

from collections.abc import Sequence

RESCALE_EPS = 1e-7  # below this norm (before or after the mask) the masked tensor is not rescaled


def rescale_l1(masked, original):
    """Scale ``masked`` so its L1 norm equals ``original``'s (mergekit's ``rescale``); in place.

    Left as is when either L1 norm is below :data:`RESCALE_EPS`.
    """
    import torch

    before = float(original.abs().sum(dtype=torch.float64))
    after = float(masked.abs().sum(dtype=torch.float64))
    if before < RESCALE_EPS or after < RESCALE_EPS:
        return masked
    return masked.mul_(before / after)


def della_keep_probabilities(delta, *, density: float, epsilon: float):
    """Per entry, the probability of keeping it: ``density - ε + 2ε × rank_norm``, ranks per row.

    Deep et al. 2024, "DELLA-Merging: Reducing Interference in Model Merging through Magnitude-Based
    Sampling" (MagPrune). Within each row (a 1-D tensor is one row) entries are ranked by |Δ|
    ascending, ``rank_norm = (rank - 1) / (columns - 1)`` in [0, 1]: the largest entry is kept with
    probability ``density + ε``, the smallest with ``density - ε``. A single column ranks 0.
    """
    import torch

    rows = delta.reshape(1, -1) if delta.dim() < 2 else delta.reshape(delta.shape[0], -1)
    cols = rows.shape[1]
    order = torch.argsort(rows.abs(), dim=1)
    # the rank of each entry: the inverse permutation of the order, the argsort of the argsort
    # (a permutation has no ties) written in one linear pass instead of a second sort
    ranks = torch.empty_like(order).scatter_(1, order, torch.arange(cols, device=order.device).expand_as(order))
    ranks = ranks.to(torch.float32)
    norm = ranks / (cols - 1) if cols > 1 else torch.zeros_like(ranks)
    return ((density - epsilon) + norm * (2 * epsilon)).reshape(delta.shape)


def sparsify_della(delta, *, density: float, epsilon: float, generator, rescale: bool = True):
    """DELLA's MagPrune: keep each entry with its rank-based probability; optionally rescale to the L1 norm.

    ``density >= 1`` keeps everything; ``density - ε`` and ``density + ε`` must lie in (0, 1)
    (checked by the options). ``generator``: a ``torch.Generator`` on Δ's device, seeded per tensor
    and model. With ``rescale`` the survivors are scaled so the L1 norm of Δ is unchanged (mergekit's
    ``rescale``; the paper divides each survivor by its keep probability instead, equal in
    expectation).
    """
    import torch

    if density >= 1.0:
        return delta
    keep = torch.bernoulli(della_keep_probabilities(delta, density=density, epsilon=epsilon), generator=generator)
    if not rescale:
        return delta.mul_(keep)
    return rescale_l1(delta * keep, delta)


def sce_mask(deltas: Sequence, density: float):
    """SCE "select": entries whose variance across the N task vectors is among the top ``density`` share.

    The share is of the entries with non-zero variance: ``k = int(density × nonzero)``. Returns a bool
    mask of shape S (all True for ``density >= 1``, all False for ``k = 0``).
    """
    import torch

    first = deltas[0]
    if density >= 1.0:
        return torch.ones_like(first, dtype=torch.bool)
    # torch.var over the stack, as mergekit computes it: entries tied in exact arithmetic stay tied, so
    # both pick the same entries at the threshold (N + 1 copies of the tensor, like mergekit's stack)
    var = torch.var(torch.stack(list(deltas)), dim=0, unbiased=False)
    k = int(int(torch.count_nonzero(var)) * density)
    mask = torch.zeros(var.numel(), dtype=torch.bool, device=var.device)
    if k > 0:
        mask[torch.topk(var.reshape(-1), k).indices] = True
    return mask.reshape(first.shape)


def sce_delta(base, deltas: Sequence, weights, *, select_topk: float = 1.0):
    """SCE: select by variance, calculate weights from the squared entries, erase minority signs, merge.

    Wan et al. 2024, "FuseChat: Knowledge Fusion of Chat Models" (arXiv 2408.07990). After the
    ``select_topk`` mask, model i's weight is ``mean(Δ_i²) / Σ_j mean(Δ_j²)`` (uniform when that sum is
    below 1e-6); entries whose sign differs from the sign of ``Σ_i Δ_i`` are erased; the survivors
    are averaged with those weights (divisor clamped at 1e-6). The per-model ``weights`` are not read.
    """
    import torch

    if select_topk < 1.0:
        mask = sce_mask(deltas, select_topk)
        for d in deltas:
            d.mul_(mask)
    energy = [float(d.double().pow(2).mean()) if d.numel() else 0.0 for d in deltas]
    total = sum(energy)
    w = [1.0 / len(deltas)] * len(deltas) if abs(total) < 1e-6 else [e / total for e in energy]
    plus = sum(deltas[1:], deltas[0].clone()) >= 0
    merged = torch.zeros_like(deltas[0])
    divisor = torch.zeros_like(deltas[0])
    for d, x in zip(deltas, w, strict=True):
        agree = torch.where(plus, d > 0, d < 0)
        merged.add_(torch.where(agree, d, 0.0), alpha=x)
        divisor.add_(agree, alpha=x)
    return merged.div_(divisor.clamp_(min=1e-6))


def passthrough_delta(base, deltas: Sequence, weights, *, multiplier: Sequence[float] | None = None):
    """The one model's tensor unchanged, times its ``scale`` when given (mergekit's passthrough).

    ``base`` is that model (no base is used), ``deltas[0]`` is zero; returns ``(scale - 1) × base``.
    """
    if len(deltas) != 1:
        raise ValueError(f"passthrough takes exactly one model per tensor, got {len(deltas)}")
    factor = 1.0 if multiplier is None or multiplier[0] is None else float(multiplier[0])
    return deltas[0].add_(base, alpha=factor - 1.0)
