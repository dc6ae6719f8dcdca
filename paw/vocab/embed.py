"""Embedding arithmetic for vocabulary moves: apply a mapping, orthogonal matching pursuit.

A mapping row ``t -> ([s1, s2], [w1, w2])`` means ``E_target[t] = w1 * E_source[s1] + w2 * E_source[s2]``;
unmapped rows get a fallback (the mean source row, as in Hewitt 2021, "Initializing new word
embeddings for pretrained language models": close to where the model expects a token, far from
any particular one). Device-agnostic torch; work is chunked so that memory stays ~ (chunk, d).
"""

from __future__ import annotations

from paw.errors import PawError
from paw.io.vocab_map import VocabMapping

FALLBACKS = ("mean", "zero")


def apply_mapping(E_source, mapping: VocabMapping, *, fallback: str = "mean", chunk: int = 65536):
    """``E_source`` (Ns, d) -> ``E_target`` (Nt, d), same dtype and device.

    >>> E = torch.arange(6.).reshape(3, 2)                                  # doctest: +SKIP
    >>> m = VocabMapping(3, 2, {0: ("exact", [2], [1.0]), 1: ("decompose", [0, 1], [.5, .5])})
    >>> apply_mapping(E, m)                                                 # doctest: +SKIP
    tensor([[4., 5.], [1., 2.]])
    """
    import torch

    if fallback not in FALLBACKS:
        raise PawError(f"unknown fallback {fallback!r}; choose from {', '.join(FALLBACKS)}")
    Ns, d = E_source.shape
    if Ns < mapping.source_size:
        raise PawError(f"source embedding has {Ns} rows but the mapping's source vocabulary has "
                       f"{mapping.source_size} ids")
    dev = E_source.device
    fill = E_source[: mapping.source_size].float().mean(0) if fallback == "mean" else torch.zeros(d, device=dev)
    out = fill.expand(mapping.target_size, d).clone()
    tgt, src, wts = [], [], []
    for t, (_, s, w) in mapping.entries.items():
        tgt += [t] * len(s)
        src += s
        wts += w
    if tgt:
        mapped = torch.tensor(sorted(mapping.entries), device=dev)
        out[mapped] = 0.0
        tgt_t, src_t = torch.tensor(tgt, device=dev), torch.tensor(src, device=dev)
        w_t = torch.tensor(wts, device=dev, dtype=torch.float32)
        for a in range(0, len(tgt), chunk):
            rows = E_source[src_t[a:a + chunk]].float() * w_t[a:a + chunk, None]  # (chunk, d)
            out.index_add_(0, tgt_t[a:a + chunk], rows)
    return out.to(E_source.dtype)


def omp_affine(X, A, *, k: int):
    """Sparse affine codes: each row of ``X`` (B, d) ≈ ``w @ A[idx]`` with ``sum(w) = 1``, ``len(idx) = k``.

    Atoms are chosen greedily by orthogonal matching pursuit (Pati, Rezaiifar & Krishnaprasad 1993):
    at each step the anchor most correlated with the least-squares residual joins; the final weights
    are solved by least squares under the affine constraint (KKT system, k+1 unknowns), so that a
    mapping row stays a weighted average. Returns ``idx`` (B, k)
    long and ``w`` (B, k) float32.
    """
    import torch

    B, d = X.shape
    An = A / A.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (Na, d) unit rows for selection
    idx = torch.empty(B, 0, dtype=torch.long, device=X.device)
    resid = X.clone()
    for _ in range(k):  # plain OMP picks the atoms: residual of the unconstrained least squares fit
        corr = (resid @ An.T).abs()  # (B, Na)
        corr.scatter_(1, idx, -1.0)  # never pick an anchor twice
        idx = torch.cat([idx, corr.argmax(1, keepdim=True)], 1)
        D = A[idx]  # (B, j, d)
        coef = torch.linalg.lstsq(D.transpose(1, 2), X[:, :, None]).solution  # (B, j, 1)
        resid = X - (D.transpose(1, 2) @ coef).squeeze(2)
    return idx, _affine_weights(X, A[idx])


def _affine_weights(X, D):
    """argmin ||w @ D - x|| subject to sum(w) = 1, per row: KKT system [[2G, 1], [1ᵀ, 0]]."""
    import torch

    B, k, _ = D.shape
    kkt = torch.zeros(B, k + 1, k + 1, device=X.device, dtype=X.dtype)
    kkt[:, :k, :k] = 2 * (D @ D.transpose(1, 2)) + 1e-6 * torch.eye(k, device=X.device, dtype=X.dtype)
    kkt[:, :k, k] = 1.0
    kkt[:, k, :k] = 1.0
    rhs = torch.cat([2 * (D @ X[:, :, None]).squeeze(2), torch.ones(B, 1, device=X.device, dtype=X.dtype)], 1)
    return torch.linalg.solve(kkt, rhs)[:, :k]
