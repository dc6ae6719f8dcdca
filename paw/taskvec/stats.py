"""Statistics of the task vectors Δ_i = model_i − base of ONE tensor, streamed over chunks.

Δ is formed in float32 chunk by chunk (never a whole float32 copy of the tensor) and every sum is
accumulated in float64. One pass over the chunks gathers everything:

- Σ |Δ|, min and max of Δ, the power sums Σ (Δ − K)^p for p = 1..4 about a shift K near the mean
  (from a random sample of Δ), whence Σ Δ, Σ Δ² and the central moments (:class:`_Moments`), and
  with several models the Gram matrix Σ Δ_i·Δ_j (its off-diagonal entries give the pairwise cosines);
- the high-bit histogram of the radix select, and the elements of the buckets that the sample
  says hold the quantiles' order statistics (:mod:`paw.taskvec.quantiles`).

A second pass runs only where the first cannot be exact: a quantile's bucket the sample missed, a
mean too far from K for the shifted sums (the textbook two-pass moments about the exact mean then),
or a sum that is not finite (to look for NaN).

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
    sample_positions,
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

    One pass over the chunks (a second only where the quantiles' guess missed a bucket, the
    moments' shift proved poor, or a sum is not finite: see the module docstring).

    >>> import torch
    >>> r = delta_stats(torch.zeros(4), [torch.tensor([1., -1., 2., 2.])])
    >>> r.stats[0].l2, r.stats[0].mean, r.stats[0].quantiles[5]
    (3.1622776601683795, 1.0, 1.5)
    """
    torch = _torch()
    n = base.numel()
    if n == 0:
        raise ValueError("empty tensor")
    chunk = chunk_size or default_chunk(base.device, len(models))
    flat_base, flats = base.reshape(-1), [m.reshape(-1) for m in models]

    def delta(m, b, out):  # float32 Δ; bf16/fp16 values are exact in float32, so subtract them as they are
        b = b if b.dtype in (torch.bfloat16, torch.float16, torch.float32) else b.to(torch.float32)
        return out.copy_(m).sub_(b)

    work = torch.empty(len(flats), min(chunk, n), dtype=torch.float32, device=base.device)

    def deltas():  # Δ of every model, chunk by chunk, in the same buffer each time: [(c,)] * k
        for start in range(0, n, chunk):
            b = flat_base[start:start + chunk]
            yield [delta(m[start:start + chunk], b, out[:b.numel()]) for m, out in zip(flats, work, strict=True)]

    pick = sample_positions(n, device=base.device)
    samples = [delta(m[pick], flat_base[pick], torch.empty(pick.numel(), device=base.device)) for m in flats]
    acc = _Moments([_shift(s) for s in samples], base.device)
    selects = [order_statistics_selector(n, wanted_ranks(n), device=base.device, sample=s) for s in samples]
    for ds in deltas():
        acc.first_pass(ds)
        for sel, d in zip(selects, ds, strict=True):
            sel.first_pass(d)
    again = [sel.plan() for sel in selects]
    if acc.end_first_pass(n) or any(again):
        for ds in deltas():
            acc.second_pass(ds)
            for sel, d, more in zip(selects, ds, again, strict=True):
                if more:
                    sel.second_pass(d)
    quantiles = [(math.nan,) * len(QUANTILES) if nan else
                 tuple(quantiles_from_order_stats(n, sel.values()))
                 for sel, nan in zip(selects, acc.has_nan, strict=True)]
    return acc.finish(n, quantiles)


def _shift(sample) -> float:
    """The sample's mean where it is large against its spread, else 0: sums of (Δ − shift)^p then
    lose nothing to cancellation (see :class:`_Moments`); 0 keeps Σ Δ and Σ Δ² as plain sums."""
    s = sample.double()
    mean, std = float(s.mean()), float(s.std(correction=0)) if s.numel() > 1 else 0.0
    return mean if abs(mean) > 2 * std else 0.0


