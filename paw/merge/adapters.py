"""Adapter-space merges: combine LoRA factors of one base into LoRA factors, as pure tensor functions.

A LoRA module of adapter i holds ``A_i`` (r_i, in) and ``B_i`` (out, r_i) with scaling ``s_i``; its
update is ``Δ_i = s_i · B_i @ A_i`` (out, in). (Embedding LoRAs use the same factor layout, with
``in`` the vocabulary; the base table gets ``Δᵀ``, which nothing here needs.) Given weights ``w_i``:

- ``cat`` (exact, ranks add):   ``A = [w_1 s_1 A_1; w_2 s_2 A_2]`` stacked on rows, ``B = [B_1 | B_2]``,
  so ``B @ A = Σ_i w_i s_i B_i A_i``. The result is written with ``lora_alpha = r`` (scaling 1).
- ``svd`` and the ``*-svd`` family: the dense ``D = combine(Δ_1 .. Δ_N, w)`` (out, in), then its
  truncated SVD ``D ≈ U_r S_r V_rᵀ`` split as ``B = U_r S_r`` (out, r), ``A = V_rᵀ`` (r, in), scaling 1.

These are PEFT's ``add_weighted_adapter`` combination types ``cat``, ``svd``, ``ties_svd``,
``dare_linear_svd``, ``dare_ties_svd`` and ``magnitude_prune_svd`` (PEFT ``tuners/lora/model.py``
and ``utils/merge_utils.py``), with the same numbers. PEFT's TIES differs from PAW's full-model
``ties`` in two ways, kept here for parity: the sign is elected from the *unweighted* pruned
deltas, and the disjoint mean divides by the *count* of agreeing adapters, not by their weights::

    PEFT ties:  D = Σ_i m_i w_i Δ'_i / max(1, Σ_i m_i),   m_i = [sign Δ'_i == sign Σ_j Δ'_j]
    PAW  ties:  D = Σ_i m_i w_i Δ'_i / Σ_i m_i w_i,       elected from Σ_j w_j Δ'_j

Tiny example (1x1 modules): ``Δ = [2, -1]``, ``w = [1, 1]`` -> cat and svd give ``D = 1``;
PEFT ties (density 1) elects ``+`` and gives ``2 / 1 = 2``.

DARE's keep probability is ``1 - drop_rate`` (PEFT calls it ``density``); survivors are divided by it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from paw.merge.methods import generalized_task_arithmetic, sparsify_magnitude, sparsify_random
from paw.registry import Registry


@dataclass(frozen=True)
class AdapterMethod:
    """One adapter-space method: how the dense deltas are combined before the SVD (None for ``cat``)."""

    name: str
    combine: Callable[..., Any] | None   # f(deltas, weights, *, density, drop_rate, generators) -> D
    params: tuple[str, ...]              # user knobs it reads: density, drop_rate
    summary: str
    reference: str                       # the paper and PEFT's name for it

    @property
    def exact(self) -> bool:
        """True for ``cat``: the factors are concatenated, nothing is truncated."""
        return self.combine is None

    @property
    def random(self) -> bool:
        return "drop_rate" in self.params


ADAPTER_METHODS: Registry[AdapterMethod] = Registry("adapter merge method")


def adapter_method(name: str, *, summary: str, reference: str, params: Sequence[str] = ()):
    """Register ``f(deltas, weights, **params) -> D`` as adapter method ``name`` (None: ``cat``)."""

    def register(fn):
        ADAPTER_METHODS.add(name, AdapterMethod(name, fn, tuple(params), summary, reference))
        return fn

    return register


ADAPTER_METHODS.add("cat", AdapterMethod(
    "cat", None, (), "exact: stack the factors, ranks add",
    "PEFT add_weighted_adapter combination_type='cat' (Hu et al. 2022, LoRA, arXiv:2106.09685)"))


@adapter_method("svd", summary="Σ w_i Δ_i, truncated SVD",
                reference="Ilharco et al. 2023, Task Arithmetic, arXiv:2212.04089; PEFT combination_type='svd'")
def weighted_sum(deltas, weights, **_):
    """``Σ_i w_i Δ_i`` (overwrites ``deltas``). ``Δ = [2, -1], w = [1, 1] -> 1``."""
    return generalized_task_arithmetic(None, deltas, weights)


@adapter_method("magnitude-prune-svd", params=("density",), summary="top-density |Δ_i|, Σ w_i Δ_i, SVD",
                reference="Yadav et al. 2023, TIES-Merging trim step, arXiv:2306.01708; "
                          "PEFT combination_type='magnitude_prune_svd'")
def magnitude_prune(deltas, weights, *, density: float, **_):
    """Keep each Δ_i's top ``density`` fraction by magnitude, then ``Σ_i w_i Δ_i``."""
    return generalized_task_arithmetic(None, deltas, weights, sparsify="magnitude", density=density)


