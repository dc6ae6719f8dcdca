"""Adapter-space merges: combine LoRA factors of one base into LoRA factors, as pure tensor functions.

A LoRA module of adapter i holds ``A_i`` (r_i, in) and ``B_i`` (out, r_i) with scaling ``s_i``; its
update is ``Δ_i = s_i · B_i @ A_i`` (out, in). (Embedding LoRAs use the same factor layout, with
``in`` the vocabulary; the base table gets ``Δᵀ``, which nothing here needs.) Given weights ``w_i``,
every method is one of PEFT's ``add_weighted_adapter`` combination types (PEFT
``tuners/lora/model.py`` and ``utils/merge_utils.py``), with the same numbers. They work in three
spaces (:attr:`AdapterMethod.space`):

- ``concat`` — ``cat`` (exact, ranks add): ``A = [w_1 s_1 A_1; w_2 s_2 A_2]`` stacked on rows,
  ``B = [B_1 | B_2]``, so ``B @ A = Σ_i w_i s_i B_i A_i``.
- ``delta`` — ``svd`` and the ``*-svd`` family: the dense ``D = combine(Δ_1 .. Δ_N, w)`` (out, in),
  then its truncated SVD ``D ≈ U_r S_r V_rᵀ`` split as ``B = U_r S_r`` (out, r), ``A = V_rᵀ`` (r, in).
- ``factor`` — the ``peft-*`` methods, PEFT's ``linear``, ``ties``, ``dare_linear``, ``dare_ties`` and
  ``magnitude_prune``: the A's and the B's are combined *separately*, entry by entry, so every
  adapter must have the same rank. The weight ``w_i s_i`` is split as ``√|w_i s_i|`` on each factor,
  its sign on A: ``peft-linear`` gives ``A = Σ_i sgn_i √|w_i s_i| A_i``, ``B = Σ_i √|w_i s_i| B_i``,
  whose product is *not* ``Σ w_i Δ_i`` (cross terms ``B_i A_j``; PEFT calls it "a very rough
  approximation"). They carry a ``peft-`` prefix because PAW's full-model ``linear``, ``ties``,
  ``dare-linear`` and ``dare-ties`` merge whole weights, with other formulas.

Every method writes scaling 1 (``lora_alpha = r``).

PEFT's TIES differs from PAW's full-model ``ties`` in two ways, kept here for parity: the sign is
elected from the *unweighted* trimmed tensors (their sum, or with ``majority_sign_method=
'frequency'`` the count of their signs), and the disjoint mean divides by the *count* of agreeing
adapters, not by their weights::

    PEFT ties:  D = Σ_i m_i w_i Δ'_i / max(1, Σ_i m_i),   m_i = [sign Δ'_i == sign Σ_j Δ'_j]
    PAW  ties:  D = Σ_i m_i w_i Δ'_i / Σ_i m_i w_i,       elected from Σ_j w_j Δ'_j

PEFT's trim keeps ``k = int(density · n)`` entries (none when that is 0) and DARE keeps each entry
with probability ``density``, dividing survivors by it; PAW's ``--drop-rate p`` is ``density = 1 - p``.

Tiny example (1x1 modules): ``Δ = [2, -1]``, ``w = [1, 1]`` -> cat and svd give ``D = 1``;
PEFT ties (density 1) elects ``+`` and gives ``2 / 1 = 2``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from paw.merge.methods import top_k_mask
from paw.registry import Registry

SIGN_METHODS = ("total", "frequency")   # PEFT's majority_sign_method values


@dataclass(frozen=True)
class AdapterMethod:
    """One adapter-space method: what it combines (``space``) and how (``combine``; None for ``cat``)."""

    name: str
    combine: Callable[..., Any] | None   # f(tensors, weights, *, density, majority_sign_method, generators) -> T
    params: tuple[str, ...]              # user knobs it reads: density, majority_sign_method
    summary: str
    reference: str                       # the paper and PEFT's name for it
    space: str = "delta"                 # concat | delta | factor (module docstring)
    peft_name: str = ""                  # PEFT's combination_type

    @property
    def exact(self) -> bool:
        """True for ``cat``: the factors are concatenated, nothing is truncated or pruned."""
        return self.space == "concat"

    @property
    def random(self) -> bool:
        """True for the DARE methods: a seeded random drop."""
        return self.combine in (dare_linear, dare_ties)

    @property
    def svd(self) -> bool:
        """True when the output is a truncated SVD (``--rank`` applies)."""
        return self.space == "delta"


ADAPTER_METHODS: Registry[AdapterMethod] = Registry("adapter merge method")

_PEFT = "PEFT add_weighted_adapter combination_type="
_TIES = "Yadav et al. 2023, TIES-Merging, arXiv:2306.01708"
_DARE = "Yu et al. 2024, DARE, arXiv:2311.03099"


def _register(name: str, combine, params: Sequence[str], summary: str, reference: str, space: str) -> None:
    peft = name.removeprefix("peft-").replace("-", "_")
    ADAPTER_METHODS.add(name, AdapterMethod(name, combine, tuple(params), summary,
                                            f"{reference}; {_PEFT}'{peft}'", space, peft))


# ---------------------------------------------------------------- combinations (PEFT's merge_utils)

def weighted_sum(tensors, weights, **_):
    """``Σ_i w_i T_i`` (overwrites ``tensors``). ``T = [2, -1], w = [1, 1] -> 1``."""
    total = tensors[0].mul_(weights[0])
    for t, w in zip(tensors[1:], weights[1:], strict=True):
        total.add_(t, alpha=w)
    return total


def magnitude_prune(tensors, weights, *, density: float, **_):
    """Keep each T_i's top ``density`` fraction by magnitude (:func:`trim`), then ``Σ_i w_i T_i``."""
    return weighted_sum([trim(t, density) for t in tensors], weights)


