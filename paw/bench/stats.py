"""Accuracies with standard errors, and gain ratios (recovered, kept) with a paired cluster bootstrap.

All conditions of one (task, seed) are scored on the *same* held-out items, on every base, so a ratio
of gains is estimated with a paired bootstrap: each replicate resamples once per seed and recomputes
every accuracy of the ratio on the same resample. Items that are not independent (the two questions
about one invented fact) form a *cluster* and are resampled together; without clusters each item is
its own. Seeds are pooled as a ratio of summed gains, ``r = Σ_s (t_s − b_s) / Σ_s (d_s − b_s)``
(stable when one seed's ceiling is low). Reported: the point estimate, the bootstrap standard error,
the 2.5/97.5 percentiles, and the per-seed values with their spread.

- recovered fraction: ``(transfer − target base) / (LoRA trained on the target − target base)``;
- kept fraction: ``(transfer − target base) / (source + LoRA − source base)``, the share of the gain
  the adapter had on its own base that survives the move.

>>> gain_ratio([[1, 1, 0, 1]], [[0, 0, 0, 1]], [[1, 1, 1, 1]], [[0, 0, 0, 1]], n_boot=0)["value"]
0.6666666666666666
"""

from __future__ import annotations

import math

import numpy as np

from paw.evaluate.stats import accuracy, paired_difference  # noqa: F401 - part of this module's API


def _weights(rng, clusters: np.ndarray, n_boot: int) -> np.ndarray:
    """(n_boot, items) bootstrap weights: how often each item's cluster was drawn (clusters of one seed)."""
    labels, index = np.unique(clusters, return_inverse=True)
    draws = rng.integers(0, len(labels), size=(n_boot, len(labels)))
    counts = np.zeros((n_boot, len(labels)))
    np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1.0)
    return counts[:, index]


def _ratio(arrays: list[np.ndarray], w: np.ndarray | None = None) -> np.ndarray:
    """``Σ_s (a_s − b_s) / Σ_s (c_s − d_s)`` of per-seed (weighted) means; arrays are (seeds, items)."""
    if w is None:
        means = [x.mean(-1) for x in arrays]
    else:  # w: (reps, seeds, items)
        means = [(w * x).sum(-1) / w.sum(-1) for x in arrays]
    hi, lo, top, bottom = means
    with np.errstate(divide="ignore", invalid="ignore"):
        return (hi - lo).sum(-1) / (top - bottom).sum(-1)


def gain_ratio(transfer, base, top, bottom, *, clusters=None, n_boot: int = 1000, seed: int = 0) -> dict:
    """``(transfer − base) / (top − bottom)`` pooled over seeds, with a paired cluster bootstrap.

    Inputs are per-seed 0/1 outcomes on the same items; ``clusters`` per seed (or None: every item its
    own cluster). ``ceiling_gain`` is ``mean(top − bottom)``; when it is within two standard errors of
    zero the ratio is meaningless and ``ceiling_ok`` is False (``value`` is None when it is exactly 0).
    """
    arrays = [np.asarray(x, dtype=float) for x in (transfer, base, top, bottom)]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"outcome shapes differ: {[a.shape for a in arrays]}")
    value = float(_ratio(arrays))
    value = value if math.isfinite(value) else None  # 0/0 when the ceiling equals the base: no fraction
    per_seed = [float(_ratio([a[s:s + 1] for a in arrays])) for s in range(arrays[0].shape[0])]
    per_seed = [v if math.isfinite(v) else None for v in per_seed]
    paired = paired_difference(arrays[2], arrays[3])
    gain, gain_se = paired["difference"], paired["stderr"]
    finite = [v for v in per_seed if v is not None]
    out = {"value": value, "stderr": None, "low": None, "high": None, "ceiling_gain": gain,
           "ceiling_ok": bool(gain > 2 * gain_se and gain > 0), "per_seed": per_seed,
           "seed_spread": float(np.std(finite, ddof=1)) if len(finite) > 1 else None}
    if n_boot <= 0:
        return out
    rng = np.random.default_rng(seed)
    seeds, items = arrays[0].shape
    cl = [np.arange(items) if clusters is None or clusters[s] is None else np.asarray(clusters[s])
          for s in range(seeds)]
    w = np.stack([_weights(rng, cl[s], n_boot) for s in range(seeds)], axis=1)  # (reps, seeds, items)
    reps = _ratio(arrays, w)
    reps = reps[np.isfinite(reps)]
    if len(reps) > 1:
        out.update(stderr=float(reps.std(ddof=1)), low=float(np.percentile(reps, 2.5)),
                   high=float(np.percentile(reps, 97.5)))
    return out


def recovered(transfer, base, direct, *, clusters=None, n_boot: int = 1000, seed: int = 0) -> dict:
    """Recovered fraction ``(transfer − base) / (direct − base)`` (see :func:`gain_ratio`).

    >>> recovered([[1, 1, 0, 1]], [[0, 0, 0, 1]], [[1, 1, 1, 1]], n_boot=0)["value"]
    0.6666666666666666
    """
    return gain_ratio(transfer, base, direct, base, clusters=clusters, n_boot=n_boot, seed=seed)


def kept(transfer, base, source_adapted, source_base, *, clusters=None, n_boot: int = 1000, seed: int = 0) -> dict:
    """Kept fraction ``(transfer − target base) / (source + LoRA − source base)`` (see :func:`gain_ratio`)."""
    return gain_ratio(transfer, base, source_adapted, source_base, clusters=clusters, n_boot=n_boot, seed=seed)


def build_spread(values: dict[int, float | None]) -> float | None:
    """Standard deviation of a figure across model builds (``{model_seed: value}``), None with fewer than two."""
    finite = [v for v in values.values() if v is not None and math.isfinite(v)]
    return float(np.std(finite, ddof=1)) if len(finite) > 1 else None
