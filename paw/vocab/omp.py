"""Donor-aware orthogonal matching pursuit: build a new token's row from the donor model's view of it.

Goddard & Neto 2025, "Training-Free Tokenizer Transplantation via Orthogonal Matching Pursuit"
(arXiv 2506.06607), the default of mergekit-tokensurgeon. The donor model already has a trained row
for every token of its tokenizer. For a token the source model lacks:

1. in the donor's embedding space, approximate its row as a sparse linear combination of the rows
   of *anchors*, the tokens both vocabularies share: ``D[t] ≈ sum_j c_j D[anchor_j]``, ``k`` anchors
   chosen greedily by OMP (Pati, Rezaiifar & Krishnaprasad 1993), coefficients by least squares;
2. apply the same coefficients in the source space: ``E_new[t] = sum_j c_j E[anchor_j]``.

The coefficients are unconstrained (they need not sum to 1): the map is linear, as in the paper.
An untied output head gets its own fit, on the donor's head rows, applied to the source's head rows.

Worked example (:func:`batch_omp`): anchors ``A = [e1, e2, e3, e1+e2]`` in R^3 and
``x = (2, 2, 1)``. Step 1 scores ``|x·a| = 2, 2, 1, 4`` and takes ``e1+e2``; the residual is
``(0, 0, 1)``, so step 2 takes ``e3``; least squares gives ``x = 2 (e1+e2) + 1 e3`` exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from paw.errors import PawError

DEFAULT_K = 64        # anchors per token: the paper's and tokensurgeon's default
DEFAULT_BATCH = 512   # tokens per OMP batch; memory ~ batch * (anchors + d * k) floats
METHOD = "omp"        # the method name a donor-fitted row carries in the vocabulary map


def batch_omp(X, A, *, k: int, eps: float = 1e-8):
    """Greedy sparse codes: ``X`` (B, d) ≈ ``coef[b] @ A[idx[b]]`` with ``k`` anchors per row.

    Each step adds the anchor with the largest ``|residual · a|`` (raw inner product, as the
    reference implementation; no anchor is taken twice), extends an orthonormal basis of the chosen
    anchors by Gram-Schmidt (done twice, for float32 stability) and removes its direction from the
    residual. The coefficients solve ``R c = Q^T x`` at the end (least squares over the chosen
    anchors). An anchor that adds no new direction gets coefficient 0. Returns ``idx`` (B, k) long
    and ``coef`` (B, k) float32.
    """
    import torch

    B, d = X.shape
    N = A.shape[0]
    if not 1 <= k <= N:
        raise PawError(f"OMP needs 1 <= k <= {N} anchors, got k={k}")
    X, A = X.float(), A.float()
    Q = X.new_zeros(B, d, k)   # orthonormal basis of the chosen anchors, column t added at step t
    R = X.new_zeros(B, k, k)   # A[idx]^T = Q R
    idx = torch.zeros(B, k, dtype=torch.long, device=X.device)
    resid = X.clone()
    for t in range(k):
        score = (resid @ A.T).abs_()  # (B, N): argmax along the last dimension is 16x faster than down the first
        if t:
            score.scatter_(1, idx[:, :t], -1.0)  # no anchor twice (by index: no (B, N) mask to fill)
        j = score.argmax(1)
        idx[:, t] = j
        a = A[j]  # (B, d)
        v, proj = a, a.new_zeros(B, t)
        for _ in range(2):
            p = (Q[:, :, :t].transpose(1, 2) @ v[:, :, None]).squeeze(2)  # (B, t)
            v = v - (Q[:, :, :t] @ p[:, :, None]).squeeze(2)
            proj = proj + p
        norm = v.norm(dim=1)
        fresh = norm > eps * a.norm(dim=1).clamp_min(eps)  # False: a lies in the span already
        R[:, :t, t] = proj
        R[:, t, t] = torch.where(fresh, norm, torch.ones_like(norm))
        Q[:, :, t] = torch.where(fresh[:, None], v / norm.clamp_min(eps)[:, None], torch.zeros_like(v))
        q = Q[:, :, t]
        resid = resid - (resid * q).sum(1, keepdim=True) * q
    qx = Q.transpose(1, 2) @ X[:, :, None]  # (B, k, 1)
    coef = torch.linalg.solve_triangular(R, qx, upper=True).squeeze(2)
    return idx, coef


def donor_omp(donor_rows, anchors: Sequence[tuple[int, int]], targets: Sequence[int], *, k: int = DEFAULT_K,
              batch: int = DEFAULT_BATCH, track: Callable[[Iterable[int], int], Iterable[int]] = lambda it, _: it,
              done: Mapping[int, Mapping[str, Any]] | None = None,
              keep: Callable[[int, dict[str, Any]], None] | None = None,
              ) -> dict[int, tuple[list[int], list[float]]]:
    """For each target id ``t``: ``([source ids], [coefficients])`` fitted on ``donor_rows[t]``.

    ``donor_rows`` (Nt, d_donor) is the donor's embedding (or head) matrix, indexed by target id;
    ``anchors`` pairs ``(target id, source id)`` of the shared tokens. The coefficients multiply
    the anchors' *source* rows, so the result drops into a :class:`~paw.io.vocab_map.VocabMapping`
    entry and :func:`paw.vocab.embed.apply_mapping` builds the rows. ``track(starts, kept)`` wraps the
    batch starts still to fit, ``kept`` the number of batches a resumed run took as they were (a
    progress bar: :func:`paw.progress.track` with ``start=kept``, so the count starts there and the rate
    and time left are this run's). ``done`` maps a batch's first position to the ``idx`` and ``coef``
    already fitted for it (a resumed run); ``keep(start, {"idx", "coef"})`` is called with each batch
    fitted here, as soon as it is done.
    """
    import torch

    if not anchors:
        raise PawError("no token is shared between the two vocabularies: OMP has no anchor")
    dev = donor_rows.device
    anchor_t = torch.tensor([a for a, _ in anchors], device=dev)
    source_ids = [s for _, s in anchors]
    A = donor_rows[anchor_t].float()  # (Na, d_donor)
    k = min(k, len(anchors))
    starts = range(0, len(targets), batch)
    fits = {s: done[s] for s in starts  # a resumed run's batches, where fitted under this k
            if done and s in done and done[s]["idx"].shape == (len(targets[s:s + batch]), k)}
    for start in track([s for s in starts if s not in fits], len(fits)):
        X = donor_rows[torch.tensor(list(targets[start:start + batch]), device=dev)].float()  # (B, d_donor)
        idx, coef = batch_omp(X, A, k=k)
        if keep is not None:
            keep(start, {"idx": idx, "coef": coef})
        fits[start] = {"idx": idx, "coef": coef}
    out = {}
    for start in starts:  # in target order, kept batches and fitted ones alike
        chunk = targets[start:start + batch]
        for t, row_i, row_c in zip(chunk, fits[start]["idx"].tolist(), fits[start]["coef"].tolist(), strict=True):
            out[t] = ([source_ids[j] for j in row_i], row_c)
    return out
