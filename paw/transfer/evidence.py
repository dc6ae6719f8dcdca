"""The evidence recorded for every transferred module: relatedness against a null, kept share, norm ratio.

:func:`measure` compares the source module with its partner *and* with the other layers of the
target (the null of :mod:`paw.transfer.relatedness`), in the frame of the method that mapped it, and
says how much of the adapter's update the method kept. All bases are fingerprints memoised in the
:class:`~paw.transfer.context.Context`, so the null costs a few small products per module.
"""

from __future__ import annotations

from paw.transfer import linalg, relatedness
from paw.transfer.context import Context, Fingerprint
from paw.transfer.layers import split_layer
from paw.transfer.methods import Job, Mapped


def _r(x):
    return None if x is None else round(float(x), 6)


def _print(ctx: Context, side: str, job: Job, module: str, name: str, W=None) -> Fingerprint:
    return ctx.fingerprint(side, name, module=module, transpose=job.embedding, W=W)


def null_prints(ctx: Context, job: Job) -> list[Fingerprint]:
    """Fingerprints of the same module type in other target layers (nearest first; none outside layers)."""
    parts = split_layer(job.target_module)
    if parts is None:
        return []
    prefix, partner, rest = parts
    out = []
    for k in relatedness.null_layers(partner, ctx.n_layers[1]):
        module = f"{prefix}.{k}.{rest}"
        if f"{module}.weight" in ctx.target:
            out.append(_print(ctx, "t", job, module, f"{module}.weight"))
    return out


def _restrict(X, rows: list[int] | None):
    """The span of ``X`` seen on ``rows`` only (orthonormal again); ``X`` itself when ``rows`` is None."""
    if rows is None:
        return X
    import torch

    return torch.linalg.qr(X[torch.tensor(rows, dtype=torch.long, device=X.device)]).Q


def _side(carried, X_t, nulls: list, rows: list[int] | None = None) -> dict:
    """Similarity to the partner's basis, its null level (median over the other layers) and the lift.

    ``rows``: compare on these target coordinates only (units of a grown target that have a source
    partner), the partner and the null alike, so that units the source never had do not count.
    """
    nulls = [_restrict(X, rows) for X in nulls if X.shape[0] == X_t.shape[0]]
    carried, X_t = _restrict(carried, rows), _restrict(X_t, rows)
    rank = min(carried.shape[1], X_t.shape[1])
    chance = linalg.chance_similarity(rank, X_t.shape[0])
    sim = linalg.subspace_similarity(carried[:, :rank], X_t[:, :rank])
    values = [linalg.subspace_similarity(carried[:, :rank], X[:, :rank]) for X in nulls
              if X.shape[0] == X_t.shape[0] and X.shape[1] >= rank]
    level = relatedness.null_level(values, floor=chance)
    null = chance if level is None else level
    return {"similarity": sim, "chance": chance, "null": null, "null_from": "chance" if level is None else
            f"{len(values)} other layers", "lift": relatedness.lift(sim, null)}


def measure(ctx: Context, job: Job, mapped: Mapped) -> dict:
    """Similarity and residual with their nulls and lifts, the verdict's inputs, kept share and norm ratio.

    ``similarity`` is the weaker side (output or input basis, whichever lifts less above its null):
    a module whose output space agrees but whose input space was rotated away is not related.
    """
    fp_s = _print(ctx, "s", job, job.module, job.weight_s, W=job.W_s)
    fp_t = _print(ctx, "t", job, job.target_module, job.weight_t, W=job.W_t)
    nulls = null_prints(ctx, job)
    sides = {}
    for side, carry, X_s, X_t, pick, rows in (
            ("out", mapped.carry_out, fp_s.U, fp_t.U, lambda f: f.U, mapped.paired_out),
            ("in", mapped.carry_in, fp_s.V, fp_t.V, lambda f: f.V, mapped.paired_in)):
        if carry is not None and rows != []:  # no paired unit on a side: nothing to compare there
            sides[side] = _side(carry(X_s), X_t, [pick(f) for f in nulls], rows)
    weaker = min(sides, key=lambda k: sides[k]["lift"]) if sides else None
    res = _residual_evidence(fp_s, fp_t, nulls) if mapped.frame == "same" else {}
    norm_s = linalg.lora_norm(job.A, job.B)
    ratio = linalg.lora_norm(mapped.A, mapped.B) / norm_s if norm_s > 0 else 1.0
    return {
        "similarity": _r(sides[weaker]["similarity"]) if weaker else None,
        "similarity_chance": _r(sides[weaker]["chance"]) if weaker else None,
        "similarity_null": _r(sides[weaker]["null"]) if weaker else None,
        "similarity_null_from": sides[weaker]["null_from"] if weaker else None,
        "similarity_lift": sides[weaker]["lift"] if weaker else None,
        "similarity_out": _r(sides.get("out", {}).get("similarity")),
        "similarity_in": _r(sides.get("in", {}).get("similarity")),
        "subspace_rank": int(fp_t.U.shape[1]),
        "remix_residual": _r(mapped.residual),
        "residual_sketch": res.get("residual"), "residual_null": res.get("null"),
        "residual_lift": res.get("lift"),
        "norm_ratio": _r(ratio), "kept": _r(_kept(job, mapped, norm_s)),
    }


def _residual_evidence(fp_s: Fingerprint, fp_t: Fingerprint, nulls: list[Fingerprint]) -> dict:
    """Residual ``min_c ‖W_t − c·W_s‖/‖W_t‖`` through shared probes, for the partner and the null layers."""
    if fp_s.probe.shape != fp_t.probe.shape:
        return {}
    res = linalg.scaled_residual(fp_t.probe, fp_s.probe)
    values = [linalg.scaled_residual(f.probe, fp_s.probe) for f in nulls if f.probe.shape == fp_s.probe.shape]
    level = relatedness.null_level(values)
    if level is None:
        return {"residual": _r(res)}
    return {"residual": _r(res), "null": _r(level), "lift": relatedness.residual_lift(res, level)}


def _kept(job: Job, mapped: Mapped, norm_s: float) -> float | None:
    """Share of ΔW_s the transfer keeps, measured through the method's own map (None without one).

    ``'same'`` frame: ``⟨ΔW_t, ΔW_s⟩ / ‖ΔW_s‖²`` (1 for copy; for a projection, the share of ΔW's energy
    inside the kept subspaces). ``'selection'``: ``‖ΔW_t‖² / ‖ΔW_s‖²`` (the selected units' share).
    """
    if norm_s == 0 or mapped.frame is None:
        return None
    if mapped.frame == "same":
        return linalg.lora_inner(mapped.A, mapped.B, job.A, job.B) / norm_s ** 2
    return (linalg.lora_norm(mapped.A, mapped.B) / norm_s) ** 2