@adapter_method("ties-svd", params=("density",), summary="trim, elect sign, disjoint mean (PEFT's), SVD",
                reference="Yadav et al. 2023, TIES-Merging, arXiv:2306.01708; PEFT combination_type='ties_svd'")
def ties(deltas, weights, *, density: float, **_):
    """PEFT's TIES: trim each Δ_i to its top ``density``, elect the sign, average agreeing entries by count."""
    for d in deltas:
        sparsify_magnitude(d, density=density)
    return count_consensus_mean(deltas, weights)


@adapter_method("dare-linear-svd", params=("drop_rate",), summary="random drop + rescale, Σ w_i Δ_i, SVD",
                reference="Yu et al. 2024, DARE, arXiv:2311.03099; PEFT combination_type='dare_linear_svd'")
def dare_linear(deltas, weights, *, drop_rate: float, generators, **_):
    """Drop each entry with probability ``drop_rate``, divide survivors by ``1 - drop_rate``, then sum."""
    return generalized_task_arithmetic(None, deltas, weights, sparsify="random", drop_rate=drop_rate,
                                       generators=generators)


@adapter_method("dare-ties-svd", params=("drop_rate",), summary="random drop + rescale, PEFT's TIES mean, SVD",
                reference="Yu et al. 2024, DARE, arXiv:2311.03099 + TIES; PEFT combination_type='dare_ties_svd'")
def dare_ties(deltas, weights, *, drop_rate: float, generators, **_):
    for d, g in zip(deltas, generators, strict=True):
        sparsify_random(d, drop_rate=drop_rate, generator=g)
    return count_consensus_mean(deltas, weights)


def count_consensus_mean(deltas: Sequence, weights: Sequence[float]):
    """PEFT's sign election ("total") and disjoint merge over N tensors of one shape (overwrites them).

    ``elected = sign(Σ_i Δ_i)`` (zero counts as +); ``m_i = [sign Δ_i == elected]`` (zeros never
    agree); returns ``Σ_i m_i w_i Δ_i / max(1, Σ_i m_i)``.
    ``Δ = [[2], [-1]], w = [0.5, 1] -> [1.0]``.
    """
    import torch

    total = deltas[0].clone()
    for d in deltas[1:]:
        total.add_(d)
    elected = torch.where(total >= 0, 1.0, -1.0)
    merged = torch.zeros_like(total)
    count = torch.zeros_like(total)
    for d, w in zip(deltas, weights, strict=True):
        agree = d.sign() == elected
        merged.add_(torch.where(agree, d, 0.0), alpha=w)
        count.add_(agree)
    return merged.div_(count.clamp_(min=1.0))


# ---------------------------------------------------------------- factors

def lora_norm(A, B, scaling: float) -> float:
    """``||s · B @ A||_F`` without forming the (out, in) product: ``s · sqrt(tr((BᵀB)(AAᵀ)))``."""
    gram = (B.double().T @ B.double()) * (A.double() @ A.double().T)  # (r, r), elementwise: tr(XY) = Σ X∘Yᵀ
    return abs(scaling) * float(gram.sum().clamp(min=0.0)) ** 0.5


def concat_factors(factors: Sequence[tuple[Any, Any, float]], weights: Sequence[float], *, scale: float = 1.0):
    """``[(A_i, B_i, s_i)]`` -> ``(A, B)`` with ``B @ A = scale · Σ_i w_i s_i B_i A_i``; rank ``Σ r_i``.

    The weight and scaling go on A, as PEFT's ``cat`` does. Shapes: A (Σ r_i, in), B (out, Σ r_i).
    """
    import torch

    A = torch.cat([a.float() * (scale * w * s) for (a, _b, s), w in zip(factors, weights, strict=True)], dim=0)
    B = torch.cat([b.float() for _a, b, _s in factors], dim=1)
    return A, B


def svd_factors(D, rank: int) -> tuple[Any, Any, float]:
    """Truncated SVD of D (out, in) -> ``(A (k, in), B (out, k), relative error)``, k = min(rank, out, in).

    ``B = U_k diag(S_k)``, ``A = V_kᵀ`` (PEFT's split); the error ``||D - B A||_F / ||D||_F`` is
    ``sqrt(Σ_{j>k} S_j²) / sqrt(Σ_j S_j²)`` (0 for a zero D).
    """
    import torch

    U, S, Vh = torch.linalg.svd(D.float(), full_matrices=False)
    k = min(rank, S.numel())
    energy = S.double().square()
    total = float(energy.sum())
    error = (float(energy[k:].sum()) / total) ** 0.5 if total > 0 else 0.0
    return Vh[:k].contiguous(), (U[:, :k] * S[:k]).contiguous(), error
