"""Accuracy with its binomial standard error, and the paired difference of two conditions scored on the
same items: the statistics ``paw eval``, the transfer gain gate and the benchmarks share.
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


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict:
    """Mean of ``a − b`` over the same items and its paired standard error ``sd(a − b) / √n``.

    Pairing removes what both conditions share (the items that are easy or hard for either), so a
    small gain on a small set is visible where two unpaired binomial errors would hide it.

    >>> paired_difference([1, 1, 0, 1], [0, 1, 0, 0])
    {'difference': 0.5, 'stderr': 0.28867513459481287, 'n': 4}
    """
    x, y = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if x.size != y.size:
        raise ValueError(f"paired outcomes differ in length: {x.size} and {y.size}")
    d = x - y
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    return {"difference": float(d.mean()), "stderr": se, "n": int(d.size)}
