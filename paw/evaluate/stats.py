"""Accuracy with its binomial standard error, and the paired difference of two conditions scored on the
same items: the statistics ``paw eval``, the transfer gain gate and the benchmarks share.

numpy is imported inside the functions that use it: ``paw eval``'s scoring module imports this one, and
``paw --help`` start-up stays free of numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def accuracy(correct_per_seed: Sequence[Sequence[int]]) -> dict:
    """Mean accuracy over seeds and its binomial standard error over all scored items.

    >>> accuracy([[1, 0, 1, 1], [1, 1, 0, 0]])
    {'mean': 0.625, 'stderr': 0.1711632992203644, 'n': 8, 'per_seed': [0.75, 0.5]}
    """
    import numpy as np

    per_seed = [float(np.mean(c)) for c in correct_per_seed]
    n = sum(len(c) for c in correct_per_seed)
    p = float(np.sum([np.sum(c) for c in correct_per_seed]) / n)
    return {"mean": p, "stderr": math.sqrt(p * (1 - p) / n), "n": n, "per_seed": per_seed}


def mean_stderr(values: Sequence[float]) -> float | None:
    """lm-evaluation-harness's ``mean_stderr``: the *sample* standard deviation (``n - 1``) over ``sqrt(n)``,
    what lm-eval prints beside ``acc`` and ``acc_norm``; ``None`` for fewer than two values (lm-eval: N/A).

    For 0/1 outcomes with accuracy ``p`` it is ``sqrt(p (1 - p) / (n - 1))``: [1, 1, 0, 0] gives
    ``sqrt(1/3) / 2``, where the binomial ``sqrt(p (1 - p) / n)`` gives 0.25.

    >>> round(mean_stderr([1, 1, 0, 0]), 6), mean_stderr([1])
    (0.288675, None)
    """
    n = len(values)
    if n < 2:
        return None
    mu = math.fsum(values) / n
    return math.sqrt(math.fsum((x - mu) ** 2 for x in values) / (n - 1)) / math.sqrt(n)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict:
    """Mean of ``a − b`` over the same items and its paired standard error ``sd(a − b) / √n``.

    Pairing removes what both conditions share (the items that are easy or hard for either), so a
    small gain on a small set is visible where two unpaired binomial errors would hide it.

    >>> paired_difference([1, 1, 0, 1], [0, 1, 0, 0])
    {'difference': 0.5, 'stderr': 0.28867513459481287, 'n': 4}
    """
    import numpy as np

    x, y = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if x.size != y.size:
        raise ValueError(f"paired outcomes differ in length: {x.size} and {y.size}")
    d = x - y
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    return {"difference": float(d.mean()), "stderr": se, "n": int(d.size)}


TIE = 1e-9   # a gain this close to the bar is a tie, and a tie does not clear it (on any machine)


def clears(gain: dict, z: float) -> bool:
    """Whether a paired gain exceeds ``z`` of its stderrs. Outcomes are 0/1, so a gain exactly on the bar is
    common (with ``z = 1``, whenever (right - wrong)² = right + wrong among the changed items), and float
    rounding would decide it differently on different machines: within :data:`TIE` it does not clear.

    >>> clears({"difference": 0.5, "stderr": 0.25}, 2.0), clears({"difference": 0.51, "stderr": 0.25}, 2.0)
    (False, True)
    """
    return gain["difference"] - z * gain["stderr"] > TIE


def clustered_difference(a: Sequence[float], b: Sequence[float], groups: Sequence[str]) -> dict:
    """:func:`paired_difference` with a cluster-robust standard error: the items of one group (two questions
    about one fact) move together, so each group's summed deviation is one independent draw.

    ``se² = G / (G - 1) · Σ_g (Σ_{i in g} (d_i - d̄))² / n²`` over ``G`` groups: what resampling whole
    groups estimates (the cluster bootstrap). With every item its own group it is the paired stderr
    exactly. An empty group key makes the item a group of its own.

    >>> clustered_difference([1, 1, 0, 1], [0, 1, 0, 0], ["a", "b", "c", "d"])["stderr"] == \\
    ...     paired_difference([1, 1, 0, 1], [0, 1, 0, 0])["stderr"]
    True
    >>> clustered_difference([1, 1, 0, 0], [0, 0, 0, 0], ["x", "x", "y", "y"])
    {'difference': 0.5, 'stderr': 0.5, 'n': 4, 'groups': 2}
    """
    import numpy as np

    x, y = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if not x.size == y.size == len(groups):
        raise ValueError(f"paired outcomes and groups differ in length: {x.size}, {y.size}, {len(groups)}")
    keys = [g if g else f"\0item-{i}" for i, g in enumerate(groups)]
    d = x - y
    sums: dict[str, float] = {}
    for key, dev in zip(keys, d - d.mean(), strict=True):
        sums[key] = sums.get(key, 0.0) + float(dev)
    g = len(sums)
    se = math.sqrt(g / (g - 1) * sum(s * s for s in sums.values())) / d.size if g > 1 else 0.0
    return {"difference": float(d.mean()), "stderr": se, "n": int(d.size), "groups": g}


def false_pass_rate(*, items: int, z: float, moves: int = 2000, seed: int = 0, base_rate: float = 0.6,
                    flip: float = 0.15, per_group: int = 1, told_groups: bool = True) -> float:
    """The share of simulated moves with **no** gain that a gate passes (gain > ``z`` · stderr).

    Each move draws ``items`` outcomes of the target base (right with ``base_rate``); the moved adapter
    changes each outcome with probability ``flip``, to right or to wrong alike, so its expected gain is 0.
    ``per_group`` items share one group and one draw (two questions about one fact): the gate is told the
    groups, as ``--check-data`` items naming a ``group`` do (``told_groups=False``: it is not, and counts
    every item as independent). No model runs; seeded, so the rate is reproducible.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    n_groups = -(-items // per_group)
    groups = [str(i // per_group) for i in range(items)]
    passed = 0
    for _ in range(moves):
        base = np.repeat(rng.random(n_groups) < base_rate, per_group)[:items].astype(float)
        flips = np.repeat(rng.random(n_groups) < flip, per_group)[:items]
        to_right = np.repeat(rng.random(n_groups) < base_rate, per_group)[:items]
        moved = np.where(flips, to_right.astype(float), base)
        gain = clustered_difference(moved, base, groups) if told_groups else paired_difference(moved, base)
        passed += clears(gain, z)
    return passed / moves
