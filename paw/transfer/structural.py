"""Recover which target units come from which source units, from the weights alone.

Pruned and grown siblings (Minitron, Muralidharan et al. 2024; Sheared-LLaMA, Xia et al. 2024;
LLaMA Pro, Wu et al. 2024) keep a subset or a superset of the source's hidden channels, attention
heads, MLP neurons and layers. Each unit leaves a fingerprint in the weights that touch it: a hidden
channel is a column of the embedding table, a KV head is a block of k/v rows, a query head a block of
q rows plus o columns, a neuron a gate row, an up row and a down column. Fingerprints are compared by
correlation and paired with an assignment solver (``scipy.optimize.linear_sum_assignment``); a unit
whose best partner correlates below :data:`MIN_CORRELATION` stays unpaired (``-1``), which is what
new units of a grown model are.

Maps are index lists ``idx`` of target length: ``idx[j]`` is the source unit of target unit ``j`` or -1.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_CORRELATION = 0.3
SKETCH_DIM = 64  # neuron fingerprints longer than this are compared through a shared random sketch


@dataclass
class UnitMap:
    """``index[j]``: source unit of target unit j (-1: none); ``score``: mean correlation of the pairs."""

    index: list[int]
    score: float

    @property
    def paired(self) -> int:
        return sum(i >= 0 for i in self.index)


def _normalise_rows(F):
    F = F.float()
    F = F - F.mean(dim=1, keepdim=True)
    n = F.norm(dim=1, keepdim=True)
    return F / n.clamp_min(1e-12)


def match_units(F_t, F_s, *, min_correlation: float = MIN_CORRELATION) -> UnitMap:
    """Pair the rows of ``F_t`` (n_t, f) with rows of ``F_s`` (n_s, f) by maximal total correlation.

    Shortcuts before the O(n³) solver: when the identity pairing already correlates well (a same-shape
    drifted model) it is kept; when every row's best partner is distinct the argmax is optimal.

    >>> import torch; F = torch.randn(5, 20)
    >>> match_units(F[[3, 0]], F).index
    [3, 0]
    """
    import numpy as np
    import torch

    Ft, Fs = _normalise_rows(F_t), _normalise_rows(F_s)
    n_t, n_s = Ft.shape[0], Fs.shape[0]
    if n_t == n_s:
        diag = (Ft * Fs).sum(dim=1)
        if float(diag.min()) >= 0.9:
            return UnitMap(list(range(n_t)), float(diag.mean()))
    C = Ft @ Fs.T  # (n_t, n_s)
    best = C.argmax(dim=1)
    if n_t <= n_s and len(torch.unique(best)) == n_t:
        rows, cols = np.arange(n_t), best.cpu().numpy()
    else:
        from scipy.optimize import linear_sum_assignment  # ~1 s to import: only when the shortcuts fail

        rows, cols = linear_sum_assignment(C.cpu().double().numpy(), maximize=True)
    index = [-1] * n_t
    scores = []
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        value = float(C[r, c])
        if value >= min_correlation:
            index[r] = c
            scores.append(value)
    return UnitMap(index, sum(scores) / len(scores) if scores else 0.0)


def sketch(F, dim: int = SKETCH_DIM, *, seed: int = 0):
    """Project fingerprints (n, f) onto ``dim`` shared Gaussian directions when f is larger (same seed, same directions)."""
    import torch

    if F.shape[1] <= dim:
        return F.float()
    gen = torch.Generator().manual_seed(seed)
    omega = torch.randn(F.shape[1], dim, generator=gen).to(F.device)
    return F.float() @ omega


def hidden_channel_map(X_s, X_t) -> UnitMap:
    """Hidden channels from embedding columns: X_s (n, d_s), X_t (n, d_t) are rows of the same tokens."""
    return match_units(X_t.T, X_s.T)


def block_rows(W, block: int):
    """(n_blocks · block, k) -> (n_blocks, block · k): one fingerprint per head."""
    return W.reshape(W.shape[0] // block, -1)


def expand(unit_map: UnitMap, block: int) -> list[int]:
    """Head map -> row map: head j of ``block`` rows takes rows of its source head (``-1`` stays ``-1``)."""
    return [src * block + k if src >= 0 else -1 for src in unit_map.index for k in range(block)]


def layer_unit_maps(src: dict, tgt: dict, hidden: UnitMap, head_dim: int) -> dict[str, UnitMap]:
    """Maps of query heads ('q'), KV heads ('kv') and neurons ('neuron') between one layer pair.

    ``src``/``tgt``: ``{'q': W, 'k': W, ..., 'down': W}`` by :mod:`paw.arch` role (missing ones are skipped).
    Source columns are gathered at the hidden-channel map first so both sides share coordinates.
    """
    import torch

    cols_t = [j for j, i in enumerate(hidden.index) if i >= 0]
    cols_s = [hidden.index[j] for j in cols_t]
    ct, cs = torch.tensor(cols_t, dtype=torch.long), torch.tensor(cols_s, dtype=torch.long)

    def reader(ws, wt):  # (units·block, hidden) restricted to the paired channels
        return ws[:, cs.to(ws.device)], wt[:, ct.to(wt.device)]

    def writer(ws, wt):  # (hidden, units·block) -> rows per unit
        return ws[cs.to(ws.device)].T, wt[ct.to(wt.device)].T

    maps: dict[str, UnitMap] = {}
    if "k" in src and "v" in src:
        fs = [block_rows(x, head_dim) for x in (*reader(src["k"], tgt["k"]),
                                                *reader(src["v"], tgt["v"]))]
        maps["kv"] = match_units(torch.cat([fs[1], fs[3]], 1), torch.cat([fs[0], fs[2]], 1))
    if "q" in src and "o" in src:
        qs, qt = reader(src["q"], tgt["q"])
        os_, ot = writer(src["o"], tgt["o"])
        maps["q"] = match_units(torch.cat([block_rows(qt, head_dim), block_rows(ot, head_dim)], 1),
                                torch.cat([block_rows(qs, head_dim), block_rows(os_, head_dim)], 1))
    if all(k in src for k in ("gate", "up", "down")):
        gs, gt = reader(src["gate"], tgt["gate"])
        us, ut = reader(src["up"], tgt["up"])
        ds, dt = writer(src["down"], tgt["down"])
        maps["neuron"] = match_units(sketch(torch.cat([gt, ut, dt], 1)), sketch(torch.cat([gs, us, ds], 1)))
    return maps


def gather(x, index: list[int], dim: int):
    """Take entries ``index`` of ``x`` along ``dim``; ``-1`` gives zeros (units the source lacks)."""
    import torch

    idx = torch.tensor([max(i, 0) for i in index], dtype=torch.long, device=x.device)
    out = x.index_select(dim, idx)
    missing = torch.tensor([i < 0 for i in index], device=x.device)
    if bool(missing.any()):
        shape = [1] * x.ndim
        shape[dim] = len(index)
        out = out * (~missing).reshape(shape).to(out.dtype)
    return out