def ties(tensors, weights, *, density: float, majority_sign_method: str = "total", **_):
    """PEFT's TIES: trim each T_i to its top ``density``, elect the sign, average agreeing entries by count."""
    return count_consensus_mean([trim(t, density) for t in tensors], weights, majority_sign_method)


def dare_linear(tensors, weights, *, density: float, generators, **_):
    """DARE: keep each entry with probability ``density``, divide survivors by it, then ``Σ_i w_i T_i``."""
    return weighted_sum([dare(t, density, g) for t, g in zip(tensors, generators, strict=True)], weights)


def dare_ties(tensors, weights, *, density: float, generators, majority_sign_method: str = "total", **_):
    """The DARE drop, then PEFT's TIES election and count mean."""
    dropped = [dare(t, density, g) for t, g in zip(tensors, generators, strict=True)]
    return count_consensus_mean(dropped, weights, majority_sign_method)


def trim(t, density: float):
    """PEFT's magnitude pruning, in place: keep the ``k = int(density · numel)`` largest |entries|.

    ``density >= 1`` keeps everything; ``k = 0`` keeps nothing (PEFT's ``topk`` with k = 0), unlike
    PAW's full-model TIES, which keeps at least one entry. Ties at the threshold: first by index.
    """
    if density >= 1.0:
        return t
    return t.mul_(top_k_mask(t.abs(), int(density * t.numel())))


def dare_mask(shape, density: float, generator, device):
    """DARE's keep mask: each entry kept with probability ``density``, drawn from ``generator``."""
    import torch

    return torch.rand(shape, generator=generator, device=device) < density


def dare(t, density: float, generator):
    """PEFT's random pruning with rescale, in place: ``t · mask / density`` (``density >= 1``: ``t``)."""
    if density >= 1.0:
        return t
    return t.mul_(dare_mask(t.shape, density, generator, t.device)).div_(density)


def count_consensus_mean(tensors: Sequence, weights: Sequence[float], majority_sign_method: str = "total"):
    """PEFT's sign election and disjoint merge over N tensors of one shape (overwrites them).

    ``total``: ``elected = sign(Σ_i T_i)``; ``frequency``: ``elected = sign(Σ_i sign T_i)``; zero
    counts as +. ``m_i = [sign T_i == elected]`` (zeros never agree); returns
    ``Σ_i m_i w_i T_i / max(1, Σ_i m_i)``. ``T = [[2], [-1]], w = [0.5, 1] -> [1.0]``; with
    ``T = [[3], [-1], [-1]]``, ``total`` elects + (``3``), ``frequency`` elects - (``-1``).
    """
    import torch

    if majority_sign_method not in SIGN_METHODS:
        raise ValueError(f"majority_sign_method {majority_sign_method!r} is not one of {SIGN_METHODS}")
    use = (lambda t: t) if majority_sign_method == "total" else torch.sign
    total = use(tensors[0]).clone()
    for t in tensors[1:]:
        total.add_(use(t))
    elected = torch.where(total >= 0, 1.0, -1.0)
    merged = torch.zeros_like(total)
    count = torch.zeros_like(total)
    for t, w in zip(tensors, weights, strict=True):
        agree = t.sign() == elected
        merged.add_(torch.where(agree, t, 0.0), alpha=w)
        count.add_(agree)
    return merged.div_(count.clamp_(min=1.0))


