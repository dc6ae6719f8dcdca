"""Exact quantiles of float32 tensors of any size, in linear time, by radix select on bit patterns.

``torch.quantile`` refuses inputs over 2^24 elements and a sort costs O(n log n) and a copy of the
tensor. Instead each float32 is mapped to an int32 *key* whose integer order is the float order
(flip the 31 low bits of negative numbers; IEEE-754 already orders positive ones):

    x     = [-2.0, -0.5, 0.0, 1.5]
    bits  = [-1073741824, -1090519040, 0, 1069547520]     # x.view(int32): negatives reversed
    keys  = [-1073741825, -1056964609, 0, 1069547520]     # increasing, like x

Two passes then find any set of ranks exactly (the classic MSD radix select, e.g. Alabi et al.,
"Fast k-selection algorithms for graphics processing units", JEA 2012):

1. a histogram of the high 16 bits of every key (65,536 buckets) tells, for each wanted rank k, the
   bucket that holds it and k's rank inside that bucket;
2. a second pass histograms the low 16 bits of the keys that fall in those few buckets, which
   pins down all 32 bits of each order statistic.

Both passes stream over chunks, so the tensor need not be in memory twice, and they are made of
``bincount``, shifts and masks, which run on CPU and GPU alike. All 22 order statistics that the
11 report quantiles need (both neighbours for interpolation) share the same two passes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from paw.device import single_threaded_cpu

QUANTILES = (0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 100)
"""Report quantiles in percent: columns ``q0 .. q100`` of ``per_param_stats.csv``."""

_HI_BUCKETS = 1 << 16


def float_keys(x):
    """Order-preserving int32 keys of a float32 tensor: ``x[i] < x[j]`` iff ``key[i] < key[j]``.

    The map is its own inverse (``float_keys`` of the keys viewed as floats gives the bits back).
    """
    bits = x.view(_torch().int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def keys_to_floats(keys: Sequence[int]) -> list[float]:
    """Inverse of :func:`float_keys` for a few Python ints: ``[-1073741825] -> [-2.0]``."""
    k = np.asarray(keys, dtype=np.int64).astype(np.int32)
    bits = k ^ ((k >> 31) & 0x7FFFFFFF)
    return [float(v) for v in bits.view(np.float32)]


def interpolation_points(n: int, percents: Sequence[float] = QUANTILES) -> list[tuple[int, int, float]]:
    """``(lower rank, upper rank, weight)`` for each quantile, as numpy's default ``linear`` method.

    The virtual index of quantile ``q`` is ``(n - 1) q``; its floor and the next rank are the two
    order statistics to blend (Hyndman & Fan 1996, definition 7).

    >>> interpolation_points(5, [0, 50, 90, 100])
    [(0, 1, 0.0), (2, 3, 0.0), (3, 4, 0.6000000000000001), (4, 4, 0.0)]
    """
    points = []
    for p in percents:
        virtual = (n - 1) * (p / 100.0)
        if virtual >= n - 1:
            points.append((n - 1, n - 1, 0.0))
            continue
        lo = int(math.floor(virtual))
        points.append((lo, lo + 1, virtual - lo))
    return points


def lerp(a: float, b: float, t: float) -> float:
    """numpy's ``_lerp``: exact at both ends (it interpolates from the nearer end)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


