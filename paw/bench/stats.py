"""Accuracies with standard errors and the recovered fraction with a paired bootstrap.

All conditions of one (target, task, seed) are scored on the *same* held-out items, so the recovered
fraction ``r = (acc_transfer - acc_base) / (acc_direct - acc_base)`` is estimated with a paired
bootstrap over items: each replicate resamples item indices once per seed and recomputes the three
accuracies on the same resample. Seeds are pooled as a ratio of means,
``r = sum_s (t_s - b_s) / sum_s (d_s - b_s)`` (stable when one seed's ceiling is low). Reported:
the point estimate, the bootstrap standard error and the 2.5/97.5 percentiles.

>>> recovered([[1, 1, 0, 1]], [[0, 0, 0, 1]], [[1, 1, 1, 1]], n_boot=0)["value"]
0.6666666666666666
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def accuracy(correct_per_seed: Sequence[Sequence[int]]) -> dict:
    """Mean accuracy over seeds and its binomial standard error over all scored items.

    >>> accuracy([[1, 0, 1, 1], [1, 1, 0, 0]])
    {'mean': 0.625, 'stderr': 0.1711632992203644, 'n': 8, 'per_seed': [0.75, 0.5]}
    """
    per_seed = [float(np.mean(c)) for c in correct_per_seed]
    n = sum(len(c) for c in correct_per_seed)
    p = float(np.sum([np.sum(c) for c in correct_per_seed]) / n)
    return {"mean": p, "stderr": math.sqrt(p * (1 - p) / n), "n": n, "per_seed": per_seed}


def _ratio(t: np.ndarray, b: np.ndarray, d: np.ndarray) -> float:
    """Ratio of summed gains; arrays are (seeds, items) or (reps, seeds, items)."""
    gain = (t.mean(-1) - b.mean(-1)).sum(-1)
    ceiling = (d.mean(-1) - b.mean(-1)).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return gain / ceiling


def recovered(transfer: Sequence[Sequence[int]], base: Sequence[Sequence[int]], direct: Sequence[Sequence[int]],
              *, n_boot: int = 1000, seed: int = 0) -> dict:
    """Recovered fraction with paired-bootstrap uncertainty; inputs are per-seed 0/1 item outcomes.

    ``ceiling_gain`` is ``mean(direct - base)``; when it is within two standard errors of zero the
    fraction is meaningless and ``ceiling_ok`` is False (``value`` is None when the gain is exactly 0).
    """
    t, b, d = (np.asarray(x, dtype=float) for x in (transfer, base, direct))
    if not t.shape == b.shape == d.shape:
        raise ValueError(f"outcome shapes differ: {t.shape}, {b.shape}, {d.shape}")
    value = float(_ratio(t, b, d))
    value = value if math.isfinite(value) else None  # 0/0 when the ceiling equals the base: no fraction
    gain = float((d - b).mean())
    gain_se = float((d - b).std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    out = {"value": value, "stderr": None, "low": None, "high": None, "ceiling_gain": gain,
           "ceiling_ok": bool(gain > 2 * gain_se and gain > 0)}
    if n_boot <= 0:
        return out
    rng = np.random.default_rng(seed)
    seeds, items = t.shape
    idx = rng.integers(0, items, size=(n_boot, seeds, items))
    rows = np.arange(seeds)[None, :, None]
    reps = _ratio(t[rows, idx], b[rows, idx], d[rows, idx])
    reps = reps[np.isfinite(reps)]
    if len(reps) > 1:
        out.update(stderr=float(reps.std(ddof=1)), low=float(np.percentile(reps, 2.5)),
                   high=float(np.percentile(reps, 97.5)))
    return out
