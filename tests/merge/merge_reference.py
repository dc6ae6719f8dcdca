"""Numpy references of the merge formulas, written from the papers, independent of paw.merge.methods.

Each takes the base tensor ``b`` and the task vectors ``deltas`` (float32 arrays) and returns the
merged task vector in float64. Magnitude ranks use a stable sort, so ties go to the lower index.
"""

from __future__ import annotations

import numpy as np


def rank_mask(delta: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Keep entries whose rank by descending |Δ| (ties: lower flat index first) is in [start, stop)."""
    order = np.argsort(-np.abs(delta.reshape(-1)), kind="stable")
    keep = np.zeros(delta.size, dtype=bool)
    keep[order[start:stop]] = True
    return keep.reshape(delta.shape)


def trim(delta, density):
    if density >= 1:
        return delta.astype(np.float64)
    k = max(1, int(density * delta.size))
    return np.where(rank_mask(delta, 0, k), delta, 0).astype(np.float64)


def task_arithmetic(deltas, weights):
    return sum(w * d.astype(np.float64) for w, d in zip(weights, deltas, strict=True))


def ties_merge(trimmed, weights):
    """Elect sign of Σ w_i t_i (0 -> +), average w_i t_i over agreeing entries with weights."""
    weighted = np.stack([w * t for w, t in zip(weights, trimmed, strict=True)])
    elected = np.where(weighted.sum(0) >= 0, 1.0, -1.0)
    agree = np.sign(weighted) == elected
    w = np.asarray(weights, dtype=np.float64).reshape(-1, *([1] * (weighted.ndim - 1)))
    divisor = (w * agree).sum(0)
    divisor[divisor == 0] = 1
    return (weighted * agree).sum(0) / divisor


def ties(deltas, weights, density):
    return ties_merge([trim(d, density) for d in deltas], weights)


def dare(deltas, keep_masks, drop_rate):
    return [np.where(m, d.astype(np.float64), 0) / (1 - drop_rate) for d, m in zip(deltas, keep_masks, strict=True)]


def breadcrumbs(deltas, weights, density, gamma):
    out = []
    for d in deltas:
        n_top, n_keep = int(gamma * d.size), int(density * d.size)
        out.append(np.where(rank_mask(d, n_top, n_top + n_keep), d, 0).astype(np.float64))
    return task_arithmetic(out, weights)


def soup(models, weights):
    """Model soup: Σ w_i M_i / Σ w_i (full weights)."""
    return sum(w * m.astype(np.float64) for w, m in zip(weights, models, strict=True)) / sum(weights)
