"""Spectra of task vectors and the interference between them, as pure functions over tensors.

How much of a fine-tune a rank-r update can hold, per 2-D tensor Δ (out, in) with singular values
s_1 ≥ s_2 ≥ ... ≥ s_m (m = min(out, in)):

- **stable rank** ``‖Δ‖²_F / ‖Δ‖²_2 = Σ s_i² / s_1²`` (Rudelson & Vershynin 2007): 1 for a rank-1
  Δ, m for a flat spectrum; never above the rank.
- **effective rank** ``exp(H(p))`` with ``p_i = s_i / Σ s_j`` and H the Shannon entropy (Roy &
  Vetterli 2007, "The effective rank: a measure of effective dimensionality"); also ≤ the rank.
- **energy at k** ``Σ_{i≤k} s_i² / ‖Δ‖²_F``: the share of Δ the best rank-k update holds (Eckart &
  Young 1936), which is what a rank-k LoRA extracted from the fine-tune keeps.

>>> import torch                                                           # doctest: +SKIP
>>> s = spectral_stats(torch.diag(torch.tensor([3., 1., 0.])), ranks=(1, 2))   # doctest: +SKIP
>>> s.stable_rank, s.energies                  # 10/9, (9/10, 10/10)        # doctest: +SKIP
(1.1111111111111112, (0.9, 1.0))

Across models, per tensor (any shape), the interference TIES and DARE act on (Yadav et al. 2023):

- **sign agreement**: of the entries both fine-tunes moved (Δ_a ≠ 0 and Δ_b ≠ 0), the share where
  the signs agree: 0.5 for independent noise, 1 for the same direction (TIES's sign election);
- **top-k mask overlap**: the Jaccard index ``|M_a ∩ M_b| / |M_a ∪ M_b|`` of the masks of the
  ``density`` share of entries with the largest |Δ| (TIES's trim, ``paw.merge.methods.top_k_mask``,
  ties in flat-index order), zero entries left out: 0 when one of them did not move the tensor.

Pairs are kept as integer counts (:class:`PairCounts`) so the figures of a whole model are exact
sums over tensors. torch is imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from paw.errors import PawError
from paw.taskvec.groups import GROUP_ORDER, groups_of, layer_index
from paw.taskvec.select import top_k_mask
from paw.transfer.linalg import EXACT_SVD_DIM, OVERSAMPLE, top_singular

DEFAULT_RANKS = (8, 16, 64)
DEFAULT_DENSITY = 0.2  # TIES keeps the top 20% by magnitude (Yadav et al. 2023, k = 20)


@dataclass(frozen=True)
class SpectralStats:
    """The spectrum figures of one 2-D Δ (float64 Python numbers; ``nan`` for an all-zero Δ).

    ``exact`` tells whether every singular value was computed (the full SVD) or only the top
    ``max(ranks)`` by the randomised range finder, in which case ``effective_rank`` is an estimate
    (see :func:`effective_rank_from_top`).
    """

    stable_rank: float
    effective_rank: float
    energies: tuple[float, ...]  # at ``ranks``
    exact: bool


@dataclass(frozen=True)
class PairCounts:
    """Integer counts of two task vectors on one tensor: ``agree / both`` and ``inter / union``."""

    both: int    # entries both task vectors moved (non-zero in each)
    agree: int   # of those, entries whose signs agree
    inter: int   # entries in both top-k masks
    union: int   # entries in either top-k mask

    @property
    def sign_agreement(self) -> float:
        return self.agree / self.both if self.both else math.nan

    @property
    def mask_overlap(self) -> float:
        return self.inter / self.union if self.union else math.nan


def spectral_stats(delta, *, ranks: Sequence[int] = DEFAULT_RANKS, seed: int = 0,
                   exact: bool | None = None) -> SpectralStats:
    """Stable rank, effective rank and energy at ``ranks`` of a 2-D ``delta`` (out, in).

    The exact path drops singular values below ``s_1 · max(out, in) · eps`` (float32 rounding of an
    exactly low-rank Δ), so a rank-2 Δ has energy 1.0 at k ≥ 2 and effective rank ≤ 2.
    ``exact=None`` decides as :func:`paw.transfer.linalg.top_singular` does: the full SVD (float64)
    when the smaller side is at most :data:`~paw.transfer.linalg.EXACT_SVD_DIM` or the sketch would
    cover most of it, else the seeded randomised top-``max(ranks)`` SVD (Halko, Martinsson & Tropp
    2011), whose numbers repeat bit for bit for the same input and seed on one device.
    """
    import torch

    if delta.dim() != 2:
        raise ValueError(f"spectral_stats needs a 2-D tensor, got shape {tuple(delta.shape)}")
    ranks = tuple(int(r) for r in ranks)
    m = min(delta.shape)
    top = min(max(ranks), m)
    if exact is None:
        exact = m <= EXACT_SVD_DIM or top + OVERSAMPLE >= 0.8 * m
    total = _squared_norm(delta)
    if total == 0.0 or not math.isfinite(total):  # no direction, or NaN/Inf (with --allow-nonfinite)
        nan = math.nan
        return SpectralStats(nan, nan, (nan,) * len(ranks), exact)
    if exact:
        S = torch.linalg.svdvals(delta.double()).cpu()
        S = S[S > S[0] * max(delta.shape) * _eps(delta)]  # the numerical rank, as numpy.linalg.matrix_rank
        total = float(S.square().sum())  # the SVD's own sum, so a rank-2 Δ holds exactly 1.0 at k ≥ 2
    else:
        S = top_singular(delta.float(), top, seed=seed)[1].double().cpu()
    squares = S.square()
    stable = total / float(squares[0])
    energies = tuple(_energy(squares, k, total, exact) for k in ranks)
    erank = effective_rank(S) if exact else effective_rank_from_top(S, total, m)
    return SpectralStats(min(stable, float(m)), erank, energies, exact)


def effective_rank(S) -> float:
    """``exp(-Σ p_i log p_i)`` with ``p = S / Σ S`` (zeros skipped): ``[1, 1, 0] -> 2.0``."""
    p = S.double() / S.double().sum()
    p = p[p > 0]
    return math.exp(float(-(p * p.log()).sum()))


def effective_rank_from_top(S, total: float, m: int) -> float:
    """Effective rank from the top-K singular values ``S`` and ``total = ‖Δ‖²_F``: an estimate.

    The m − K values not computed hold ``total − Σ S²`` of the energy; they are taken as equal
    (each at most s_K), the completion of largest entropy that matches the known norm. Exact when
    the tail is flat, and an over-estimate by at most the tail's share otherwise.
    """
    import torch

    k = int(S.numel())
    rest = m - k
    tail = max(total - float(S.square().sum()), 0.0)
    if rest <= 0 or tail == 0.0:
        return effective_rank(S)
    level = min(math.sqrt(tail / rest), float(S[-1]))
    return effective_rank(torch.cat([S.double(), torch.full((rest,), level, dtype=torch.float64)]))


def _energy(squares, k: int, total: float, exact: bool) -> float:
    # exact: 1 − tail, so a rank-2 Δ holds exactly 1.0 at k ≥ 2 (the tail is rounding noise ~1e-32)
    if exact:
        return max(0.0, 1.0 - float(squares[k:].sum()) / total)
    return min(1.0, float(squares[:k].sum()) / total)


def _eps(delta) -> float:
    """Machine epsilon of Δ's dtype (float32's for half precisions, which Δ is computed in)."""
    import torch

    return torch.finfo(torch.float64 if delta.dtype == torch.float64 else torch.float32).eps


def _squared_norm(delta) -> float:
    """``‖Δ‖²_F`` in float64, block by block (no float64 copy of a large tensor)."""
    flat = delta.reshape(-1)
    return math.fsum(float(flat[s:s + (1 << 22)].double().square().sum()) for s in range(0, flat.numel(), 1 << 22))


def sign_and_mask(delta, *, density: float = DEFAULT_DENSITY):
    """What the pairwise counts need of one Δ: its signs (int8) and its top-``density`` mask (bool).

    ``k = max(1, int(density * numel))`` entries, as TIES trims (``paw.merge.methods.sparsify_magnitude``),
    less any zero entries among them (an unmoved entry is no part of the update).
    """
    import torch

    k = max(1, int(density * delta.numel()))
    return torch.sign(delta).to(torch.int8), top_k_mask(delta.abs(), k) & (delta != 0)


def pair_counts(a, b) -> PairCounts:
    """Counts of two ``(signs, mask)`` pairs from :func:`sign_and_mask`.

    >>> import torch                                                                     # doctest: +SKIP
    >>> x = sign_and_mask(torch.tensor([1., -2., 0., 4.]), density=0.5)  # mask [F, T, F, T]  # doctest: +SKIP
    >>> y = sign_and_mask(torch.tensor([3., 2., 0., -1.]), density=0.5)  # mask [T, T, F, F]  # doctest: +SKIP
    >>> pair_counts(x, y)    # both moved 0, 1, 3; signs agree at 0 only; masks share 1 of 3  # doctest: +SKIP
    PairCounts(both=3, agree=1, inter=1, union=3)
    """
    (sign_a, mask_a), (sign_b, mask_b) = a, b
    both = (sign_a != 0) & (sign_b != 0)
    return PairCounts(both=int(both.sum()), agree=int((both & (sign_a == sign_b)).sum()),
                      inter=int((mask_a & mask_b).sum()), union=int((mask_a | mask_b).sum()))


def pair_matrix(per_tensor: Iterable[dict[tuple[int, int], PairCounts]], n: int, figure: str) -> list[list[float]]:
    """N x N ``figure`` ('sign_agreement' or 'mask_overlap') over all tensors, from summed counts.

    Diagonal 1.0; ``nan`` for a pair where some Δ holds NaN/Inf. Counts are integers, so the order of the tensors does not change the result.
    """
    sums, broken = {}, set()
    for pairs in per_tensor:
        for key, c in pairs.items():
            if c is None:  # a Δ holding NaN/Inf: undefined, like its cosine
                broken.add(key)
                continue
            s = sums.setdefault(key, [0, 0, 0, 0])
            s[0] += c.both
            s[1] += c.agree
            s[2] += c.inter
            s[3] += c.union
    out = [[1.0] * n for _ in range(n)]
    for (i, j), (both, agree, inter, union) in sums.items():
        total = PairCounts(both, agree, inter, union)
        out[i][j] = out[j][i] = getattr(total, figure)
    for i, j in broken:
        out[i][j] = out[j][i] = math.nan
    return out


def spectra_groups(rows: Iterable[tuple[str, float, SpectralStats | None]],
                   ranks: Sequence[int]) -> dict[str, dict]:
    """Group ``(name, sumsq, stats)`` rows like :func:`paw.taskvec.groups.aggregate`.

    Per group: ``tensors`` (2-D ones with a spectrum), the mean stable and effective rank, and the
    energy at each rank weighted by ‖Δ‖²: the share of the group's squared norm that a rank-k update
    of every tensor holds. Module groups in :data:`GROUP_ORDER` (those with a tensor), then layers.
    """
    acc: dict[str, list] = {}
    for name, sumsq, s in rows:
        if s is None or math.isnan(s.stable_rank):
            continue
        for group in groups_of(name):
            a = acc.setdefault(group, [0, 0.0, 0.0, 0.0, [0.0] * len(ranks)])
            a[0] += 1
            a[1] += s.stable_rank
            a[2] += s.effective_rank
            a[3] += sumsq
            a[4] = [e + sumsq * x for e, x in zip(a[4], s.energies, strict=True)]
    modules = [g for g in GROUP_ORDER if g in acc]
    layers = sorted((g for g in acc if g not in GROUP_ORDER), key=layer_index)
    out = {}
    for g in modules + layers:
        n, stable, erank, sumsq, energy = acc[g]
        out[g] = {"tensors": n, "stable_rank_mean": stable / n, "effective_rank_mean": erank / n,
                  **{f"energy_at_{k}": (e / sumsq if sumsq else math.nan) for k, e in zip(ranks, energy, strict=True)}}
    return out


@dataclass(frozen=True)
class SpectraOptions:
    """What ``paw task-vectors --spectra`` computes; ``check()`` names the flag at fault."""

    ranks: tuple[int, ...] = DEFAULT_RANKS  # --spectra-ranks: energy held at these ranks
    density: float = DEFAULT_DENSITY        # --mask-density: share of entries in each top-k mask
    seed: int = 0                           # of the randomised SVD's Gaussian sketch
    exact: bool = False                     # --spectra-exact: the full SVD of every matrix (slow on large ones)

    def check(self) -> SpectraOptions:
        """A copy with ``ranks`` sorted and distinct; :class:`PawError` for a rank < 1 or a bad density."""
        ranks = tuple(sorted({int(r) for r in self.ranks}))
        if not ranks or ranks[0] < 1:
            raise PawError(f"--spectra-ranks {','.join(map(str, self.ranks))}: ranks must be positive integers")
        if not 0.0 < self.density <= 1.0:
            raise PawError(f"--mask-density {self.density}: must be in (0, 1]")
        return SpectraOptions(ranks, float(self.density), int(self.seed), bool(self.exact))


def tensor_spectra(base, models: Sequence, options: SpectraOptions):
    """Per model, the :class:`SpectralStats` of Δ_i = models[i] − base (None unless 2-D), and per pair
    ``(i, j)`` with i < j the :class:`PairCounts` (None where a Δ holds NaN/Inf).

    One float32 Δ is alive at a time; each model keeps only its signs (int8) and mask (bool).
    """
    import torch

    spectra, marks = [], []
    for model in models:
        delta = model.float() if model.dtype != torch.float32 else model.clone()
        delta.sub_(base)  # in place: one float32 tensor alive, the base stays in its own dtype
        finite = bool(torch.isfinite(delta).all())
        spectra.append(spectral_stats(delta, ranks=options.ranks, seed=options.seed, exact=options.exact or None)
                       if delta.dim() == 2 else None)
        marks.append(sign_and_mask(delta, density=options.density) if finite and len(models) > 1 else None)
        del delta
    pairs = {(i, j): (pair_counts(marks[i], marks[j]) if marks[i] is not None and marks[j] is not None else None)
             for i in range(len(models)) for j in range(i + 1, len(models))}
    return spectra, pairs
