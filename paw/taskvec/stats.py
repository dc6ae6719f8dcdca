"""Statistics of the task vectors Δ_i = model_i − base of ONE tensor, streamed over chunks.

Δ is formed in float32 chunk by chunk (never a whole float32 copy of the tensor) and every sum is
accumulated in float64. Two passes over the same chunks:

1. Σ Δ, Σ |Δ|, max |Δ|, the Gram matrix Σ Δ_i·Δ_j of all models (its diagonal is Σ Δ², its
   off-diagonal entries give the pairwise cosines), and the high-bit histogram of the radix select;
2. the central moments Σ (Δ − mean)^{2,3,4} about the exact mean of pass 1 (the textbook two-pass
   algorithm, stable where raw power sums are not) and the low-bit histogram that makes the
   quantiles exact (see :mod:`paw.taskvec.quantiles`).

Definitions follow numpy/scipy defaults: ``std`` has ddof=0, ``skew`` and ``kurtosis_excess``
are the biased (population) moment ratios m3 / m2^1.5 and m4 / m2^2 − 3.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from paw.taskvec.quantiles import (
    QUANTILES,
    order_statistics_selector,
    quantiles_from_order_stats,
    wanted_ranks,
)

CPU_CHUNK = 1 << 17  # elements; 1 MB of float64 per model stays in L2 between operations (measured
# on a 2-core Xeon, 8M elements: 17 ns/element at 2^16 or 2^17, 20 at 2^18, 28 at 2^20)
GPU_CHUNK = 1 << 24


@dataclass(frozen=True)
class DeltaStats:
    """Statistics of one model's Δ on one tensor (all float64 Python numbers)."""

    numel: int
    l2: float
    l1: float
    maxabs: float
    mean: float
    std: float
    skew: float
    kurtosis_excess: float
    quantiles: tuple[float, ...]  # at QUANTILES percent
    sumsq: float  # Σ Δ² exactly as accumulated (l2 squared may differ in the last bit)


@dataclass(frozen=True)
class TensorResult:
    """Per-model statistics and the Gram matrix ``gram[i][j] = Σ Δ_i·Δ_j`` for one tensor."""

    stats: list[DeltaStats]
    gram: list[list[float]]
    spectra: list | None = None  # paw.taskvec.spectra.SpectralStats per model (None unless 2-D), with --spectra
    pairs: dict | None = None    # {(i, j): PairCounts} for i < j, with --spectra


