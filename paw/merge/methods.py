"""Merge methods: plain tensor functions registered by name, for one tensor of every model at a time.

Every method has the signature ``f(base, deltas, weights, **params) -> merged_delta``:

- ``base``:    the base model's tensor, shape ``S`` (float32, on the compute device);
- ``deltas``:  the task vectors ``Δ_i = M_i - base``, a list of N tensors of shape ``S``;
- ``weights``: N floats, one per model;
- returns the merged task vector (shape ``S``); the caller writes ``base + scale * merged``.

``deltas`` are scratch: methods work on them in place (and may return one of them), so that memory
holds N + 2 tensors of shape S, not 2N. ``base`` is never written. The sparsifiers below likewise
overwrite the tensor they are given and return it.

TIES, DARE and Model Breadcrumbs are not separate code paths: they are parameter sets of one
function, :func:`generalized_task_arithmetic`, which sparsifies each task vector (``sparsify``) and
then either sums the weighted vectors or keeps only the entries that agree with an elected sign
(``consensus``). The decorator :func:`merge_method` fills :data:`METHODS`; stacking it registers one
function several times under different names with different fixed parameters.

Tiny example (one entry, three models, weights 1/3 each)::

    Δ = [+0.3, -0.1, +0.2]
    task-arithmetic:   1/3 (0.3 - 0.1 + 0.2)          = 0.1333
    ties (density 1):  elected sign +, agreeing {0.3, 0.2}, weighted mean = 0.25
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from paw.merge import geometric, sparse
from paw.registry import Registry
from paw.taskvec.select import kth_largest, top_k_mask  # noqa: F401  (part of this module's API)


@dataclass(frozen=True)
class MergeMethod:
    """One registered method: the function with its fixed parameters and what it reads."""

    name: str
    fn: Callable[..., Any]              # f(base, deltas, weights, **params) -> merged delta
    fixed: dict[str, Any]               # parameters bound at registration (e.g. sparsify="magnitude")
    params: tuple[str, ...]             # user knobs it reads: density, drop_rate, gamma, generator
    needs_base: bool = True             # False: any member can serve as the reference (linear)
    summary: str = ""
    normalise_weights: bool = False     # True: weights are divided by their sum (a weighted average)
    random: bool = False                # True: reads a seeded generator per tensor and model
    elementwise: bool = False           # True: each entry depends on that entry only (blocks are exact)
    paper: str = ""                     # the reference: paper (authors, year, title) or URL
    n_models: tuple[int, int | None] = (1, None)  # how many models besides the base: (least, most or None)
    weighted: bool = True               # False: the per-model weights are not read (slerp, model-stock, ...)
    sum_of_inputs: Callable[..., Any] | None = None  # (weights, scale, **params) -> (c_base, [c_i]) or None

    def combination(self, weights: Sequence[float], scale: float, params: dict[str, Any]
                    ) -> tuple[float, list[float]] | None:
        """``(c_base, [c_1 .. c_N])`` when ``base + scale × method(Δ)`` equals ``c_base·base + Σ_i c_i·M_i``
        (task arithmetic, linear, with these knobs): the merge may then add each input once and never
        form a Δ. None for every other method."""
        if self.sum_of_inputs is None:
            return None
        return self.sum_of_inputs(list(weights), scale, **self._bind(self.fixed, params))

    @property
    def streamed(self) -> bool:
        """True when the pipeline may merge a tensor in row blocks (elementwise once sparsified; DELLA
        ranks within rows); False: the method needs whole tensors (an angle, a norm or a variance
        over all entries)."""
        return self.elementwise or self.fixed.get("sparsify") in ("magnitude", "random", "outliers", "della")

    def __call__(self, base, deltas, weights, **params):
        return self.fn(base, deltas, weights, **self._bind(self.fixed, params))

    def _bind(self, fixed: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        """``fixed`` overlaid with the knobs this method reads; a None knob keeps the fixed default."""
        used = {k: v for k, v in params.items() if k in self.params and not (v is None and k in fixed)}
        return {**fixed, **used}

    @property
    def sparsify(self) -> str | None:
        """How each task vector is thinned first: None, magnitude, random or outliers."""
        return self.fixed.get("sparsify")

    def combine(self, base, deltas, weights, **params):
        """The method on task vectors that are already sparsified (the streamed merge does that per block)."""
        fixed = {**self.fixed, "sparsify": None} if "sparsify" in self.fixed else self.fixed
        params = {k: v for k, v in params.items() if k != "generators"}
        return self.fn(base, deltas, weights, **self._bind(fixed, params))


METHODS: Registry[MergeMethod] = Registry("merge method")


def merge_method(name: str, *, params: Sequence[str] = (), needs_base: bool = True, summary: str = "",
                 normalise_weights: bool = False, elementwise: bool = False, paper: str = "",
                 n_models: tuple[int, int | None] = (1, None), weighted: bool = True,
                 sum_of_inputs: Callable | None = None, **fixed: Any):
    """Register the decorated function as method ``name`` with ``fixed`` keyword arguments bound."""

    def register(fn: Callable) -> Callable:
        METHODS.add(name, MergeMethod(name, fn, dict(fixed), tuple(params), needs_base, summary,
                                    normalise_weights, random=fixed.get("sparsify") in ("random", "della"), elementwise=elementwise,
                                    paper=paper, n_models=n_models, weighted=weighted, sum_of_inputs=sum_of_inputs))
        return fn

    return register


def get_method(name: str) -> MergeMethod:
    """The method called ``name``; an unknown name lists the valid ones."""
    return METHODS.lookup(name)


# ---------------------------------------------------------------- sparsification (one task vector)

def sparsify_magnitude(delta, *, density: float):
    """TIES "trim": keep the ``density`` fraction of entries with the largest |Δ|, zero the rest.

    Yadav et al. 2023, "TIES-Merging: Resolving Interference When Merging Models" (NeurIPS).
    ``k = max(1, int(density * numel))`` entries survive, per tensor. Shape in = shape out.
    """
    if density >= 1.0:
        return delta
    return delta.mul_(top_k_mask(delta.abs(), max(1, int(density * delta.numel()))))


def sparsify_random(delta, *, drop_rate: float, generator):
    """DARE: drop each entry with probability ``drop_rate``, rescale survivors by ``1 / (1 - p)``.

    Yu et al. 2024, "Language Models are Super Mario: Absorbing Abilities from Homologous Models as a
    Free Lunch" (ICML). The rescale keeps the expectation of every entry equal to Δ. ``generator``
    (a ``torch.Generator`` on Δ's device) makes the drop reproducible.
    """
    import torch

    if drop_rate <= 0.0:
        return delta
    keep = torch.rand(delta.shape, generator=generator, device=delta.device) >= drop_rate
    return delta.mul_(keep).div_(1.0 - drop_rate)


def sparsify_outliers(delta, *, density: float, gamma: float):
    """Model Breadcrumbs: drop the largest ``gamma`` fraction by |Δ| and keep the next ``density``.

    Davari & Belilovsky 2024, "Model Breadcrumbs: Scaling Multi-Task Model Merging with Sparse
    Masks" (ECCV). Large outliers and the small tail are both treated as noise. With n entries,
    ranks ``[int(gamma n), int(gamma n) + int(density n))`` in descending |Δ| survive; when
    ``gamma + density > 1`` fewer outliers are dropped so that ``int(density n)`` entries survive.
    """
    n = delta.numel()
    n_keep = int(density * n)
    n_top = min(int(gamma * n), n - n_keep)
    magnitude = delta.abs()
    keep = top_k_mask(magnitude, n_top + n_keep) & ~top_k_mask(magnitude, n_top)
    return delta.mul_(keep)


def _at(value, i: int):
    """``value[i]`` for a per-model list, ``value`` itself for one number shared by every model."""
    return value[i] if isinstance(value, (list, tuple)) else value


def _sparsify(kind: str | None, delta, *, density, drop_rate, gamma, epsilon, rescale, generator):
    if kind is None:
        return delta
    if kind == "magnitude":
        return sparsify_magnitude(delta, density=density)
    if kind == "random":
        return sparsify_random(delta, drop_rate=drop_rate, generator=generator)
    if kind == "outliers":
        return sparsify_outliers(delta, density=density, gamma=gamma)
    if kind == "della":
        return sparse.sparsify_della(delta, density=density, epsilon=epsilon, generator=generator, rescale=rescale)
    raise ValueError(f"unknown sparsification {kind!r}")


# ---------------------------------------------------------------- combining N task vectors

def sign_consensus_mean(weighted: Sequence, weights: Sequence[float], *, normalize: bool = True):
    """TIES "elect" and "disjoint merge" of weighted task vectors.

    ``weighted``: N tensors of shape S, tensor i is ``w_i * trimmed Δ_i``; ``weights``: N floats.
    The elected sign per entry is the sign of ``Σ_i w_i Δ_i`` (zero counts as +). Only entries whose
    own sign equals the elected one take part, and they are averaged with their weights:

        merged = Σ_i m_i w_i Δ_i / Σ_i m_i w_i,   m_i = [sign(w_i Δ_i) == elected]

    With equal weights this is the paper's disjoint mean (Yadav et al. 2023, section 3); entries no
    model agrees on (all zero) stay zero. ``normalize=False`` returns the numerator alone (mergekit's
    ``normalize: false``). Works model by model (no (N, *S) stack), so memory holds the N inputs plus
    three tensors of shape S.
    """
    import torch

    elected = weighted[0].clone()
    for t in weighted[1:]:
        elected.add_(t)
    total = torch.zeros_like(weighted[0])
    divisor = torch.zeros_like(weighted[0])
    if bool(torch.isfinite(elected.sum())):  # no NaN anywhere: the branch-free form below is exact
        _agreeing_sums(weighted, weights, elected, total, divisor)
    else:
        plus = elected >= 0  # elected sign: True for +
        for t, w in zip(weighted, weights, strict=True):
            agree = torch.where(plus, t > 0, t < 0)  # zeros (trimmed) never agree
            total.add_(torch.where(agree, t, 0.0))
            divisor.add_(agree, alpha=w)
    if not normalize:
        return total
    divisor.add_(divisor == 0)  # 0 -> 1 where no weight takes part (a sum of weights is never -0.0)
    return total.div_(divisor)


def _agreeing_sums(weighted: Sequence, weights: Sequence[float], elected, total, divisor) -> None:
    """``total += Σ_i [agree_i] t_i`` and ``divisor += Σ_i [agree_i] w_i`` without data-dependent branches.

    With ``s = ±1``, the elected sign (``copysign``: an elected ``-0.0`` can only come from all
    ``t_i = -0.0``, which agree with neither sign), ``t_i`` agrees when ``t_i s > 0``, and
    ``max(t_i s, 0) s`` is ``t_i`` where it agrees and ``±0`` elsewhere, which leaves a sum that is
    not ``-0.0`` unchanged; multiplying by ±1 is exact. The same bits as ``torch.where`` on the
    masks, about five times faster on a CPU (random masks defeat its branch prediction), for every
    input without NaN (a NaN would survive ``max``): the caller checks that.
    """
    import torch

    sign = torch.ones_like(elected).copysign_(elected)
    scratch = torch.empty_like(elected)
    for t, w in zip(weighted, weights, strict=True):
        torch.mul(t, sign, out=scratch).clamp_(min=0)  # |t| where t agrees, else ±0
        total.addcmul_(scratch, sign)
        divisor.add_(scratch.sign_(), alpha=w)       # 1 where t agrees, else ±0


_DARE = ("drop_rate", "normalize", "generators")
_CRUMBS = ("density", "gamma", "normalize")
_DELLA_PARAMS = ("density", "epsilon", "normalize", "rescale", "generators")
_DELLA = "Deep et al. 2024, DELLA-Merging: Reducing Interference in Model Merging through Magnitude-Based Sampling (arXiv 2406.11617)"


# decorators apply bottom-up: the last one listed registers first (and is listed first in --help)
def _task_arithmetic_sum(weights: list[float], scale: float, *, normalize=None, **_):
    """``base + s Σ c_i (M_i − base) = (1 − s Σ c_i) base + Σ s c_i M_i``, with ``c_i = w_i`` (or
    ``w_i / Σ w`` when normalised, so that Σ c_i is exactly 1 and ``c_base = 1 − s``; a zero divisor
    counts as 1, as in the function)."""
    total = math.fsum(weights)
    if normalize and abs(total) >= 1e-8:
        return 1.0 - scale, [scale * w / total for w in weights]
    return 1.0 - scale * total, [scale * w for w in weights]


def _linear_sum(weights: list[float], scale: float, *, normalize=True, **_):
    """``(1 − s) R + s Σ w_i M_i / Σ w`` (normalised) or ``(1 − s) R + s Σ w_i M_i``: the reference R
    (the base, or the first model) drops out at scale 1, so it is not read."""
    normalize = normalize is None or normalize
    total = math.fsum(weights) if normalize else 1.0
    if total == 0.0:
        return None
    return 1.0 - scale, [scale * w / total for w in weights]


@merge_method("della-linear", params=_DELLA_PARAMS, sparsify="della", normalize=False,
              summary="magnitude-ranked random drop (MagPrune), L1 rescale, Σ w_i Δ_i", paper=_DELLA)
@merge_method("della", params=_DELLA_PARAMS, sparsify="della", consensus=True, normalize=True,
              summary="magnitude-ranked random drop (MagPrune), L1 rescale, TIES sign consensus", paper=_DELLA)
@merge_method("breadcrumbs-ties", params=_CRUMBS, sparsify="outliers", consensus=True, normalize=False,
              summary="drop top gamma, keep next density, elect sign, Σ of agreeing w_i Δ_i",
              paper="Davari & Belilovsky 2024, Model Breadcrumbs (ECCV), with Yadav et al. 2023 sign election")
@merge_method("breadcrumbs", params=_CRUMBS, sparsify="outliers",
              summary="drop top gamma, keep next density, Σ w_i Δ_i",
              paper="Davari & Belilovsky 2024, Model Breadcrumbs: Scaling Multi-Task Model Merging with Sparse Masks (ECCV)")
@merge_method("dare-ties", params=_DARE, sparsify="random", consensus=True,
              summary="random drop + rescale, then TIES sign consensus",
              paper="Yu et al. 2024, Language Models are Super Mario (ICML), with Yadav et al. 2023")
@merge_method("dare-linear", params=_DARE, sparsify="random",
              summary="random drop + rescale, then Σ w_i Δ_i",
              paper="Yu et al. 2024, Language Models are Super Mario: Absorbing Abilities from Homologous Models (ICML)")
@merge_method("ties", params=("density", "normalize"), sparsify="magnitude", consensus=True,
              summary="trim to top density, elect sign, weighted disjoint mean",
              paper="Yadav et al. 2023, TIES-Merging: Resolving Interference When Merging Models (NeurIPS)")
@merge_method("task-arithmetic", params=("normalize",), summary="Σ w_i Δ_i", elementwise=True,
              sum_of_inputs=_task_arithmetic_sum,
              paper="Ilharco et al. 2023, Editing Models with Task Arithmetic (ICLR)")
def generalized_task_arithmetic(base, deltas, weights, *, sparsify: str | None = None,
                                consensus: bool = False, density=0.2, drop_rate=0.9, gamma=0.01, epsilon=0.15,
                                normalize: bool | None = None, rescale: bool = True,
                                generators: Sequence | None = None):
    """Task arithmetic with optional per-vector sparsification and sign consensus.

    Task Arithmetic (Ilharco et al. 2023, "Editing Models with Task Arithmetic", ICLR): the merged
    task vector is ``Σ_i w_i Δ_i``. The registered parameter sets are

    ================  ==========  =========  =========  ===========================================
    name              sparsify    consensus  normalize  paper
    ================  ==========  =========  =========  ===========================================
    task-arithmetic   none        no         no         Ilharco et al. 2023
    ties              magnitude   yes        yes        Yadav et al. 2023 (TIES-Merging)
    dare-linear       random      no         no         Yu et al. 2024 (DARE)
    dare-ties         random      yes        yes        Yu et al. 2024 + Yadav et al. 2023
    breadcrumbs       outliers    no         no         Davari & Belilovsky 2024 (Model Breadcrumbs)
    breadcrumbs-ties  outliers    yes        no         Model Breadcrumbs + TIES sign election
    della             della       yes        yes        Deep et al. 2024 (DELLA, MagPrune)
    della-linear      della       no         no         Deep et al. 2024
    ================  ==========  =========  =========  ===========================================

    ``normalize`` divides by the weights that take part (``Σ_i m_i w_i`` with consensus, ``Σ_i w_i``
    without; a zero divisor counts as 1); None takes the table's default. ``density``, ``drop_rate``,
    ``gamma`` and ``epsilon`` are one number or one per model. ``deltas``: N tensors of shape S
    (float32, overwritten); ``generators``: one ``torch.Generator`` per model (random kinds only).
    Returns shape S; ``base`` is not read. Compared with mergekit: the same numbers for every
    deterministic entry; mergekit's ``dare_ties`` does not normalise by default (PAW's ``dare-ties``
    does, as TIES does) and its DARE rescales to the L1 norm where PAW divides by ``1 - p`` as the
    paper does; DELLA rescales to the L1 norm in both.
    """
    if normalize is None:
        normalize = consensus
    for i, d in enumerate(deltas):  # in place
        _sparsify(sparsify, d, density=_at(density, i), drop_rate=_at(drop_rate, i), gamma=_at(gamma, i),
                  epsilon=_at(epsilon, i), rescale=rescale, generator=None if generators is None else generators[i])
    if consensus:
        for d, w in zip(deltas, weights, strict=True):
            d.mul_(w)
        return sign_consensus_mean(deltas, weights, normalize=normalize)
    merged = deltas[0].mul_(weights[0])
    for d, w in zip(deltas[1:], weights[1:], strict=True):
        merged.add_(d, alpha=w)  # weight folded into the sum: one pass per model
    total = float(sum(weights))
    return merged.div_(total) if normalize and abs(total) >= 1e-8 else merged


@merge_method("linear", params=("normalize",), needs_base=False, normalise_weights=True, elementwise=True,
              sum_of_inputs=_linear_sum,
              summary="weighted average of the full weights (model soup)",
              paper="Wortsman et al. 2022, Model soups (ICML)")
def linear(base, deltas, weights, *, normalize: bool | None = True):
    """Weighted average of the full models, ``Σ_i w_i M_i / Σ_i w_i`` (a "model soup").

    Wortsman et al. 2022, "Model soups: averaging weights of multiple fine-tuned models improves
    accuracy without increasing inference time" (ICML). Written in task-vector form, relative to any
    reference R (the base, or the first model when there is no base): ``R + Σ w_i (M_i - R) / Σ w_i``
    equals the average because the normalised weights sum to one, so no base is needed. With
    ``normalize=False`` (mergekit's switch) it is the plain weighted sum ``Σ_i w_i M_i``.
    """
    normalize = normalize is None or normalize
    total = float(sum(weights)) if normalize else 1.0
    merged = deltas[0].mul_(weights[0] / total)
    for w, d in zip(weights[1:], deltas[1:], strict=True):
        merged.add_(d, alpha=w / total)
    if not normalize:  # Σ w_i (R + Δ_i) - R
        merged.add_(base, alpha=float(sum(weights)) - 1.0)
    return merged


merge_method("slerp", weighted=False, params=("t",), n_models=(1, 1), summary="spherical interpolation from the base (t=0) to one model (t=1)",
             paper="Shoemake 1985, Animating rotation with quaternion curves (SIGGRAPH); "
                   "https://en.wikipedia.org/wiki/Slerp")(geometric.slerp_delta)
merge_method("nuslerp", params=("base_given", "row_wise", "flatten"), needs_base=False, n_models=(2, 2),
             summary="SLERP of two models (or task vectors) at t = w2/(w1+w2), whole tensor or per row",
             paper="mergekit's NuSLERP (Goddard et al. 2024, Arcee's MergeKit, arXiv 2403.13257)")(geometric.nuslerp_delta)
merge_method("multislerp", params=("base_given", "normalize_weights"), needs_base=False,
             summary="barycentric interpolation of N models on the hypersphere",
             paper="Buss & Fillmore 2001, Spherical averages and applications to spherical splines (ACM TOG)"
             )(geometric.multislerp_delta)
merge_method("karcher", weighted=False, params=("max_iter", "tol"), needs_base=False,
             summary="Riemannian (Karcher) mean of the models' directions, mean norm",
             paper="Grove & Karcher 1973, How to conjugate C1-close group actions; "
                   "https://en.wikipedia.org/wiki/Karcher_mean")(geometric.karcher_delta)
merge_method("model-stock", weighted=False, params=("filter_wise",), n_models=(2, None),
             summary="t x mean task vector, t from the fine-tunes' pairwise angle (no tuning)",
             paper="Jang et al. 2024, Model Stock: All we need is just a few fine-tuned models (ECCV)"
             )(geometric.model_stock_delta)
merge_method("nearswap", weighted=False, params=("t",), n_models=(1, 1), summary="base moved towards one model where they are close",
             paper="mergekit's NearSwap (Goddard et al. 2024, arXiv 2403.13257)")(geometric.nearswap_delta)
merge_method("sce", weighted=False, params=("select_topk",), summary="select by variance, weights from energy, erase minority signs",
             paper="Wan et al. 2024, FuseChat: Knowledge Fusion of Chat Models (arXiv 2408.07990)")(sparse.sce_delta)
merge_method("passthrough", weighted=False, params=("multiplier",), needs_base=False, n_models=(1, 1),
             summary="one model's tensors as they are (layer slices stack models)",
             paper="mergekit's passthrough (Goddard et al. 2024, arXiv 2403.13257)")(sparse.passthrough_delta)


def tensor_seed(seed: int, name: str, model_index: int) -> int:
    """A 63-bit seed for one (tensor, model) pair, stable across runs, machines and Python versions.

    Python's ``hash()`` of a string changes per process, so a BLAKE2 digest is used instead:
    ``tensor_seed(0, 'lm_head.weight', 1)`` is the same number everywhere.
    """
    digest = hashlib.blake2b(f"{seed}\x00{name}\x00{model_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)