# ---------------------------------------------------------------- the registry, in --help's order

ADAPTER_METHODS.add("cat", AdapterMethod(
    "cat", None, (), "exact: stack the factors, ranks add",
    f"Hu et al. 2022, LoRA, arXiv:2106.09685; {_PEFT}'cat'", "concat", "cat"))
_register("svd", weighted_sum, (), "Σ w_i Δ_i, truncated SVD",
          "Ilharco et al. 2023, Task Arithmetic, arXiv:2212.04089", "delta")
_register("magnitude-prune-svd", magnitude_prune, ("density",), "top-density |Δ_i|, Σ w_i Δ_i, SVD",
          f"{_TIES} (trim step)", "delta")
_register("ties-svd", ties, ("density", "majority_sign_method"), "trim, elect sign, disjoint mean (PEFT's), SVD",
          _TIES, "delta")
_register("dare-linear-svd", dare_linear, ("density",), "random drop + rescale, Σ w_i Δ_i, SVD", _DARE, "delta")
_register("dare-ties-svd", dare_ties, ("density", "majority_sign_method"),
          "random drop + rescale, PEFT's TIES mean, SVD", f"{_DARE} + TIES", "delta")
_register("peft-linear", weighted_sum, (), "Σ √w_i A_i, Σ √w_i B_i: equal ranks, approximate",
          "PEFT's factor-wise weighted sum", "factor")
_register("peft-magnitude-prune", magnitude_prune, ("density",), "magnitude-prune-svd on A and B apart",
          f"{_TIES} (trim step)", "factor")
_register("peft-ties", ties, ("density", "majority_sign_method"), "ties-svd on A and B apart", _TIES, "factor")
_register("peft-dare-linear", dare_linear, ("density",), "dare-linear-svd on A and B apart", _DARE, "factor")
_register("peft-dare-ties", dare_ties, ("density", "majority_sign_method"), "dare-ties-svd on A and B apart",
          f"{_DARE} + TIES", "factor")


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


def split_weights(weights: Sequence[float], scalings: Sequence[float]) -> tuple[list[float], list[float]]:
    """PEFT's split of ``w_i s_i`` over the two factors: ``(sgn √|w_i s_i|, √|w_i s_i|)``, the sign on A.

    ``w = [0.5, -2], s = [2, 2] -> ([1.0, -2.0], [1.0, 2.0])``: the product of the two is ``w_i s_i``.
    """
    roots = [math.sqrt(abs(w * s)) for w, s in zip(weights, scalings, strict=True)]
    signs = [1.0 if w * s >= 0 else -1.0 for w, s in zip(weights, scalings, strict=True)]
    return [g * r for g, r in zip(signs, roots, strict=True)], roots


def combine_factors(method: AdapterMethod, factors: Sequence[tuple[Any, Any, float]], weights: Sequence[float],
                    *, scale: float = 1.0, generators: tuple[Sequence, Sequence] | None = None, **params):
    """A ``factor``-space method on ``[(A_i, B_i, s_i)]`` of one rank -> ``(A, B)``; ``scale`` goes on A.

    ``generators``: one per adapter for A, then one per adapter for B (the DARE methods).
    """
    wa, wb = split_weights(weights, [s for _a, _b, s in factors])
    gens = generators or (None, None)
    A = method.combine([a.float().clone() for a, _b, _s in factors], wa, generators=gens[0], **params)
    B = method.combine([b.float().clone() for _a, b, _s in factors], wb, generators=gens[1], **params)
    return A.mul_(scale), B


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