def default_chunk(device, models: int = 1) -> int:
    if getattr(device, "type", str(device)) == "cuda":
        return GPU_CHUNK
    return max(CPU_CHUNK // max(models, 1), 1 << 14)


def delta_stats(base, models: Sequence, *, chunk_size: int | None = None) -> TensorResult:
    """Statistics of ``Δ_i = models[i] − base`` for tensors of identical shape, on their device.

    >>> import torch
    >>> r = delta_stats(torch.zeros(4), [torch.tensor([1., -1., 2., 2.])])
    >>> r.stats[0].l2, r.stats[0].mean, r.stats[0].quantiles[5]
    (3.1622776601683795, 1.0, 1.5)
    """
    n = base.numel()
    if n == 0:
        raise ValueError("empty tensor")
    chunk = chunk_size or default_chunk(base.device, len(models))
    flat_base, flats = base.reshape(-1), [m.reshape(-1) for m in models]

    def deltas():  # Δ of every model, chunk by chunk, float32: [(c,)] * k
        for start in range(0, n, chunk):
            b32 = flat_base[start:start + chunk].to(_torch().float32)
            yield [m[start:start + chunk].to(_torch().float32) - b32 for m in flats]

    acc = _Moments(len(flats), base.device)
    selects = [order_statistics_selector(n, wanted_ranks(n), device=base.device) for _ in flats]
    for ds in deltas():
        acc.first_pass(ds)
        for sel, d in zip(selects, ds, strict=True):
            sel.first_pass(d)
    acc.end_first_pass(n)
    for sel in selects:
        sel.plan()
    for ds in deltas():
        acc.second_pass(ds)
        for sel, d in zip(selects, ds, strict=True):
            sel.second_pass(d)
    quantiles = [(math.nan,) * len(QUANTILES) if nan else
                 tuple(quantiles_from_order_stats(n, sel.values()))
                 for sel, nan in zip(selects, acc.has_nan, strict=True)]
    return acc.finish(n, quantiles)


class _Moments:
    """float64 accumulators for k task vectors over the chunks of one tensor (two passes)."""

    def __init__(self, k: int, device):
        torch = _torch()
        self.k = k
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
        self.total, self.total_abs, self.maxabs = zeros(k), zeros(k), zeros(k)
        self.gram = zeros(k, k)
        self.m2, self.m3, self.m4 = zeros(k), zeros(k), zeros(k)
        self.mean = None
        self._check_nan: list[bool] = []
        self.has_nan = [False] * k

    def _rows64(self, ds):  # (k, c) float64; no stacking copy for the common single model
        torch = _torch()
        return ds[0].to(torch.float64).unsqueeze(0) if self.k == 1 else torch.stack(ds).to(torch.float64)

    def first_pass(self, ds) -> None:
        """Σ Δ, Σ |Δ|, max |Δ| and the Gram matrix Σ Δ_i·Δ_j."""
        d64 = self._rows64(ds)  # (k, c)
        a = d64.abs()
        self.total += d64.sum(1)
        self.total_abs += a.sum(1)
        self.maxabs = _torch().maximum(self.maxabs, a.amax(1))
        self.gram += d64 @ d64.T

    def end_first_pass(self, n: int) -> None:
        self.mean = self.total / n
        self._check_nan = [not math.isfinite(v) for v in self.total.tolist()]  # NaN or ±inf

    def second_pass(self, ds) -> None:
        """Σ (Δ − mean)^p for p = 2, 3, 4, about the exact mean (stable two-pass moments)."""
        c = self._rows64(ds).sub_(self.mean[:, None])
        c2 = c * c
        self.m2 += c2.sum(1)
        self.m3 += self._rowdot(c2, c)
        self.m4 += self._rowdot(c2, c2)
        for i, d in enumerate(ds):
            if self._check_nan[i] and not self.has_nan[i]:
                self.has_nan[i] = bool(_torch().isnan(d).any())

    def _rowdot(self, a, b):  # (k,) Σ_j a[i, j] b[i, j]: a BLAS dot per row, no (k, c) temporary
        return _torch().bmm(a.unsqueeze(1), b.unsqueeze(2)).reshape(self.k)

    def finish(self, n: int, quantiles: list[tuple[float, ...]]) -> TensorResult:
        gram = self.gram.tolist()
        columns = zip(self.total_abs.tolist(), self.maxabs.tolist(), self.mean.tolist(), self.m2.tolist(),
                      self.m3.tolist(), self.m4.tolist(), quantiles, strict=True)
        stats = [_finish(n, gram[i][i], *col) for i, col in enumerate(columns)]
        return TensorResult(stats, gram)


def _finish(n: int, sumsq: float, s_abs: float, maxabs: float, mean: float, m2: float, m3: float,
            m4: float, quantiles: tuple[float, ...]) -> DeltaStats:
    var = m2 / n
    skew = (m3 / n) / var ** 1.5 if var > 0 else math.nan
    kurt = (m4 / n) / (var * var) - 3.0 if var > 0 else math.nan
    return DeltaStats(numel=n, l2=math.sqrt(sumsq), l1=s_abs, maxabs=maxabs, mean=mean,
                      std=math.sqrt(var), skew=skew, kurtosis_excess=kurt, quantiles=quantiles,
                      sumsq=sumsq)


def _torch():
    import torch

    return torch
