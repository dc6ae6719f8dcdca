"""Transfer methods: each maps the factors (A (r, in), B (out, r)) of one module, so rank stays r.

A method is a plain function ``f(ctx, job) -> Mapped`` registered by name in :data:`METHODS`.
``Mapped`` carries the new factors plus what the report needs: how the method carries source
coordinates into target coordinates (to measure subspace overlap in a common frame) and the
source weight carried the same way (for the re-mix residual). A method raises
:class:`Unavailable` when it does not apply to a module (``auto`` then tries the next one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paw import arch
from paw.registry import Registry
from paw.transfer import linalg
from paw.transfer import structural as st
from paw.transfer.layers import Role


class Unavailable(Exception):
    """This method cannot map this module (different shapes, no role, ...); the message says why."""


@dataclass
class Job:
    """One adapted module. Weights are float32 on the context's device, in the linear layout.

    For an embedding LoRA the weight is the transposed table, (hidden, vocab), so that ``B`` (hidden, r)
    is the output side and ``A`` (r, vocab) the input side like every other module.
    """

    module: str
    target_module: str
    A: Any
    B: Any
    W_s: Any
    W_t: Any
    role: Role | None
    weight_s: str  # base tensor names (for the SVD cache)
    weight_t: str
    layers: tuple[int | None, int | None] = (None, None)
    embedding: bool = False  # an embedding LoRA: W_s/W_t are the transposed tables


@dataclass
class Mapped:
    """New factors and how to judge them.

    ``carry_out``/``carry_in`` map source bases (d_s, R) into target coordinates, or are None where
    there is no common frame. ``residual`` is None where it would mean nothing (across shapes without
    a unit correspondence). ``frame`` says how the kept share of ΔW can be measured: ``'same'`` (the
    target update lives in the source's coordinates: ``⟨ΔW_t, ΔW_s⟩/‖ΔW_s‖²``), ``'selection'`` (the
    target update is the source update with units selected: ``‖ΔW_t‖²/‖ΔW_s‖²``) or None.
    """

    A: Any
    B: Any
    residual: float | None
    carry_out: Callable | None = None
    carry_in: Callable | None = None
    frame: str | None = None
    paired_out: list[int] | None = None  # target coordinates that have a source partner (None: all)
    paired_in: list[int] | None = None


MethodFn = Callable[[Any, Job], Mapped]
METHODS: Registry[MethodFn] = Registry("transfer method")


def register(name: str):
    return METHODS.register(name)


def _identity(x):
    return x


def _same_shape(job: Job, method: str) -> None:
    if tuple(job.W_s.shape) != tuple(job.W_t.shape):
        raise Unavailable(f"{method} needs equal shapes; {job.module} is {list(job.W_s.shape)} in the source and "
                          f"{list(job.W_t.shape)} in the target (use --method auto, structural or embed-map)")


def _plain_vocab(ctx, job: Job, method: str) -> None:
    if job.role is not None and job.role.other == "vocab" and not ctx.vocab.identity:
        raise Unavailable(f"{method} cannot map the vocabulary side of {job.module}; use copy or embed-map")


@register("copy")
def copy(ctx, job: Job) -> Mapped:
    """The factors unchanged (same shapes only): the baseline every report shows.

    The vocabulary side of embedding and ``lm_head`` LoRA still goes through the vocabulary map.
    """
    _same_shape(job, "copy")
    if job.role is None or job.role.other != "vocab" or ctx.vocab.identity:
        return Mapped(job.A, job.B, linalg.scaled_residual(job.W_t, job.W_s), _identity, _identity, frame="same")
    if job.role.side == "in":  # lm_head: vocabulary rows are the output
        W_hat = ctx.vocab.rows(job.W_s)
        return Mapped(job.A, ctx.vocab.rows(job.B.float()), linalg.scaled_residual(job.W_t, W_hat),
                      lambda U: _orth(ctx.vocab.rows(U)), _identity)
    W_hat = ctx.vocab.cols(job.W_s)
    return Mapped(ctx.vocab.cols(job.A.float()), job.B, linalg.scaled_residual(job.W_t, W_hat),
                  _identity, lambda V: _orth(ctx.vocab.rows(V)))


@register("lora-x")
def lora_x(ctx, job: Job) -> Mapped:
    """LoRA-X (Farhadzadeh et al., ICLR 2025) applied to an ordinary LoRA.

    A LoRA-X adapter is trained *inside* the source weight's top-R singular subspaces, and its transfer
    projects it onto the target weight's: ``ΔW_t = U_t U_tᵀ ΔW_s V_t V_tᵀ``. An ordinary LoRA first
    loses what LoRA-X could not have learned, so ``ΔW_t = U_t U_tᵀ (U_s U_sᵀ ΔW_s V_s V_sᵀ) V_t V_tᵀ``,
    in factors ``B_t = U_t (U_tᵀU_s)(U_sᵀB_s)`` and ``A_t = (A_s V_s)(V_sᵀV_t) V_tᵀ`` (rank stays r).
    The paper fixes no single R for language-model weights; R is ``--subspace-rank`` or PAW's default
    ``min(32, min(out, in)/4)``. What it keeps is reported (``kept``): often little, even source->source.
    """
    _same_shape(job, "lora-x")
    _plain_vocab(ctx, job, "lora-x")
    U_s, _, V_s = ctx.svd("s", job.weight_s, job.W_s)
    U_t, _, V_t = ctx.svd("t", job.weight_t, job.W_t)
    B = U_t @ ((U_t.T @ U_s) @ (U_s.T @ job.B.float()))
    A = ((job.A.float() @ V_s) @ (V_s.T @ V_t)) @ V_t.T
    return Mapped(A, B, linalg.scaled_residual(job.W_t, job.W_s), _identity, _identity, frame="same")


CROSS_LORA_RANK = 320  # Cross-LoRA's stated truncation rank (>= 99% of the Frobenius energy in its models)


@register("cross-lora")
def cross_lora(ctx, job: Job) -> Mapped:
    """Cross-LoRA (Xia et al., 2025): LoRA-Align maps the bases, LoRA-Shift projects the update.

    LoRA-Align takes rank-R truncated SVDs of both weights (R = 320 in the paper, capped at the
    weight's size; ``--subspace-rank`` overrides) and the Frobenius-optimal maps
    ``P_U = argmin ‖P U_s − U_t‖_F`` and ``P_V = argmin ‖P V_s − V_t‖_F``, whose minimum-norm solutions
    are ``U_t U_sᵀ`` and ``V_t V_sᵀ``; the aligned bases are ``Ũ_s = P_U U_s = U_t`` and ``Ṽ_s = V_t``.
    LoRA-Shift (Eq. 7) is then ``ΔW_t = Ũ_s Ũ_sᵀ ΔW_s Ṽ_s Ṽ_sᵀ = U_t U_tᵀ ΔW_s V_t V_tᵀ``: with equal
    shapes, the projection onto the target's top-R subspaces. Eq. 7 needs equal shapes; across shapes
    PAW applies the LoRA-Align maps themselves, ``ΔW_t = P_U ΔW_s P_Vᵀ`` (singular vectors paired one
    by one, which has no common frame: similarity, residual and kept share are reported as null).
    """
    _plain_vocab(ctx, job, "cross-lora")

    def rank_of(W):
        return min(ctx.subspace_rank or CROSS_LORA_RANK, *W.shape)

    U_t, _, V_t = ctx.svd("t", job.weight_t, job.W_t, rank=rank_of(job.W_t))
    if tuple(job.W_s.shape) == tuple(job.W_t.shape):
        B = U_t @ (U_t.T @ job.B.float())
        A = (job.A.float() @ V_t) @ V_t.T
        return Mapped(A, B, linalg.scaled_residual(job.W_t, job.W_s), _identity, _identity, frame="same")
    U_s, _, V_s = ctx.svd("s", job.weight_s, job.W_s, rank=rank_of(job.W_s))
    rank = min(U_s.shape[1], U_t.shape[1], V_s.shape[1], V_t.shape[1])
    B = U_t[:, :rank] @ (U_s[:, :rank].T @ job.B.float())
    A = (job.A.float() @ V_s[:, :rank]) @ V_t[:, :rank].T
    return Mapped(A, B, None)


def _role(job: Job, method: str) -> Any:
    if job.role is None:
        known = ", ".join(arch.GENERIC.linear_names)
        raise Unavailable(f"{method} does not know how {job.module} touches the residual stream "
                          f"(supported: {known}, the output head and the input embedding)")
    return job.role


def _safe_inverse(g):
    """``g / (g² + ε)``: 1/g where the gain is not tiny, damped where it is (folded gains are 1)."""
    eps = 1e-6 * float(g.pow(2).mean().clamp_min(1e-30))
    return g / (g * g + eps)


def _orth(X):
    import torch

    return torch.linalg.qr(X).Q


@register("embed-map")
def embed_map(ctx, job: Job) -> Mapped:
    """LoRASuite-style (2025) residual-stream map from the embeddings of shared tokens, plus base-weight fits.

    With M_st (d_t, d_s) the ridge map of source residual vectors to target ones and M_ts the reverse,
    fitted on embedding rows (and final-norm-folded unembeddings), and g_s, g_t the RMSNorm gains a
    module reads through:

    - readers (q/k/v/gate/up, lm_head): ``A_t = A_s · diag(g_s) M_ts diag(1/g_t)`` (A needs the
      target -> source map); the output side (head dim, MLP width) by ``B_t = O B_s`` with O the ridge
      fit of ``O W_s ≈ W_t · diag(g_t) M_st diag(1/g_s)``, the target module on mapped inputs;
    - writers (o/down, embed_tokens): ``B_t = M_st B_s`` (B needs source -> target), the input side by
      ``A_t = A_s N`` with N the ridge fit of ``M_st W_s N ≈ W_t``.

    Ridge fits pull toward the identity (see :func:`paw.transfer.linalg.ridge_map`), so a target that
    is the source exactly gets the adapter back exactly. Grouped-query attention needs nothing special:
    each module's output map is fitted on its own weights, so the KV widths may differ.
    """
    role = _role(job, "embed-map")
    M_st, M_ts = ctx.residual_maps()
    W_s, W_t = job.W_s, job.W_t
    trace_t = float(W_t.reshape(-1) @ W_t.reshape(-1))
    if role.side == "in":
        g_s = ctx.gain("s", ctx.input_norm("s", job.module), W_s.shape[1])
        g_t = ctx.gain("t", ctx.input_norm("t", job.target_module), W_t.shape[1])
        into_s = g_s[:, None] * M_ts * _safe_inverse(g_t)[None, :]    # (in_s, in_t): target input -> source input
        into_t = g_t[:, None] * M_st * _safe_inverse(g_s)[None, :]    # (in_t, in_s)
        gram = W_s.T @ W_s  # (in_s, in_s), shared by the output map and the residual
        A = job.A.float() @ into_s
        if role.other == "vocab":
            B, carry_out = ctx.vocab.rows(job.B.float()), (lambda U: _orth(ctx.vocab.rows(U)))
        else:
            B, carry_out = linalg.left_map_apply(job.B, W_s, W_t, ctx.ridge, in_map=into_t, gram=gram), None
        residual = linalg.gram_residual_sketch(  # Gram of W_t vs Gram of W_s · into_s, over the target inputs
            lambda X: W_t.T @ (W_t @ X), lambda X: into_s.T @ (gram @ (into_s @ X)), W_t.shape[1], trace_t,
            float((gram * (into_s @ into_s.T)).sum()), seed=ctx.seed, device=W_t.device)
        return Mapped(A, B, residual, carry_out, lambda V: _orth(M_ts.T @ V))  # gain-folded bases
    gram = W_s @ W_s.T  # (d_s, d_s)
    B = M_st @ job.B.float()
    if role.other == "vocab":
        A, carry_in = ctx.vocab.cols(job.A.float()), (lambda V: _orth(ctx.vocab.rows(V)))
    else:
        A, carry_in = linalg.right_map_apply(job.A, W_s, W_t, ctx.ridge, out_map=M_st, gram=gram), None
    residual = linalg.gram_residual_sketch(  # Gram of W_t vs Gram of M_st · W_s, over the target residual
        lambda X: W_t @ (W_t.T @ X), lambda X: M_st @ (gram @ (M_st.T @ X)), W_t.shape[0], trace_t,
        float((gram * (M_st.T @ M_st)).sum()), seed=ctx.seed, device=W_t.device)
    return Mapped(A, B, residual, lambda U: _orth(M_st @ U), carry_in)


@register("structural")
def structural_map(ctx, job: Job) -> Mapped:
    """Slice or scatter the factors along recovered unit correspondences (pruned or grown targets).

    Hidden channels come from embedding columns, heads and neurons from the weights of the matched
    layer pair (:mod:`paw.transfer.structural`). For a target pruned from the source, before healing,
    the result is exactly the source update restricted to the kept units; units a grown target adds
    get zero rows or columns. Factors are sliced, never rescaled.
    """
    role = _role(job, "structural")
    hidden = ctx.hidden_map().index
    if role.other == "vocab":
        other = None
    else:
        if job.layers[0] is None:
            raise Unavailable(f"structural cannot place {job.module} (not inside a decoder layer)")
        maps = ctx.unit_maps(*job.layers)
        if role.other not in maps:
            raise Unavailable(f"structural found no {role.other} units for {job.module}")
        block = 1 if role.other == "neuron" else _head_dim(ctx)
        other = st.expand(maps[role.other], block)
    out_idx, in_idx = (other, hidden) if role.side == "in" else (hidden, other)

    def take(X, idx, dim):
        if idx is not None:
            return st.gather(X, idx, dim)
        return ctx.vocab.rows(X) if dim == 0 else ctx.vocab.cols(X)

    A, B = take(job.A.float(), in_idx, 1), take(job.B.float(), out_idx, 0)
    W_hat = take(take(job.W_s, out_idx, 0), in_idx, 1)
    selection = role.other != "vocab" or ctx.vocab.identity
    return Mapped(A, B, _paired_residual(job.W_t, W_hat, out_idx, in_idx),
                  lambda U: _orth(take(U, out_idx, 0)), lambda V: _orth(take(V, in_idx, 0)),
                  frame="selection" if selection else None, paired_out=_paired(out_idx), paired_in=_paired(in_idx))


def _paired(index: list[int] | None) -> list[int] | None:
    """Target units with a source partner; None when every unit has one (nothing to restrict)."""
    if index is None or all(i >= 0 for i in index):
        return None
    return [j for j, i in enumerate(index) if i >= 0]


def _paired_residual(W_t, W_hat, out_idx, in_idx) -> float:
    """Re-mix residual over the paired block only: units a grown target adds are not evidence against it."""
    import torch

    rows = [j for j, i in enumerate(out_idx) if i >= 0] if out_idx is not None else None
    cols = [j for j, i in enumerate(in_idx) if i >= 0] if in_idx is not None else None
    if rows == [] or cols == []:
        return 1.0
    if rows is not None:
        idx = torch.tensor(rows, device=W_t.device)
        W_t, W_hat = W_t.index_select(0, idx), W_hat.index_select(0, idx)
    if cols is not None:
        idx = torch.tensor(cols, device=W_t.device)
        W_t, W_hat = W_t.index_select(1, idx), W_hat.index_select(1, idx)
    return linalg.scaled_residual(W_t, W_hat)


def _head_dim(ctx) -> int:
    return arch.head_dim(ctx.target.config) or 1
