"""Exact top-k selection over a tensor's magnitudes: the mask TIES trims with and task-vector
interference is measured by (``paw.merge.methods`` and ``paw.taskvec.spectra`` share it, so a
mask overlap reported by ``paw task-vectors --spectra`` is the mask ``paw merge --method ties`` keeps).

torch is imported inside the functions: ``paw.merge.methods`` is read at ``paw --help`` start-up.
"""

from __future__ import annotations


def top_k_mask(magnitude, k: int):
    """Boolean mask of the ``k`` largest entries of ``magnitude`` (any shape), exactly ``k`` of them.

    The k-th largest value is found by selection (``kthvalue``, linear time), not by sorting. Entries
    equal to that threshold are kept in flat-index order until ``k`` are kept, so the mask is
    deterministic even when many magnitudes tie (common in bfloat16 checkpoints).

    >>> top_k_mask(torch.tensor([0.1, 0.5, 0.5, 0.2]), 2)   # doctest: +SKIP
    tensor([False,  True,  True, False])
    """
    import torch

    n = magnitude.numel()
    if k >= n:
        return torch.ones_like(magnitude, dtype=torch.bool)
    if k <= 0:
        return torch.zeros_like(magnitude, dtype=torch.bool)
    flat = magnitude.reshape(-1)
    threshold = kth_largest(flat, k)
    mask = flat > threshold
    missing = k - int(mask.sum())
    if missing > 0:  # ties at the threshold: keep the first ones by index
        tied = torch.nonzero(flat == threshold).reshape(-1)[:missing]
        mask[tied] = True
    return mask.reshape(magnitude.shape)


def kth_largest(flat, k: int):
    """The k-th largest value of a 1-D tensor of non-negative floats (a 0-d tensor), in linear time.

    Small tensors use ``kthvalue``. Large float32 ones use a radix step first: the bit patterns of
    non-negative floats sort like the floats, so a histogram of their top 16 bits (65536 bins, one
    ``bincount`` pass) tells which bin holds the k-th largest and how many entries lie above it; only
    that bin's entries (typically well under 1%) go through ``kthvalue``. About twice as fast as
    ``kthvalue`` on the whole tensor, and exact.
    """
    import torch

    n = flat.numel()
    if flat.dtype != torch.float32 or n < (1 << 20):
        return torch.kthvalue(flat, n - k + 1).values  # (n - k + 1)-th smallest = k-th largest
    top = flat.view(torch.int32) >> 16  # sign bit is 0: values 0 .. 2^15 - 1, ordered like the floats
    at_least = torch.bincount(top, minlength=1 << 15).flip(0).cumsum(0).flip(0)  # [b] = #(top >= b)
    b = int(torch.nonzero(at_least >= k).max())
    above = int(at_least[b + 1]) if b + 1 < at_least.numel() else 0
    candidates = flat[top == b]
    return torch.kthvalue(candidates, candidates.numel() - (k - above) + 1).values
