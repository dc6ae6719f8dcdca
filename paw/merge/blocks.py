"""One tensor of several checkpoints, walked in blocks of rows; exact top-k by magnitude in two passes.

A merge must not hold N + 5 float32 copies of a 128k x 4096 embedding. Every method is elementwise
once two per-model figures are known: TIES keeps entries whose |Δ| is among the k largest, Model
Breadcrumbs those ranked in ``[n_top, n_top + n_keep)``, DARE draws one uniform per entry in order,
DELLA ranks within rows (a block holds whole rows) and rescales by a per-tensor factor found in one
pass before (:func:`paw.merge.sparse.della_rescale_pass`).
So a merge reads each tensor in row blocks of :data:`BLOCK_ELEMENTS`: two streamed passes find the
k-th largest |Δ_i| exactly (:func:`kth_largest_streamed`, a radix select on the float bits), and
the merge pass applies the masks block by block (:class:`TopK`). Memory then holds N + 2 float32
*blocks*, plus the output tensor in its own dtype.

Ties at the threshold are kept in flat-index order until exactly k are kept, which is what
:func:`paw.merge.methods.top_k_mask` does on a whole tensor, so both give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

BLOCK_ELEMENTS = 1 << 20  # entries per block (4 MB in float32): cache-sized temporaries
SMALL = 1 << 16  # below this many entries a tensor's threshold comes from kthvalue on all of it


def row_blocks(shape: tuple[int, ...], rows: int | None = None,
               block_elements: int = BLOCK_ELEMENTS) -> list[tuple[int, int] | None]:
    """``(start, stop)`` row ranges over the first dimension (``rows`` of it if given); ``[None]`` for 0-d.

    ``row_blocks((10, 4), block_elements=12) == [(0, 3), (3, 6), (6, 9), (9, 10)]``
    """
    if not shape:
        return [None]
    first = shape[0] if rows is None else rows
    per_row = math.prod(shape[1:])
    step = max(1, block_elements // max(1, per_row))
    return [(start, min(first, start + step)) for start in range(0, first, step)] or [(0, 0)]


def block_numel(shape: tuple[int, ...], block: tuple[int, int] | None) -> int:
    """Entries in row block ``block`` of a tensor of ``shape`` (the whole tensor for None).

    ``block_numel((10, 4), (3, 6)) == 12``
    """
    return math.prod(shape) if block is None else (block[1] - block[0]) * math.prod(shape[1:])


def kth_largest_streamed(blocks: Callable[[], Iterable[Any]], k: int) -> tuple[float, int]:
    """The k-th largest value of non-negative float32 data given in blocks, and how many exceed it.

    ``blocks()`` yields the data (any shapes) and is called twice. The bit patterns of non-negative
    floats sort like the floats: pass one counts the top 16 bits (32768 bins), which fixes the bin of
    the k-th largest and how many lie above it; pass two counts the low 16 bits inside that bin, which
    fixes the value exactly. Returns ``(threshold, n_above)``; NaN sorts above every number.

    ``kth_largest_streamed(lambda: [tensor([0.5, 0.1]), tensor([0.5, 0.2])], 2) == (0.5, 0)``
    """
    t = TopK(k, n=k + 1)  # n only tells TopK that a selection is needed
    find_thresholds([[t]], lambda: ([b] for b in blocks()))
    return t.threshold, t.above


def _bin_of_kth(counts, k: int) -> tuple[int, int]:
    """The highest bin whose count from the top reaches ``k``, and the count strictly above it."""
    import torch

    at_least = counts.flip(0).cumsum(0).flip(0)  # [b] = entries in bins >= b
    b = int(torch.nonzero(at_least >= k).max())
    above = int(at_least[b + 1]) if b + 1 < at_least.numel() else 0
    return b, above


@dataclass
class TopK:
    """The mask of the k largest magnitudes of a tensor, produced block by block in flat order.

    ``threshold`` is the k-th largest value and ``above`` the count strictly larger; the first
    ``k - above`` entries equal to the threshold (by flat index) are kept too.
    """

    k: int
    n: int
    threshold: float = math.inf
    above: int = 0
    seen_ties: int = 0

    def mask(self, magnitude):
        import torch

        if self.k >= self.n:
            return torch.ones_like(magnitude, dtype=torch.bool)
        if self.k <= 0:
            return torch.zeros_like(magnitude, dtype=torch.bool)
        tied = magnitude == self.threshold
        room = self.k - self.above - self.seen_ties
        n_tied = int(tied.sum())
        self.seen_ties += n_tied
        if n_tied == 0 or room <= 0:  # no tie here, or every tie already passed over: strictly above
            return magnitude > self.threshold
        if n_tied <= room:            # every tie of this block is kept
            return magnitude >= self.threshold
        order = tied.reshape(-1).cumsum(0).reshape(tied.shape)  # 1, 2, ... along the ties
        return (magnitude > self.threshold) | (tied & (order <= room))


def threshold_passes(topks: list[list[TopK]], *, float32: bool = True) -> int:
    """How many times :func:`find_thresholds` walks the blocks for these selections: 0 when none is
    needed (``k`` is 0 or every entry), 1 when each is taken from whole data (tensors under
    :data:`SMALL` entries, or not float32), else 2."""
    pending = [t for wanted in topks for t in wanted if 0 < t.k < t.n]
    if not pending:
        return 0
    return 1 if not float32 or all(t.n < SMALL for t in pending) else 2


def find_thresholds(topks: list[list[TopK]], magnitudes: Callable[[], Iterable[list[Any]]]) -> None:
    """Fill ``threshold`` and ``above`` of every :class:`TopK` (``topks[i]``: those of model i).

    ``magnitudes()`` yields, block by block, the list of |Δ_i| blocks of every model (float32) and
    is called twice, whatever the number of models and thresholds: once for the high 16 bits of
    every model, once for the low 16 bits inside each threshold's bin. float64 data (float64
    checkpoints, rare) and small tensors are gathered whole and selected with ``kthvalue``.
    """
    import torch

    pending = [(i, t) for i, wanted in enumerate(topks) for t in wanted if 0 < t.k < t.n]
    if not pending:
        return
    small = {i: t.n < SMALL for i, t in pending}  # a histogram costs more than kthvalue on these
    high: dict[int, Any] = {}
    whole: dict[int, list] = {}
    for mags in magnitudes():
        for i in {i for i, _ in pending}:
            if mags[i].dtype != torch.float32 or small[i]:
                whole.setdefault(i, []).append(mags[i].reshape(-1).clone())
                continue
            counts = torch.bincount(_bits(mags[i]) >> 16, minlength=1 << 15)
            high[i] = counts if i not in high else high[i].add_(counts)
    for i, t in pending:
        if i in whole:
            values = torch.cat(whole[i])
            t.threshold = float(torch.kthvalue(values, values.numel() - t.k + 1).values)
            t.above = int((values > t.threshold).sum())
    pending = [(i, t, *_bin_of_kth(high[i], t.k)) for i, t in pending if i not in whole]
    if not pending:
        return
    low: list[Any] = [None] * len(pending)
    for mags in magnitudes():
        for j, (i, _t, b, _above) in enumerate(pending):
            bits = _bits(mags[i])
            counts = torch.bincount(bits[(bits >> 16) == b] & 0xFFFF, minlength=1 << 16)
            low[j] = counts if low[j] is None else low[j].add_(counts)
    for (_i, t, b, above_b), counts in zip(pending, low, strict=True):
        b2, above_in_bin = _bin_of_kth(counts, t.k - above_b)
        t.threshold = torch.tensor([(b << 16) | b2], dtype=torch.int32).view(torch.float32).item()
        t.above = above_b + above_in_bin


def _bits(block):
    import torch

    return block.reshape(-1).view(torch.int32)


class Deltas:
    """The base and the task vectors ``Δ_i = M_i − base`` of one block, in the compute dtype.

    ``Deltas(count, numel, compute, device)(tensors)`` takes the block of the base and of each model
    (any float dtypes, one shape; a list or a generator) and returns ``(base, [Δ_1 .. Δ_N])``. They live in ``count``
    buffers of ``numel`` entries that the next call overwrites, so a merge walking 2^20-entry blocks
    allocates (and page-faults) once per tensor instead of once per block and model: use the
    results before the next call. An input the compute dtype holds exactly (bfloat16, float16 or
    float32 into float32) is converted into its buffer, then the base subtracted in place, the same
    arithmetic as ``torch.sub(M_i, base)``; any other (float64 into float32) goes through that call.
    """

    def __init__(self, count: int, numel: int, compute, device=None):
        import torch

        self.compute = compute
        self._buffers = [torch.empty(numel, dtype=compute, device=device) for _ in range(count)]

    def __call__(self, tensors: Iterable[Any]) -> tuple[Any, list]:
        """``tensors``: the base's block, then each model's; taken one at a time, so that a
        generator of reads holds one input block at a time (whole tensors, for some methods)."""
        import torch

        tensors = iter(tensors)
        base = self._load(0, next(tensors))
        deltas = [self._load(i, t).sub_(base) if _exact_in(t.dtype, self.compute)
                  else torch.sub(t, base).to(self.compute) for i, t in enumerate(tensors, 1)]
        return base, deltas

    def _load(self, i: int, tensor):
        buffer = self._buffers[i]
        if tensor.numel() > buffer.numel():  # a block larger than announced: a fresh buffer
            return tensor.to(self.compute, copy=True)
        return buffer[:tensor.numel()].view(tensor.shape).copy_(tensor)


def _exact_in(dtype, compute) -> bool:
    """Whether every value of ``dtype`` is exactly a value of the float ``compute`` dtype."""
    return dtype == compute or (dtype.is_floating_point and dtype.itemsize < compute.itemsize)
