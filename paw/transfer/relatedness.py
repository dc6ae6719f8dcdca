"""Is a target module related to its source module? A permutation-style test with a null from the models.

Raw similarity means little on its own: different layers of one trained model already share 30-48%
of their residual-side subspaces (all of them read and write the same residual stream), far above
the chance level R/d of random subspaces. So the question asked here is the one a permutation test
asks: does the source module match its *partner* clearly better than it matches the *other layers*
of the target (same module type)? The other layers are the null; no distribution is assumed.

Two statistics, each turned into a **lift** over its null (0: no better than a wrong layer, 1: perfect):

- subspace similarity ``s`` (:func:`paw.transfer.linalg.subspace_similarity`, in the method's common
  frame, the weaker of the output and input sides): ``lift = (s − m) / (1 − m)`` with ``m`` the median
  similarity to the null layers (at least the chance level R/d);
- re-mix residual ``r`` (only where the method keeps the source's coordinates, so that ``W_t ≈ c·W_s``
  is a meaningful question): ``lift = (m_r − r) / m_r`` with ``m_r`` the median null residual.

A module is related when either lift reaches its threshold. Both thresholds live below, each with
the measurement that set it (``scripts/bench_relatedness.py`` reproduces them); ``docs/transfer.md``
explains the choice. The false-accept rate is the share of wrong pairs (independent random models at
the speed benchmark's shapes, same-model different-layer pairs, independently trained and distilled
models) whose lift reaches the threshold: 0 of 434 measured similarity lifts (largest 0.283) and 0 of
224 residual lifts (largest 0.004); see ``docs/transfer.md``.

>>> lift(0.95, 0.35)
0.923077
>>> residual_lift(0.17, 1.0)
0.83
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# ---- thresholds (one place; each with the measurement that set it) ---------------------------------
# Measured by scripts/bench_relatedness.py on the benchmark's default build (model seed 0) with a
# random rank-8 LoRA on all projections; docs/transfer.md has the table.
# Similarity lift: 434 wrong-pair lifts (same model other layer, independently trained, distilled, and
# independent random models at the four speed-benchmark layouts) reached at most 0.283 (embed-map,
# layer 0 of the independently trained model; 99th percentile 0.156); 133 right-pair lifts (mild and
# harsh upgrade, grown, pruned; the method auto chose) at least 0.517 (pruned, structural). 0.40 splits
# the gap.
SIMILARITY_LIFT = 0.4
# Residual lift (same-coordinate methods only): 224 wrong-pair lifts at most 0.004 (other weights have
# residual ~1 against the source); 56 right-pair lifts at least 0.50 (the harsh upgrade; the mild one
# 0.82). 0.25 splits the gap.
RESIDUAL_LIFT = 0.25
# Null size: at most this many other target layers, the nearest to the partner (the strictest null:
# neighbouring layers resemble each other most).
NULL_LAYERS = 8
# A target is refused when fewer than this share of the judged modules is related.
MIN_RELATED_FRACTION = 0.5
# ‖ΔW_t‖/‖ΔW_s‖ above this is a blow-up, not a transfer (an unregularised fit once gave 13x).
NORM_GUARD = 3.0
# A transfer that keeps less than this share of ΔW (or of its norm) is flagged: most of it was dropped.
KEPT_WARNING = 0.5


def lift(similarity: float, null: float) -> float:
    """``(s − m) / (1 − m)``: how far ``s`` lies beyond the null level ``m`` toward 1."""
    if null >= 1.0:
        return 0.0
    return round((similarity - null) / (1.0 - null), 6)


def residual_lift(residual: float, null: float) -> float:
    """``(m_r − r) / m_r``: how far the residual ``r`` lies below the null level ``m_r`` toward 0."""
    if null <= 0.0:
        return 0.0
    return round((null - residual) / null, 6)


def null_level(values: list[float], floor: float = 0.0) -> float | None:
    """The null's level: the median of the wrong-layer values (at least ``floor``); None when there are none.

    The median, not the maximum: a grown target holds copies of some layers (LLaMA Pro block
    expansion), and one look-alike among the other layers must not hide a true partner.
    """
    if not values:
        return None
    return max(float(statistics.median(values)), floor)


def null_layers(partner: int, n_layers: int, cap: int = NULL_LAYERS) -> list[int]:
    """The other layers used as the null: up to ``cap`` nearest to ``partner`` (ties: the lower first).

    >>> null_layers(2, 6, cap=3)
    [1, 3, 0]
    """
    others = sorted((j for j in range(n_layers) if j != partner), key=lambda j: (abs(j - partner), j))
    return others[:cap]


@dataclass(frozen=True)
class Verdict:
    """The relatedness of one module under one method, with the evidence."""

    related: bool
    similarity_lift: float | None
    residual_lift: float | None
    reason: str


def judge(sim_lift: float | None, res_lift: float | None, *, min_similarity_ok: bool = True) -> Verdict:
    """Related when either lift reaches its threshold (and a user's ``--min-similarity`` floor is met)."""
    by_sim = sim_lift is not None and sim_lift >= SIMILARITY_LIFT
    by_res = res_lift is not None and res_lift >= RESIDUAL_LIFT
    if not min_similarity_ok:
        return Verdict(False, sim_lift, res_lift, "similarity below --min-similarity")
    if by_sim or by_res:
        why = " and ".join(w for w, ok in (("similarity", by_sim), ("residual", by_res)) if ok)
        return Verdict(True, sim_lift, res_lift, f"{why} clearly better than the other target layers")
    if sim_lift is None and res_lift is None:
        return Verdict(False, None, None, "no common frame to compare the weights in")
    return Verdict(False, sim_lift, res_lift, "no better match than the other target layers")
