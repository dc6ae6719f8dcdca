"""Exact quantiles of float32 tensors of any size, in linear time, by radix select on bit patterns.

``torch.quantile`` refuses inputs over 2^24 elements and a sort costs O(n log n) and a copy of the
tensor. Instead each float32 is mapped to an int32 *key* whose integer order is the float order
(flip the 31 low bits of negative numbers; IEEE-754 already orders positive ones):

    x     = [-2.0, -0.5, 0.0, 1.5]
    bits  = [-1073741824, -1090519040, 0, 1069547520]     # x.view(int32): negatives reversed
    keys  = [-1073741825, -1056964609, 0, 1069547520]     # increasing, like x

Two levels then find any set of ranks exactly (the classic MSD radix select, e.g. Alabi et al.,
"Fast k-selection algorithms for graphics processing units", JEA 2012):

1. a histogram of the high 16 bits of every key (65,536 buckets) tells, for each wanted rank k, the
   bucket that holds it and k's rank inside that bucket;
2. the rank inside the bucket is found among the bucket's own elements.

One pass suffices when the buckets of step 2 are guessed before it: a random sample of the tensor
(about 1 in 32 elements) says where each wanted rank falls, give or take five standard deviations
of the sample's rank, and the pass keeps every element of the buckets in those brackets (a few per
cent of the tensor) beside its histogram. The exact histogram then names the buckets; when the
guess holds them (nearly always), a ``kthvalue`` among the kept elements gives each order statistic.
Otherwise a second pass histograms the low 16 bits of the keys in the missed buckets, which pins
down all 32 bits. Exact either way; the sample only decides how much work it takes.

Both passes stream over chunks, so the tensor need not be in memory twice, and they are made of
``bincount``, shifts, masks and gathers, which run on CPU and GPU alike. All 22 order statistics
that the 11 report quantiles need (both neighbours for interpolation) share the same pass.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence

import numpy as np

from paw.device import single_threaded_cpu

QUANTILES = (0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 100)
"""Report quantiles in percent: columns ``q0 .. q100`` of ``per_param_stats.csv``."""

_HI_BUCKETS = 1 << 16
_HALF = _HI_BUCKETS // 2
_LOW_HALF = 0 if sys.byteorder == "little" else 1  # the int16 holding a float32's low 16 bits
_Z = 5.0  # half-width of a guessed bracket, in standard deviations of the sample's rank
KEEP_LIMIT = 1 / 16
"""Most elements :class:`RadixSelect` keeps in its first pass, as a share of the tensor; past it the
guess is dropped and a second pass finds the order statistics."""
SAMPLE_SHARE = 32
"""One element in about this many goes into the sample that guesses the buckets."""


def float_keys(x):
    """Order-preserving int32 keys of a float32 tensor: ``x[i] < x[j]`` iff ``key[i] < key[j]``.

    The map is its own inverse (``float_keys`` of the keys viewed as floats gives the bits back).
    """
    bits = x.view(_torch().int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def _raw_buckets(flat):
    """High 16 bits of each float32 as an int32 in [0, 65536): two ops instead of the keys' five.

    Positive values land in [32768, 65536) in increasing order, negative ones in [0, 32768) in
    decreasing order; :func:`_key_order` turns a table indexed this way into key order.
    """
    raw = flat.view(_torch().int32) >> 16
    raw += _HALF
    return raw


def _key_order(table):
    """A 65,536-entry table indexed by :func:`_raw_buckets` -> indexed by ``(key >> 16) + 32768``."""
    return _torch().cat([table[:_HALF].flip(0), table[_HALF:]])


def _raw_order(table: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_key_order`, for a numpy table (the map is its own inverse)."""
    return np.concatenate([table[:_HALF][::-1], table[_HALF:]])


