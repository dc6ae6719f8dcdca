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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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

    def __call__(self, base, deltas, weights, **params):
        used = {k: v for k, v in params.items() if k in self.params}
        return self.fn(base, deltas, weights, **self.fixed, **used)

    @property
    def sparsify(self) -> str | None:
        """How each task vector is thinned first: None, magnitude, random or outliers."""
        return self.fixed.get("sparsify")

    def combine(self, base, deltas, weights):
        """The method on task vectors that are already sparsified (the streamed merge does that per block)."""
        fixed = {**self.fixed, "sparsify": None} if "sparsify" in self.fixed else self.fixed
        return self.fn(base, deltas, weights, **fixed)


METHODS: Registry[MergeMethod] = Registry("merge method")


def merge_method(name: str, *, params: Sequence[str] = (), needs_base: bool = True, summary: str = "",
                 normalise_weights: bool = False, elementwise: bool = False, **fixed: Any):
    """Register the decorated function as method ``name`` with ``fixed`` keyword arguments bound."""

    def register(fn: Callable) -> Callable:
        METHODS.add(name, MergeMethod(name, fn, dict(fixed), tuple(params), needs_base, summary,
                                    normalise_weights, random="generators" in params, elementwise=elementwise))
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
    ranks ``[int(gamma n), int(gamma n) + int(density n))`` in descending |Δ| survive.
    """
    n = delta.numel()
    n_top, n_keep = int(gamma * n), int(density * n)
    magnitude = delta.abs()
    keep = top_k_mask(magnitude, n_top + n_keep) & ~top_k_mask(magnitude, n_top)
    return delta.mul_(keep)


def _sparsify(kind: str | None, delta, *, density, drop_rate, gamma, generator):
    if kind is None:
        return delta
    if kind == "magnitude":
        return sparsify_magnitude(delta, density=density)
    if kind == "random":
        return sparsify_random(delta, drop_rate=drop_rate, generator=generator)
    if kind == "outliers":
        return sparsify_outliers(delta, density=density, gamma=gamma)
    raise ValueError(f"unknown sparsification {kind!r}")


# ---------------------------------------------------------------- combining N task vectors

def sign_consensus_mean(weighted: Sequence, weights: Sequence[float]):
    """TIES "elect" and "disjoint merge" of weighted task vectors.

    ``weighted``: N tensors of shape S, tensor i is ``w_i * trimmed Δ_i``; ``weights``: N floats.
    The elected sign per entry is the sign of ``Σ_i w_i Δ_i`` (zero counts as +). Only entries whose
    own sign equals the elected one take part, and they are averaged with their weights:

        merged = Σ_i m_i w_i Δ_i / Σ_i m_i w_i,   m_i = [sign(w_i Δ_i) == elected]

    With equal weights this is the paper's disjoint mean (Yadav et al. 2023, section 3); entries no
    model agrees on (all zero) stay zero. Works model by model (no (N, *S) stack), so memory holds
    the N inputs plus three tensors of shape S.
    """
    import torch

    plus = weighted[0].clone()
    for t in weighted[1:]:
        plus.add_(t)
    plus = plus >= 0  # elected sign: True for +
    total = torch.zeros_like(weighted[0])
    divisor = torch.zeros_like(weighted[0])
    for t, w in zip(weighted, weights, strict=True):
        agree = torch.where(plus, t > 0, t < 0)  # zeros (trimmed) never agree
        total.add_(torch.where(agree, t, 0.0))
        divisor.add_(agree, alpha=w)
    divisor[divisor == 0] = 1.0
    return total.div_(divisor)


# decorators apply bottom-up: the last one listed registers first (and is listed first in --help)
@merge_method("breadcrumbs", params=("density", "gamma"), sparsify="outliers",
              summary="drop top gamma, keep next density, Σ w_i Δ_i")
@merge_method("dare-ties", params=("drop_rate", "generators"), sparsify="random", consensus=True,
              summary="random drop + rescale, then TIES sign consensus")
@merge_method("dare-linear", params=("drop_rate", "generators"), sparsify="random",
              summary="random drop + rescale, then Σ w_i Δ_i")
@merge_method("ties", params=("density",), sparsify="magnitude", consensus=True,
              summary="trim to top density, elect sign, weighted disjoint mean")
@merge_method("task-arithmetic", summary="Σ w_i Δ_i", elementwise=True)
def generalized_task_arithmetic(base, deltas, weights, *, sparsify: str | None = None,
                                consensus: bool = False, density: float = 0.2, drop_rate: float = 0.9,
                                gamma: float = 0.01, generators: Sequence | None = None):
    """Task arithmetic with optional per-vector sparsification and sign consensus.

    Task Arithmetic (Ilharco et al. 2023, "Editing Models with Task Arithmetic", ICLR): the merged
    task vector is ``Σ_i w_i Δ_i``. The registered parameter sets are

    ==================  ==============  =========  ===============================================
    name                sparsify        consensus  paper
    ==================  ==============  =========  ===============================================
    task-arithmetic     none            no         Ilharco et al. 2023
    ties                magnitude       yes        Yadav et al. 2023 (TIES-Merging)
    dare-linear         random          no         Yu et al. 2024 (DARE)
    dare-ties           random          yes        Yu et al. 2024 + Yadav et al. 2023
    breadcrumbs         outliers        no         Davari & Belilovsky 2024 (Model Breadcrumbs)
    ==================  ==============  =========  ===============================================

    ``deltas``: N tensors of shape S (float32, overwritten); ``generators``: one ``torch.Generator``
    per model (random sparsification only). Returns shape S. ``base`` is not read: the methods act on
    Δ alone. Compared with mergekit: ``task-arithmetic`` and ``ties`` compute the same numbers
    (``ties`` there also divides by Σ m_i w_i); mergekit's ``dare_ties`` skips that division by
    default, PAW's ``dare-ties`` keeps it, as TIES does.
    """

    for i, d in enumerate(deltas):  # in place
        _sparsify(sparsify, d, density=density, drop_rate=drop_rate, gamma=gamma,
                  generator=None if generators is None else generators[i])
    if consensus:
        for d, w in zip(deltas, weights, strict=True):
            d.mul_(w)
        return sign_consensus_mean(deltas, weights)
    merged = deltas[0].mul_(weights[0])
    for d, w in zip(deltas[1:], weights[1:], strict=True):
        merged.add_(d, alpha=w)  # weight folded into the sum: one pass per model
    return merged


@merge_method("linear", needs_base=False, normalise_weights=True, elementwise=True,
              summary="weighted average of the full weights (model soup)")
def linear(base, deltas, weights):
    """Weighted average of the full models, ``Σ_i w_i M_i / Σ_i w_i`` (a "model soup").

    Wortsman et al. 2022, "Model soups: averaging weights of multiple fine-tuned models improves
    accuracy without increasing inference time" (ICML). Written in task-vector form, relative to any
    reference R (the base, or the first model when there is no base): ``R + Σ w_i (M_i - R) / Σ w_i``
    equals the average because the normalised weights sum to one, so no base is needed.
    """
    total = float(sum(weights))
    merged = deltas[0].mul_(weights[0] / total)
    for w, d in zip(weights[1:], deltas[1:], strict=True):
        merged.add_(d, alpha=w / total)
    return merged


def tensor_seed(seed: int, name: str, model_index: int) -> int:
    """A 63-bit seed for one (tensor, model) pair, stable across runs, machines and Python versions.

    Python's ``hash()`` of a string changes per process, so a BLAKE2 digest is used instead:
    ``tensor_seed(0, 'lm_head.weight', 1)`` is the same number everywhere.
    """
    digest = hashlib.blake2b(f"{seed}\x00{name}\x00{model_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)