class _Moments:
    """float64 power sums of Δ − shift for k task vectors over the chunks of one tensor.

    One pass gathers S_p = Σ (Δ − K)^p for p = 1..4 with K a per-model shift near the mean, and
    the central moments follow from them (the "shifted data" algorithm; Chan, Golub & LeVeque,
    "Algorithms for computing the sample variance", Am. Stat. 1983): with μ' = S_1 / n,

        M_2 = S_2 − n μ'²,  M_3 = S_3 − 3 μ' S_2 + 2 n μ'³,  M_4 = S_4 − 4 μ' S_3 + 6 μ'² S_2 − 3 n μ'⁴.

    Their rounding error grows with (μ' / σ)², small when K is near the mean. Where it is not
    (n μ'² > M_2 / 100, e.g. a mean far from the sample's), a second pass takes the textbook
    two-pass moments about the exact mean instead, as it does to look for NaN when a sum is not
    finite.
    """

    def __init__(self, shifts: Sequence[float], device):
        torch = _torch()
        self.k = k = len(shifts)
        self.shifts = list(shifts)
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
        self._parts: list[list] = [[] for _ in range(k)]  # per chunk: S_1 .. S_4 and Σ |Δ|
        self._extremes: list[list] = [[] for _ in range(k)]  # per chunk: min and max of Δ
        self._work = None
        self.gram = zeros(k, k)  # Σ (Δ_i − K_i)(Δ_j − K_j), for k > 1
        self.mean = None
        self.central: list[tuple[float, float, float]] | None = None
        self._redo: list[bool] = []
        self._check_nan: list[bool] = []
        self.has_nan = [False] * k
        self._m = None

    def first_pass(self, ds) -> None:
        """S_1 .. S_4, Σ |Δ|, min and max of Δ (and the Gram matrix for several models)."""
        torch = _torch()
        work = self._buffers(ds[0].numel())
        for i, d in enumerate(ds):
            e, e2 = work[i], work[-1]
            e.copy_(d)
            if self.shifts[i]:
                e.sub_(self.shifts[i])
            torch.mul(e, e, out=e2)
            parts = [e.sum(), e2.sum(), torch.dot(e2, e), torch.dot(e2, e2)]
            if self.shifts[i]:
                e2.copy_(d)
            parts.append(torch.abs(e2 if self.shifts[i] else e, out=e2).sum())
            self._parts[i].append(torch.stack(parts))
            self._extremes[i].append(torch.stack(torch.aminmax(d)))
        if self.k > 1:
            e = work[:-1]
            self.gram += e @ e.T

    def _buffers(self, size: int):
        """k + 1 float64 rows reused from chunk to chunk (a fresh 1 MB tensor per op costs page faults)."""
        torch = _torch()
        if self._work is None or self._work.shape[1] < size:
            self._work = torch.empty(self.k + 1, size, dtype=torch.float64, device=self.gram.device)
        return self._work[:, :size]

    def end_first_pass(self, n: int) -> bool:
        """Central moments from the power sums; True when a second pass must redo some."""
        torch = _torch()
        self.sums = torch.stack([torch.stack(p).sum(0) for p in self._parts])  # (k, 5)
        extremes = [torch.stack(x) for x in self._extremes]  # (chunks, 2) each
        self.low = torch.stack([x[:, 0].min() for x in extremes])
        self.high = torch.stack([x[:, 1].max() for x in extremes])
        s1, s2, s3, s4, _ = self.sums.T.tolist()
        self.mean = [k + a / n for k, a in zip(self.shifts, s1, strict=True)]
        self.central, self._redo, self._check_nan = [], [], []
        for a, b, c, d in zip(s1, s2, s3, s4, strict=True):
            mu = a / n
            m2 = b - n * mu * mu
            self.central.append((m2, c - 3 * mu * b + 2 * n * mu ** 3,
                                 d - 4 * mu * c + 6 * mu * mu * b - 3 * n * mu ** 4))
            finite = math.isfinite(a) and math.isfinite(b)
            self._check_nan.append(not finite)
            self._redo.append(not finite or n * mu * mu * 100 > m2)
        if any(self._redo):
            self._m = torch.zeros(self.k, 3, dtype=torch.float64, device=self.sums.device)
        return any(self._redo)

    def second_pass(self, ds) -> None:
        """Σ (Δ − mean)^p for p = 2, 3, 4 about the exact mean, for the models that need it."""
        torch = _torch()
        for i, d in enumerate(ds):
            if not self._redo[i]:
                continue
            c = d.to(torch.float64).sub_(self.mean[i])
            c2 = c * c
            self._m[i] += torch.stack((c2.sum(), torch.dot(c2, c), torch.dot(c2, c2)))
            if self._check_nan[i] and not self.has_nan[i]:
                self.has_nan[i] = bool(torch.isnan(d).any())

    def finish(self, n: int, quantiles: list[tuple[float, ...]]) -> TensorResult:
        s1, s2, _, _, s_abs = self.sums.T.tolist()
        shifts = self.shifts
        if self.k > 1:  # Σ Δ_i Δ_j from the shifted sums
            g = self.gram.tolist()
            gram = [[g[i][j] + shifts[j] * s1[i] + shifts[i] * s1[j] + n * shifts[i] * shifts[j]
                     for j in range(self.k)] for i in range(self.k)]
        else:
            gram = [[s2[0] + 2 * shifts[0] * s1[0] + n * shifts[0] * shifts[0]]]
        redone = self._m.tolist() if self._m is not None else None
        maxabs = [max(-lo, hi) if lo == lo and hi == hi else math.nan
                  for lo, hi in zip(self.low.tolist(), self.high.tolist(), strict=True)]
        stats = [_finish(n, gram[i][i], s_abs[i], maxabs[i], self.mean[i],
                         *(redone[i] if self._redo[i] else self.central[i]), quantiles[i])
                 for i in range(self.k)]
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
