"""Sparsifiers and selections beyond TIES and DARE: DELLA's magnitude-ranked drop, SCE, norm rescaling.

Pure tensor functions, registered by :mod:`paw.merge.methods`. Each works on one tensor at a time
(``delta``: shape S, float32) and, like the other sparsifiers, may overwrite what it is given.
SCE needs the whole tensor; DELLA ranks within rows, so the streamed merge walks it in row blocks
(:func:`della_keep` per block; :func:`della_rescale_pass` first, for the L1 rescale).

Tiny example of DELLA's keep probabilities (one row, ``density 0.5``, ``epsilon 0.1``)::

    |Δ|   = [0.3, 0.1, 0.2]     ranks (ascending) 3, 1, 2     rank_norm 1, 0, 0.5
    p_keep = 0.4 + 0.2 * rank_norm = [0.6, 0.4, 0.5]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

RESCALE_EPS = 1e-7  # below this L1 norm (before or after the mask) the masked tensor is not rescaled


def l1_norm(tensor) -> float:
    """``‖tensor‖₁``, summed in float64."""
    import torch

    return float(tensor.abs().sum(dtype=torch.float64))


def l1_factor(before: float, after: float) -> float | None:
    """``before / after``, the factor that gives the masked tensor its L1 norm back; None (leave it as
    it is) when either norm is below :data:`RESCALE_EPS`. ``l1_factor(3.0, 1.5) == 2.0``."""
    if before < RESCALE_EPS or after < RESCALE_EPS:
        return None
    return before / after


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
    if density >= 1.0:
        return delta
    keep = della_keep(delta, density=density, epsilon=epsilon, generator=generator)
    if not rescale:
        return delta.mul_(keep)
    before = l1_norm(delta)
    factor = l1_factor(before, l1_norm(delta.mul_(keep)))  # in place: the caller reads ``delta``, not the return
    return delta if factor is None else delta.mul_(factor)


def della_keep(delta, *, density: float, epsilon: float, generator):
    """DELLA's random mask of ``delta`` (float 1.0 kept, 0.0 dropped, shape S): one Bernoulli draw per
    entry in row-major order, with :func:`della_keep_probabilities`.

    Ranks are per row and the CPU generator draws ``torch.bernoulli``'s entries one after another,
    so whole rows ``[a, b)`` then ``[b, c)`` of a 2-D or higher tensor, drawn in that order from one
    generator, give the same mask as the whole tensor at once (a 1-D tensor is one row: whole).
    """
    import torch

    return torch.bernoulli(della_keep_probabilities(delta, density=density, epsilon=epsilon), generator=generator)


def della_rescale_pass(blocks: Iterable[Sequence], *, sizes: Sequence[int], densities: Sequence[float],
                       epsilons: Sequence[float], generators: Sequence) -> tuple[list[float | None], list[list]]:
    """Per model, DELLA's L1 rescale factor on a tensor given in row blocks, and the masks it drew.

    ``blocks`` yields, in row order, the list of the N models' Δ blocks (read, not written), and
    ``sizes`` says how many entries each block holds. Returns
    ``(factors, masks)``: ``factors[i]`` as :func:`sparsify_della` would find it on the whole tensor
    (None: no rescale, for ``density >= 1`` or a norm below :data:`RESCALE_EPS`); ``masks[i]`` model
    i's mask of every block, packed 8 entries a byte (:func:`pack_mask`, 1/32 of the float32 data),
    so that the merge pass neither ranks nor draws again. The two L1 norms are float64 sums of the
    blocks' float64 sums: the whole tensor's sum in another order, equal up to float64 rounding
    (about 1e-16 relative), which the factor's rounding to float32 (``masked.mul_(factor)`` on
    float32 data) absorbs unless the quotient lies that close to a float32 rounding boundary.
    """
    import torch

    count = len(densities)
    before, after = [0.0] * count, [0.0] * count
    masks: list[list] = [[] for _ in range(count)]
    # one buffer per model for every block's bits: thousands of small tensors kept between the
    # blocks' large temporaries would fragment the heap (+0.3 GiB resident for 12 MB of masks)
    ends = [0]
    for n in sizes:
        ends.append(ends[-1] + (n + 7) // 8)
    buffers: list = [None] * count
    for b, deltas in enumerate(blocks):
        for i, d in enumerate(deltas):
            if densities[i] >= 1.0:
                continue
            if buffers[i] is None:
                buffers[i] = torch.empty(ends[-1], dtype=torch.uint8, device=d.device)
            keep = della_keep(d, density=densities[i], epsilon=epsilons[i], generator=generators[i])
            masks[i].append(pack_mask(keep, out=buffers[i][ends[b]:ends[b + 1]]))
            before[i] += l1_norm(d)
            after[i] += l1_norm(keep.mul_(d))  # the bits of d * keep, d left as it is
    return [None if densities[i] >= 1.0 else l1_factor(before[i], after[i]) for i in range(count)], masks


def pack_mask(keep, *, out=None):
    """A 0/1 tensor (any shape and float dtype) as uint8, 8 entries a byte, lowest bit first (into
    ``out``, ``ceil(n / 8)`` bytes, when given).

    ``pack_mask(tensor([1., 0., 1.])) == tensor([5], dtype=uint8)``; :func:`unpack_mask` inverts it.
    """
    import torch

    flat = keep.reshape(-1).to(torch.uint8)
    pad = -flat.numel() % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    shifts = torch.arange(8, dtype=torch.uint8, device=flat.device)
    return torch.sum(flat.view(-1, 8) << shifts, 1, dtype=torch.uint8, out=out)


def unpack_mask(packed, shape, dtype):
    """The 0/1 tensor of ``shape`` and ``dtype`` that :func:`pack_mask` packed."""
    import math

    import torch

    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(1) >> shifts) & 1
    return bits.reshape(-1)[:math.prod(shape)].reshape(shape).to(dtype)


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