def sample_positions(n: int, *, device=None):
    """About one in :data:`SAMPLE_SHARE` of ``range(n)`` (at least 16,384, at most 2^20): one
    position drawn at random in each block of ``step`` (a seed fixed by ``n``: the same positions
    every run). Random, so no periodic layout (rows, heads) falls in step with it; increasing, so
    reading them streams through memory instead of missing the cache at every position. Every
    position when ``n`` is small.

    >>> sample_positions(5).tolist()
    [0, 1, 2, 3, 4]
    """
    torch = _torch()
    target = min(max(n // SAMPLE_SHARE, 1 << 14), 1 << 20)
    if target >= n:
        return torch.arange(n, device=device)
    step = n // target
    gen = torch.Generator().manual_seed(n)
    return (torch.arange(target) * step + torch.randint(0, step, (target,), generator=gen)).to(device)


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

        sel = RadixSelect(n, ranks=[0, 49, 99], sample=x[::32])
        for chunk in chunks: sel.first_pass(chunk)
        if sel.plan():                                  # True: the sample's guess missed a bucket
            for chunk in chunks: sel.second_pass(chunk)
        sel.values()   # {rank: float}

    Without a ``sample`` nothing is kept in the first pass and ``plan`` always asks for the second.
    Memory: 65,536 counters, the kept elements (about 4% of the tensor for the 22 ranks of the
    report, never more than :data:`KEEP_LIMIT` of it), and for a second pass 65,536 counters per
    missed bucket; never a copy of the tensor.
    """

    def __init__(self, n: int, ranks: Iterable[int], *, device=None, sample=None):
        torch = _torch()
        self.n = n
        self.ranks = sorted(set(ranks))
        if n <= 0 or any(r < 0 or r >= n for r in self.ranks):
            raise ValueError(f"ranks {self.ranks} out of range for {n} elements")
        self.device = device
        self._hist = torch.zeros(_HI_BUCKETS, dtype=torch.int64, device=device)  # by raw high bits
        self._keep = None if sample is None or sample.numel() == 0 else self._guess(sample)
        # untouched pages of an empty CPU tensor cost no memory: only what is written is resident
        self._kept = (None if self._keep is None else
                      torch.empty(int(KEEP_LIMIT * n) + _HI_BUCKETS, device=device))
        self._kept_count = 0
        self._cum = None
        self._found: dict[int, float] = {}
        self._lut = None
        self._where: dict[int, tuple[int, int]] = {}  # rank -> (group, rank inside its bucket)
        self._groups: list[int] = []  # high-bit bucket (key order) of each group
        self._low_hist = None
        self._ones = self._work = None

    def _guess(self, sample):
        """A bool table over raw high bits: the buckets that probably hold a wanted rank."""
        torch = _torch()
        flat = sample.reshape(-1).to(torch.float32)
        s = flat.numel()
        cum = torch.cumsum(_key_order(torch.bincount(_raw_buckets(flat), minlength=_HI_BUCKETS)), 0).cpu().numpy()
        keep = np.zeros(_HI_BUCKETS, dtype=bool)
        for rank in self.ranks:
            p = rank / max(self.n - 1, 1)
            centre, spread = p * (s - 1), _Z * math.sqrt(s * p * (1 - p)) + 2
            lo, hi = math.floor(centre - spread), math.ceil(centre + spread)
            first = 0 if lo <= 0 else int(np.searchsorted(cum, lo, side="right"))
            last = _HI_BUCKETS - 1 if hi >= s - 1 else int(np.searchsorted(cum, hi, side="right"))
            keep[first:last + 1] = True
        return torch.from_numpy(_raw_order(keep)).to(self.device)

    def first_pass(self, chunk) -> None:
        """Count the high 16 bits of the chunk's values; keep those in the guessed buckets.

        Values whose low 16 bits are all zero are not kept: in their bucket they are one value,
        the bucket's first (or, below zero, last), and the histogram counts them. Δ of bf16 weights
        is mostly such values, so what is kept stays small even where they pile up in few buckets.
        """
        torch = _torch()
        flat = chunk.reshape(-1).contiguous()
        raw, wanted, low = self._buffers(flat.numel())
        torch.bitwise_right_shift(flat.view(torch.int32), 16, out=raw)
        raw += _HALF
        self._hist.index_add_(0, raw, self._ones[:raw.numel()])
        if self._keep is None:
            return
        torch.index_select(self._keep, 0, raw, out=wanted)
        torch.ne(flat.view(torch.int16)[_LOW_HALF::2], 0, out=low)  # low 16 bits not all zero
        wanted &= low
        # numpy's boolean index is 4x cheaper than torch's nonzero on a mostly-false CPU mask
        kept = torch.from_numpy(flat.numpy()[wanted.numpy()]) if flat.device.type == "cpu" else flat[wanted]
        end = self._kept_count + kept.numel()
        if end > self._kept.numel():  # a poor guess: stop keeping
            self._keep, self._kept = None, None
            return
        self._kept[self._kept_count:end] = kept  # one buffer: small long-lived pieces fragment the heap
        self._kept_count = end

    def _buffers(self, size: int):
        """Work buffers reused from chunk to chunk (a fresh 1 MB tensor per op costs page faults)."""
        torch = _torch()
        if self._ones is None or self._ones.numel() < size:
            self._ones = torch.ones(size, dtype=torch.int64, device=self.device)
            self._work = (torch.empty(size, dtype=torch.int32, device=self.device),
                          torch.empty(size, dtype=torch.bool, device=self.device),
                          torch.empty(size, dtype=torch.bool, device=self.device))
        return tuple(t[:size] for t in self._work)

    def plan(self) -> bool:
        """Locate each wanted rank in a high-bit bucket; True when a second pass is needed."""
        torch = _torch()
        cum = torch.cumsum(_key_order(self._hist), 0).cpu().numpy()
        if cum[-1] != self.n:
            raise ValueError(f"first pass saw {int(cum[-1])} elements, expected {self.n}")
        buckets = np.searchsorted(cum, np.asarray(self.ranks), side="right")
        missed = self._select_kept(cum, buckets)
        self._groups = sorted({int(b) for r, b in zip(self.ranks, buckets, strict=True) if r in missed})
        if not self._groups:
            return False
        for rank, bucket in zip(self.ranks, buckets, strict=True):
            if rank in missed:
                below = int(cum[bucket - 1]) if bucket > 0 else 0
                self._where[rank] = (self._groups.index(int(bucket)), rank - below)
        # codes: slot 0 collects every key outside the wanted buckets, group g starts at (g + 1) << 16
        lut = torch.zeros(_HI_BUCKETS, dtype=torch.int64)
        lut[torch.tensor(self._groups)] = torch.arange(1, len(self._groups) + 1) * _HI_BUCKETS
        self._lut = lut.to(self.device)
        self._low_hist = torch.zeros((len(self._groups) + 1) * _HI_BUCKETS, dtype=torch.int64,
                                     device=self.device)
        return True

    def _select_kept(self, cum, buckets) -> set[int]:
        """Order statistics found among the kept elements; returns the ranks still missing."""
        torch = _torch()
        if self._keep is None:
            return set(self.ranks)
        keep = _key_order(self._keep.cpu()).numpy()
        keys = float_keys(self._kept[:self._kept_count]) if self._kept_count else None
        self._kept = None
        if keys is not None:
            key_buckets = (keys >> 16) + _HALF
        missed = set()
        for bucket in sorted({int(b) for b in buckets}):
            ranks = [r for r, b in zip(self.ranks, buckets, strict=True) if b == bucket]
            below = int(cum[bucket - 1]) if bucket > 0 else 0
            if not keep[bucket]:
                missed.update(ranks)
                continue
            inside = keys[key_buckets == bucket] if keys is not None else torch.zeros(0, dtype=torch.int32)
            zeros = int(cum[bucket]) - below - inside.numel()  # values of the bucket with low bits 0
            if zeros < 0:
                raise AssertionError("kept elements do not match the histogram")  # a bug, never data
            # the value with low bits 0 comes first in a bucket of positive keys, last below zero
            positive = bucket >= _HALF
            zero_key = ((bucket - _HALF) << 16) | (0 if positive else 0xFFFF)
            picked = []
            for rank in ranks:
                k = rank - below - (zeros if positive else 0)  # rank among the kept elements
                in_zeros = k < 0 if positive else k >= inside.numel()
                picked.append(zero_key if in_zeros else int(torch.kthvalue(inside, k + 1).values))
            self._found.update(zip(ranks, keys_to_floats(picked), strict=True))
        return missed

    def second_pass(self, chunk) -> None:
        """Histogram the low 16 bits of the keys in the missed buckets (a no-op when none is).

        No boolean masking (a compaction costs more than all the arithmetic on CPU): keys in
        other buckets are counted too, into slot 0, which is never read.
        """
        if not self._groups:
            return
        torch = _torch()
        keys = float_keys(chunk.reshape(-1).contiguous())
        code = torch.index_select(self._lut, 0, (keys >> 16) + _HALF)
        code += keys & 0xFFFF
        self._buffers(code.numel())
        self._low_hist.scatter_add_(0, code, self._ones[:code.numel()])

    def values(self) -> dict[int, float]:
        """``{rank: value}`` for every wanted rank, exact (bit for bit the sorted tensor's entry)."""
        found = dict(self._found)
        if self._groups:
            low = self._low_hist.view(len(self._groups) + 1, _HI_BUCKETS)[1:].cumsum(1).cpu().numpy()
            ranks = sorted(self._where)
            keys = []
            for rank in ranks:
                group, inside = self._where[rank]
                low_bits = int(np.searchsorted(low[group], inside, side="right"))
                keys.append(((self._groups[group] - _HALF) << 16) | low_bits)
            found.update(zip(ranks, keys_to_floats(keys), strict=True))
        return {r: found[r] for r in self.ranks}


class SortSelect:
    """Same interface as :class:`RadixSelect`, by sorting: cheaper for small tensors (norms,
    biases) where the radix select's 65,536-bucket histograms cost more than the sort."""

    def __init__(self, n: int, ranks: Iterable[int], *, device=None, sample=None):
        self.n, self.ranks = n, sorted(set(ranks))
        self._chunks: list = []

    def first_pass(self, chunk) -> None:
        self._chunks.append(chunk.reshape(-1).clone())  # the caller may reuse the chunk's memory

    def plan(self) -> bool:
        return False

    def second_pass(self, chunk) -> None:
        pass

    def values(self) -> dict[int, float]:
        torch = _torch()
        ordered = torch.sort(torch.cat(self._chunks)).values
        picked = ordered[torch.tensor(self.ranks, device=ordered.device)].tolist()
        return dict(zip(self.ranks, picked, strict=True))


SMALL_TENSOR = 1 << 16
"""Up to this many elements, :func:`order_statistics_selector` sorts instead of radix-selecting."""


def order_statistics_selector(n: int, ranks: Iterable[int], *, device=None, sample=None):
    """A :class:`SortSelect` for small ``n``, else a :class:`RadixSelect` (same results, exact).

    ``sample``: some of the same values (see :func:`sample_positions`), to find them in one pass.
    """
    return (SortSelect if n <= SMALL_TENSOR else RadixSelect)(n, ranks, device=device, sample=sample)


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
    with single_threaded_cpu([flat.device]):
        sel = order_statistics_selector(n, wanted_ranks(n, percents), device=flat.device,
                                        sample=flat[sample_positions(n, device=flat.device)])
        for c in chunks:
            sel.first_pass(c)
        if sel.plan():
            for c in chunks:
                sel.second_pass(c)
        return quantiles_from_order_stats(n, sel.values(), percents)


def _torch():
    import torch

    return torch
