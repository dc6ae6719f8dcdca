"""Per tensor and model, how a streamed merge thins each block of a task vector before combining.

TIES and Model Breadcrumbs keep entries by rank of |Δ_i| over the whole tensor (thresholds from
streamed passes first), DARE and DELLA drop entries at random from generators seeded per (tensor,
model), block after block, so that the blocks get the whole tensor's draws. ``job`` is a
:class:`paw.merge.pipeline.MergeJob`; nothing here reads a checkpoint but through ``deltas``.
"""

from __future__ import annotations

from paw.merge import schedule, sparse
from paw.merge.blocks import block_numel, find_thresholds
from paw.merge.methods import tensor_seed
from paw.merge.params import TensorParams


def generators(job, name: str, tp: TensorParams) -> list | None:
    """One ``torch.Generator`` per model, seeded per (tensor, model), for the random methods."""
    import torch

    if not job.method.random:
        return None
    return [torch.Generator(device=job.device).manual_seed(tensor_seed(job.options.seed, name, i))
            for i in range(len(job.models))]


def sparsifiers(job, name: str, tp: TensorParams, blocks, deltas) -> list:
    """Per model, an in-place function that thins a block of Δ_i as the method says.

    TIES and Model Breadcrumbs keep entries by rank of |Δ_i| over the whole tensor: their thresholds
    come from two streamed passes first (:func:`paw.merge.blocks.find_thresholds`). DARE draws one
    uniform per entry from a generator seeded per (tensor, model), block after block in order, which
    on the CPU gives the same draws as one call over the whole tensor. Densities, drop rates and
    gammas may differ per model (a mergekit config).
    """
    import torch

    kind, count = job.method.sparsify, len(job.models)
    if kind == "della":
        return della_sparsifiers(job, name, tp, blocks, deltas)
    if kind == "random":
        gens = generators(job, name, tp)
        rates = tp.per_model("drop_rate", count)
        rescale = tp.params.get("rescale", True)
        return [(lambda d, g=g, p=p: d.mul_(torch.rand(d.shape, generator=g, device=d.device) >= p)
                 .div_(1.0 - p if rescale else 1.0)) if p > 0 else (lambda d: d)
                for g, p in zip(gens, rates, strict=True)]
    topks = schedule.topks(job, name, tp)
    if topks is None:
        return [lambda d: d] * count
    find_thresholds(topks, lambda: ([d.abs_() for d in deltas(block)[1]] for block in blocks))
    if kind == "magnitude":
        return [lambda d, t=t[0]: d.mul_(t.mask(d.abs())) for t in topks]
    return [lambda d, keep=t[0], drop=t[1]: d.mul_(keep.mask(d.abs()) & ~drop.mask(d.abs())) for t in topks]


def della_sparsifiers(job, name: str, tp: TensorParams, blocks, deltas) -> list:
    """Per model, DELLA's drop of a block of Δ_i, rows ranked within the block (a block holds whole rows).

    Without the L1 rescale each block's mask is drawn as the block comes, from a generator seeded
    per (tensor, model), block after block in row order: the CPU generator then gives the whole
    tensor's draws. The rescale is per tensor: a first pass over the blocks draws every mask
    (:func:`paw.merge.sparse.della_rescale_pass`) for the factors and keeps them packed (1 bit an
    entry), and the merge pass applies them. Either way, the bytes of
    :func:`paw.merge.sparse.sparsify_della` on the whole tensor.
    """
    from collections import deque

    count = len(job.models)
    densities, epsilons = tp.per_model("density", count), tp.per_model("epsilon", count)
    gens = generators(job, name, tp)
    if not schedule.della_rescale_passes(job, tp):
        return [(lambda d, a=a, e=e, g=g: d.mul_(sparse.della_keep(d, density=a, epsilon=e, generator=g)))
                if a < 1.0 else (lambda d: d) for a, e, g in zip(densities, epsilons, gens, strict=True)]
    shape = job.reference.shape(name)
    sizes = [block_numel(shape, b) for b in blocks]
    factors, masks = sparse.della_rescale_pass((deltas(block)[1] for block in blocks), sizes=sizes,
                                               densities=densities, epsilons=epsilons, generators=gens)

    def thin(d, queue: deque, factor):  # the masks in block order, each dropped once applied
        d.mul_(sparse.unpack_mask(queue.popleft(), d.shape, d.dtype))
        return d if factor is None else d.mul_(factor)

    return [(lambda d, q=deque(m), f=f: thin(d, q, f)) if a < 1.0 else (lambda d: d)
            for a, m, f in zip(densities, masks, factors, strict=True)]
