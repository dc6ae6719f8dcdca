"""Linear algebra of LoRA transfer as pure tensor functions: truncated SVDs, subspace overlap, ridge maps.

Everything here takes and returns ``torch`` tensors on whatever device they live on, in float32.
Shapes follow PyTorch's ``nn.Linear``: a weight ``W`` is (out, in); its singular vectors are
``U`` (out, R) and ``V`` (in, R), so ``W ≈ U diag(S) Vᵀ``.
"""

from __future__ import annotations

import math

from paw.device import single_threaded_cpu

DEFAULT_SUBSPACE_RANK = 32
OVERSAMPLE = 8
POWER_ITERS = 1
EXACT_SVD_DIM = 256  # min(out, in) up to this: the exact SVD (a 256 x 704 SVD takes milliseconds)


def default_rank(out_dim: int, in_dim: int, requested: int | None = None) -> int:
    """Subspace rank R used for a (out, in) weight: ``requested`` or ``min(32, min(out, in) // 4)``, at least 1.

    A quarter of the smaller side keeps the chance level R/d well below 1, so overlap means something
    even for the 32-wide zoo models; 32 keeps the randomized SVD of a 1.5B model within seconds.
    """
    cap = min(out_dim, in_dim)
    rank = requested if requested is not None else min(DEFAULT_SUBSPACE_RANK, cap // 4)
    return max(1, min(int(rank), cap))


def canonical_signs(U, V):
    """Flip each singular pair so that the entry of largest magnitude of every column of ``U`` is positive.

    SVD determines a pair ``(u_i, v_i)`` only up to a common sign; Cross-LoRA style vector pairing
    ``P = U_t U_sᵀ`` needs a fixed choice on both sides, and so does byte-identical output.
    """
    import torch

    idx = U.abs().argmax(dim=0)
    signs = torch.sign(U[idx, torch.arange(U.shape[1], device=U.device)])
    signs[signs == 0] = 1
    return U * signs, V * signs


def top_singular(W, rank: int, *, seed: int = 0, power_iters: int = POWER_ITERS, oversample: int = OVERSAMPLE):
    """Top-``rank`` singular triplets of ``W`` (out, in) by a randomized range finder.

    Halko, Martinsson & Tropp (2011), Algorithm 4.4: sketch ``Y = W Ω`` with a Gaussian Ω of
    ``rank + oversample`` columns (seeded, so runs repeat exactly), ``power_iters`` rounds of
    re-orthonormalised power iteration ``Y = W (Wᵀ Q)``, then the exact SVD of the small ``Qᵀ W``.
    Cost ``O(out · in · (rank + oversample) · (2 + 2 · power_iters))`` against ``O(out · in · min²)``
    for a full SVD. Returns ``U`` (out, R), ``S`` (R,), ``V`` (in, R) with canonical signs. Matrices
    whose smaller side is at most :data:`EXACT_SVD_DIM` get the exact SVD instead.

    Two models compared with each other need *independent* sketches (different seeds): with a shared
    Ω, two independent Gaussian 4864x896 matrices came out at input-side similarity 0.31 against a
    chance level of 0.036, because on a flat spectrum both ranges lean toward ``span(Ω)``.

    >>> U, S, V = top_singular(torch.diag(torch.tensor([3., 2., 1.])), 2)  # doctest: +SKIP
    >>> S  # tensor([3., 2.])  # doctest: +SKIP
    """
    import torch

    W = W.float()
    out_dim, in_dim = W.shape
    k = min(rank + oversample, out_dim, in_dim)
    if k >= min(out_dim, in_dim) * 0.8 or min(out_dim, in_dim) <= EXACT_SVD_DIM:  # cheap: exact
        return full_singular(W, rank)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    omega = torch.randn(in_dim, k, generator=gen).to(W.device)
    Q = _qr(W @ omega)
    for _ in range(power_iters):
        Q = _qr(W @ _qr(W.T @ Q))
    B = Q.T @ W  # (k, in): W ≈ Q B
    with single_threaded_cpu([B.device]):  # SVD of the small B through its (k, k) Gram: one tiny eigh
        evals, Ub = torch.linalg.eigh(B @ B.T)
    order = torch.argsort(evals, descending=True)[:rank]
    S = evals[order].clamp_min(0).sqrt()
    V = (B.T @ Ub[:, order]) / S.clamp_min(1e-30)
    U, V = canonical_signs(Q @ Ub[:, order], V)
    return U, S, V


def _qr(Y):
    import torch

    with single_threaded_cpu([Y.device]):
        return torch.linalg.qr(Y).Q


def full_singular(W, rank: int):
    """The reference: a full ``torch.linalg.svd`` truncated to ``rank`` (canonical signs)."""
    import torch

    W = W.float()
    with single_threaded_cpu([W.device]):  # threaded LAPACK SVDs ran 10x slower on the shared 2-core machine
        U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    U, V = canonical_signs(U[:, :rank], Vh[:rank].T)
    return U, S[:rank], V


def subspace_similarity(U_s, U_t) -> float:
    """``‖U_sᵀ U_t‖²_F / R`` for orthonormal bases (d, R): 1 when the spans agree, 0 when orthogonal.

    Two random R-dimensional subspaces of R^d give R/d on average (:func:`chance_similarity`); a
    similarity means something only next to that level.
    """
    rank = min(U_s.shape[1], U_t.shape[1])
    return float((U_s.T @ U_t).pow(2).sum()) / rank


def chance_similarity(rank: int, dim: int) -> float:
    """Expected :func:`subspace_similarity` of two independent uniformly random R-dim subspaces of R^d: R/d."""
    return min(1.0, rank / dim)


def scaled_residual(W_t, W_hat) -> float:
    """``min_c ‖W_t − c·Ŵ‖_F / ‖W_t‖_F``: how much of the target is *not* the carried source weight.

    0 for a target that is the source (up to scale) in the same coordinates, about 0.17 after 17%
    drift, 1 for independent weights (then the best c is 0).

    The residual is summed directly, ``Σ (t − c·h)²`` in float64, never as ``‖t‖² − 2c⟨t, h⟩ + c²‖h‖²``:
    that expansion cancels catastrophically when the residual is small (float32 dots left 3.6e-4 of
    a true 7.7e-8, and the figure depended on how the CPU's BLAS rounded). Chunked, so a large
    weight never gets a full float64 copy.

    >>> W = torch.randn(20, 10)  # doctest: +SKIP
    >>> scaled_residual(W, 3 * W)  # 0.0 up to float64 rounding (< 1e-12)  # doctest: +SKIP
    """
    t, h = W_t.reshape(-1), W_hat.reshape(-1)
    nt, nh, dot = _sums64(t, h, lambda a, b: (a @ a, b @ b, a @ b), 3)
    if nt == 0.0:
        return 0.0 if nh == 0.0 else 1.0
    if nh == 0.0:
        return 1.0
    c = max(dot / nh, 0.0)
    (r2,) = _sums64(t, h, lambda a, b: ((a - c * b).square().sum(),), 1)
    return math.sqrt(r2 / nt)


RESIDUAL_CHUNK = 1 << 22  # elements per float64 block in _sums64: 32 MB per operand


def _sums64(t, h, terms, count: int) -> list[float]:
    """Add up ``terms(t_block, h_block)`` (``count`` scalars) over float64 blocks of two flat tensors."""
    totals = [0.0] * count
    for start in range(0, t.numel(), RESIDUAL_CHUNK):
        a, b = t[start:start + RESIDUAL_CHUNK].double(), h[start:start + RESIDUAL_CHUNK].double()
        totals = [x + float(y) for x, y in zip(totals, terms(a, b), strict=True)]
    return totals


def lora_norm(A, B) -> float:
    """``‖B A‖_F`` from the factors alone: ``sqrt(tr((BᵀB)(AAᵀ)))``, an (r, r) product instead of (out, in).

    float64, as :func:`lora_inner`: the trace sums terms of both signs, and a product ``B A`` much
    smaller than its factors would otherwise drown in their rounding.
    """
    A, B = A.double(), B.double()
    return math.sqrt(max(float(((B.T @ B) * (A @ A.T)).sum()), 0.0))


def lora_inner(A1, B1, A2, B2) -> float:
    """``⟨B1 A1, B2 A2⟩_F`` from the factors: ``tr((B1ᵀB2)(A2A1ᵀ))``, (r, r) products only, in float64."""
    A1, B1, A2, B2 = A1.double(), B1.double(), A2.double(), B2.double()
    return float(((B1.T @ B2) * (A1 @ A2.T)).sum())


def ridge_lambda(X, ridge: float) -> float:
    """Ridge strength relative to the data: ``ridge · ‖X‖²_F / min(X.shape)`` (the mean non-zero eigenvalue)."""
    return ridge * float(X.float().pow(2).sum()) / max(1, min(X.shape))


def ridge_map(X, Y, ridge: float):
    """Map M (d_y, d_x) with rows ``y ≈ M x``: ``argmin ‖X Mᵀ − Y‖² + λ‖M − J‖²``, X (n, d_x), Y (n, d_y).

    J is the (rectangular) identity: directions the data do not determine stay where they are
    instead of collapsing to zero, so equal inputs give M = I exactly, and λ (see
    :func:`ridge_lambda`) keeps an ill-conditioned fit from blowing up (an unregularised
    pseudo-inverse blew one adapter up to 13x its norm). Closed form
    ``Mᵀ = J ᵀ + (XᵀX + λI)⁻¹ Xᵀ (Y − X Jᵀ)``.
    """
    import torch

    X, Y = X.float(), Y.float()
    lam = ridge_lambda(X, ridge)
    J = eye_like(Y.shape[1], X.shape[1], X.device)
    gram = X.T @ X + lam * torch.eye(X.shape[1], device=X.device)
    Mt = J.T + _solve(gram, X.T @ (Y - X @ J.T))
    return Mt.T


def _solve(M, R):
    """``M⁻¹ R`` for the small (d, d) systems of the ridge fits, on one CPU thread (see :func:`full_singular`)."""
    import torch

    with single_threaded_cpu([M.device]):
        return torch.linalg.solve(M, R)


def eye_like(rows: int, cols: int, device=None):
    """Rectangular identity (rows, cols): the 'keep the first channels' map between spaces of different size."""
    import torch

    return torch.eye(rows, cols, device=device)


def pad_rows(X, rows: int):
    """``J @ X`` for the rectangular identity J (rows, len(X)): keep the first rows, zero-pad the rest."""
    import torch

    if X.shape[0] >= rows:
        return X[:rows]
    return torch.cat([X, X.new_zeros(rows - X.shape[0], *X.shape[1:])])


def left_map_apply(B, W_src, W_tgt, ridge: float, *, in_map=None, gram=None):
    """``O B`` where O (out_t, out_s) minimises ``‖O W_src − W_tgt M‖² + λ‖O − J‖²``.

    W_src (out_s, k), W_tgt (out_t, k_t), M = ``in_map`` (k_t, k) or I. O tells how the target module's
    outputs are re-mixed from the source module's when both read the same (mapped) input. Push-through
    form ``O = J + (W_tgt M − J W_src) (W_srcᵀ W_src + λI)⁻¹ W_srcᵀ``: one (k, k) solve with r right-hand
    sides, and every big product has only r columns. ``gram``: ``W_srcᵀ W_src`` if already computed.
    B (out_s, r) -> (out_t, r).
    """
    import torch

    W_src, W_tgt, B = W_src.float(), W_tgt.float(), B.float()
    gram = W_src.T @ W_src if gram is None else gram
    lam = ridge * float(torch.trace(gram)) / max(1, min(W_src.shape))
    Z = _solve(gram + lam * torch.eye(gram.shape[0], device=B.device), W_src.T @ B)  # (k, r)
    tgt = W_tgt @ (Z if in_map is None else in_map @ Z)
    return pad_rows(B, W_tgt.shape[0]) + tgt - pad_rows(W_src @ Z, W_tgt.shape[0])


def right_map_apply(A, W_src, W_tgt, ridge: float, *, out_map=None, gram=None):
    """``A N`` where N (in_s, in_t) minimises ``‖M W_src N − W_tgt‖² + λ‖N − J‖²``.

    W_src (m, in_s), M = ``out_map`` (k, m) or I, W_tgt (k, in_t). N tells which source input reproduces
    a target input when both modules write the same (mapped) output. Push-through form
    ``N = J + Ŵᵀ (Ŵ Ŵᵀ + λI)⁻¹ (W_tgt − Ŵ J)`` with Ŵ = M W_src, evaluated from the left so that only
    r-row products touch the big matrices. ``gram``: ``W_src W_srcᵀ`` if already computed.
    A (r, in_s) -> (r, in_t).
    """
    import torch

    W_src, W_tgt, A = W_src.float(), W_tgt.float(), A.float()
    gram = W_src @ W_src.T if gram is None else gram
    AW = A @ W_src.T  # (r, m)
    if out_map is not None:
        gram, AW = out_map @ gram @ out_map.T, AW @ out_map.T
    lam = ridge * float(torch.trace(gram)) / max(1, min(gram.shape[0], W_src.shape[1]))
    z = _solve(gram + lam * torch.eye(gram.shape[0], device=A.device), AW.T).T  # (r, k)
    zW = z @ out_map if out_map is not None else z
    in_t = W_tgt.shape[1]
    return pad_rows(A.T, in_t).T + z @ W_tgt - pad_rows((zW @ W_src).T, in_t).T


def gram_residual_sketch(apply_t, apply_hat, n: int, trace_t: float, trace_hat: float, *, k: int = 64,
                         seed: int = 0, device=None) -> float:
    """:func:`centered_gram_residual` estimated through ``k`` shared Gaussian probes.

    ``apply_t(Ω)`` and ``apply_hat(Ω)`` return ``G Ω`` for the two (n, n) Gram matrices, whose traces
    are given, so a Gram is never formed: compares ``(G_t − tr(G_t)/n·I) Ω`` with ``(Ĝ − tr(Ĝ)/n·I) Ω``.
    Exact (0) when the Grams agree; about 1 for independent weights.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    omega = torch.randn(n, min(k, n), generator=gen).to(device)
    Y_t = apply_t(omega) - (trace_t / n) * omega
    Y_h = apply_hat(omega) - (trace_hat / n) * omega
    return scaled_residual(Y_t, Y_h)


def centered_gram_residual(G_t, G_hat) -> float:
    """:func:`scaled_residual` between Gram matrices with their mean diagonal removed.

    Random matrices of any origin have Grams close to a multiple of I; only what is left after
    removing it says whether two weights read their inputs the same way.
    """
    import torch

    def center(G):
        return G - torch.eye(G.shape[0], device=G.device) * (torch.trace(G) / G.shape[0])

    return scaled_residual(center(G_t.float()), center(G_hat.float()))