class RadixSelect:
    """Streamed exact order statistics of one float32 tensor given in chunks.

    Usage (each pass sees the same chunks in any order)::

        sel = RadixSelect(n, ranks=[0, 49, 99])
        for chunk in chunks: sel.first_pass(chunk)
        sel.plan()
        for chunk in chunks: sel.second_pass(chunk)
        sel.values()   # {rank: float}

    Memory: 65,536 counters, plus 65,536 per distinct bucket holding a wanted rank (at most
    ``len(ranks)``, so under 12 MB for the 22 ranks of the report); never a copy of the tensor.
    """

    def __init__(self, n: int, ranks: Iterable[int], *, device=None):
        torch = _torch()
        self.n = n
        self.ranks = sorted(set(ranks))
        if n <= 0 or any(r < 0 or r >= n for r in self.ranks):
            raise ValueError(f"ranks {self.ranks} out of range for {n} elements")
        self.device = device
        self._hist = torch.zeros(_HI_BUCKETS, dtype=torch.int64, device=device)
        self._lut = None
        self._where: dict[int, tuple[int, int]] = {}  # rank -> (group, rank inside its bucket)
        self._groups: list[int] = []  # high-bit bucket of each group
        self._low_hist = None
        self._ones = None

    def first_pass(self, chunk) -> None:
        """Count the high 16 bits of the chunk's keys. ``chunk``: float32, any shape."""
        hi = (float_keys(chunk.reshape(-1)) >> 16) + (_HI_BUCKETS // 2)
        self._hist += _torch().bincount(hi, minlength=_HI_BUCKETS)

    def plan(self) -> None:
        """Locate each wanted rank in a high-bit bucket; prepare the second pass."""
        torch = _torch()
        cum = torch.cumsum(self._hist, 0).cpu().numpy()
        if cum[-1] != self.n:
            raise ValueError(f"first pass saw {int(cum[-1])} elements, expected {self.n}")
        buckets = np.searchsorted(cum, np.asarray(self.ranks), side="right")
        self._groups = sorted({int(b) for b in buckets})
        for rank, bucket in zip(self.ranks, buckets, strict=True):
            below = int(cum[bucket - 1]) if bucket > 0 else 0
            self._where[rank] = (self._groups.index(int(bucket)), rank - below)
        # codes: slot 0 collects every key outside the wanted buckets, group g starts at (g + 1) << 16
        lut = torch.zeros(_HI_BUCKETS, dtype=torch.int64)
        lut[torch.tensor(self._groups)] = torch.arange(1, len(self._groups) + 1) * _HI_BUCKETS
        self._lut = lut.to(self.device)
        self._low_hist = torch.zeros((len(self._groups) + 1) * _HI_BUCKETS, dtype=torch.int64,
                                     device=self.device)

    def second_pass(self, chunk) -> None:
        """Histogram the low 16 bits of the keys in the wanted buckets.

        No boolean masking (a compaction costs more than all the arithmetic on CPU): keys in
        other buckets are counted too, into slot 0, which is never read.
        """
        torch = _torch()
        keys = float_keys(chunk.reshape(-1))
        code = torch.index_select(self._lut, 0, (keys >> 16) + (_HI_BUCKETS // 2))
        code += keys & 0xFFFF
        if self._ones is None or self._ones.numel() < code.numel():
            self._ones = torch.ones(code.numel(), dtype=torch.int64, device=self.device)
        self._low_hist.scatter_add_(0, code, self._ones[:code.numel()])

    def values(self) -> dict[int, float]:
        """``{rank: value}`` for every wanted rank, exact (bit for bit the sorted tensor's entry)."""
        low = self._low_hist.view(len(self._groups) + 1, _HI_BUCKETS)[1:].cumsum(1).cpu().numpy()
        keys = []
        for rank in self.ranks:
            group, inside = self._where[rank]
            low_bits = int(np.searchsorted(low[group], inside, side="right"))
            keys.append(((self._groups[group] - _HI_BUCKETS // 2) << 16) | low_bits)
        return dict(zip(self.ranks, keys_to_floats(keys), strict=True))


class SortSelect:
    """Same interface as :class:`RadixSelect`, by sorting: cheaper for small tensors (norms,
    biases) where the radix select's 65,536-bucket histograms cost more than the sort."""

    def __init__(self, n: int, ranks: Iterable[int], *, device=None):
        self.n, self.ranks = n, sorted(set(ranks))
        self._chunks: list = []

    def first_pass(self, chunk) -> None:
        pass

    def plan(self) -> None:
        pass

    def second_pass(self, chunk) -> None:
        self._chunks.append(chunk.reshape(-1))

    def values(self) -> dict[int, float]:
        torch = _torch()
        ordered = torch.sort(torch.cat(self._chunks)).values
        picked = ordered[torch.tensor(self.ranks, device=ordered.device)].tolist()
        return dict(zip(self.ranks, picked, strict=True))


SMALL_TENSOR = 1 << 16
"""Up to this many elements, :func:`order_statistics_selector` sorts instead of radix-selecting."""


def order_statistics_selector(n: int, ranks: Iterable[int], *, device=None):
    """A :class:`SortSelect` for small ``n``, else a :class:`RadixSelect` (same results, exact)."""
    return (SortSelect if n <= SMALL_TENSOR else RadixSelect)(n, ranks, device=device)


def quantiles_from_order_stats(n: int, values: dict[int, float],
                               percents: Sequence[float] = QUANTILES) -> list[float]:
    """Blend the order statistics in ``values`` (rank -> value) into numpy-linear quantiles."""
    return [lerp(values[lo], values[hi], t) for lo, hi, t in interpolation_points(n, percents)]


def wanted_ranks(n: int, percents: Sequence[float] = QUANTILES) -> list[int]:
    """Every rank the quantiles in ``percents`` need: ``wanted_ranks(5, [50, 90]) == [2, 3, 4]``."""
    return sorted({r for lo, hi, _ in interpolation_points(n, percents) for r in (lo, hi)})


def exact_quantiles(x, percents: Sequence[float] = QUANTILES, *, chunk_size: int | None = None) -> list[float]:
    """Exact quantiles of a float32 tensor of any size, equal to ``numpy.quantile(x, p / 100)``.

    NaN anywhere gives NaN for every quantile, as in numpy.

    >>> import torch
    >>> exact_quantiles(torch.tensor([3.0, -1.0, 2.0, 10.0]), [0, 50, 100])
    [-1.0, 2.5, 10.0]
    """
    torch = _torch()
    flat = x.detach().reshape(-1).to(torch.float32)
    n = flat.numel()
    if n == 0:
        raise ValueError("quantiles of an empty tensor")
    if bool(torch.isnan(flat).any()):
        return [math.nan] * len(percents)

    chunks = flat.split(chunk_size or (1 << 24 if flat.device.type == "cuda" else 1 << 18))
    sel = order_statistics_selector(n, wanted_ranks(n, percents), device=flat.device)
    with single_threaded_cpu([flat.device]):
        for c in chunks:
            sel.first_pass(c)
        sel.plan()
        for c in chunks:
            sel.second_pass(c)
        return quantiles_from_order_stats(n, sel.values(), percents)


def _torch():
    import torch

    return torch
