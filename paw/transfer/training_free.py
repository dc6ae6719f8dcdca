"""``transfer_lora``: the training-free transfer of one adapter in memory, module by module, with its report.

Tensors in, tensors out: the folders around it are :mod:`paw.transfer.folder_pipeline`'s, the method that trains
instead is :mod:`paw.transfer.distill`.

Flow: check the adapter against the source base (every key names a source module of the right
shape), choose a layer pairing (:mod:`paw.transfer.pairing`), then for every adapted module read the
two base weights, map the factors with the chosen method (or let ``auto`` choose), record the
evidence (:mod:`paw.transfer.evidence`: relatedness against the other target layers, kept share,
norm ratio), and finally carry ``modules_to_save`` tensors over as deltas. ``auto`` tries the next
layer pairing when the target looks unrelated under one, and refuses only when all failed.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from paw import arch
from paw.errors import NotApplicable, PawError, Refused
from paw.io.adapter import PEFT_PREFIX, LoraAdapter, adapter_key, lora_config_dict
from paw.progress import track
from paw.transfer import linalg, pairing, structural
from paw.transfer.context import Context, family_of
from paw.transfer.evidence import measure
from paw.transfer.layers import LAYER_MAPS, rename_layer, role_of, split_layer
from paw.transfer.methods import METHODS, Job, Mapped, Unavailable, _safe_inverse
from paw.transfer.relatedness import (
    KEPT_WARNING,
    MIN_RELATED_FRACTION,
    NORM_GUARD,
    RESIDUAL_LIFT,
    SIMILARITY_LIFT,
    judge,
)
from paw.transfer.summary import TransferSummary
from paw.transfer.vocab import DISTILL_HINT, VocabIndex, auto_refusal, vocabulary_change

AUTO = "auto"

# why no training-free transfer takes a DoRA adapter (read_adapter and transfer_lora say it, naming the adapter)
DORA_REFUSAL = ("transfer-lora maps the LoRA factors A and B into the target base's coordinates; DoRA's magnitude "
                "vector rescales each row of the source's own W + BA and has no counterpart on another base")


def method_names() -> list[str]:
    return [AUTO, *METHODS]


# Measured by `paw bench transfer` (its `tokenizer` target): with the source's weights and a transplanted
# tokenizer, every data-free method recovered ~0 of the gain (the adapter learned token sequences
# that no longer occur), although each module looks perfectly related.
TOKENIZER_CHANGE = ("source and target tokenizers differ ({change}): the adapter was trained on the "
                    "source's token sequences, and in PAW's benchmark no data-free method kept any of the "
                    "gain across a tokenizer change although every module looked related; evaluate before "
                    f"use, or {DISTILL_HINT}")


def transfer_lora(adapter, source, target, *, method: str = AUTO, subspace_rank: int | None = None,
                  min_similarity: float | None = None, layer_map: str = AUTO, vocab_map=None,
                  ridge: float = 1e-2, force: bool = False, device="cpu",
                  target_name: str | None = None, id_change: str | None = None) -> tuple[Any, dict]:
    """Move ``adapter`` (a :class:`paw.io.adapter.LoraAdapter`) from ``source`` to ``target`` bases.

    ``source``/``target``: checkpoints (``Mapping`` name -> tensor with ``.config``, ``.name``, ``.path``).
    Returns ``(adapter for the target, report dict)``; every output module keeps its rank r.
    ``vocab_map``: a :class:`paw.io.vocab_map.VocabMapping` or None (same tokenizer).
    ``id_change``: how the two tokenizers differ on the same ids (:func:`paw.vocab.compare.id_difference`),
    None when they agree or are not at hand. ``auto`` refuses (:class:`~paw.errors.Refused`, ``force``
    or not) whenever the vocabularies differ, with or without ``vocab_map``; a named method warns.
    ``layer_map``: ``auto`` (default, see :mod:`paw.transfer.pairing`) or one of :data:`LAYER_MAPS`.
    Raises PawError on bad input, :class:`~paw.errors.NotApplicable` when the method cannot map the
    adapter, and :class:`~paw.errors.Refused` when ``auto`` finds the target unrelated under every
    layer pairing it tried (unless ``force``).
    """
    import torch

    if method not in method_names():
        raise PawError(f"unknown transfer method {method!r}; choose one of {', '.join(method_names())}")
    if layer_map not in LAYER_MAPS:
        raise PawError(f"unknown --layer-map {layer_map!r}; choose one of {', '.join(LAYER_MAPS.names())}")
    if ridge <= 0:
        raise PawError(f"--ridge must be positive, got {ridge}")
    device = torch.device(device) if isinstance(device, str) else device
    if adapter.dora:
        raise NotApplicable(f"a DoRA adapter (use_dora: true): {DORA_REFUSAL}", path=adapter.path)
    modules = adapter.modules()
    if not modules:
        raise PawError("the adapter holds no LoRA factors", path=adapter.path)
    placed = {m: _check_module(adapter, lm, source) for m, lm in modules.items()}
    change = vocabulary_change(vocab_map, _rows(source), _rows(target), id_change)
    if method == AUTO and change is not None:
        raise Refused(auto_refusal(change))
    vocab = VocabIndex.from_mapping(vocab_map, _rows(source), _rows(target))
    ctx = Context(source, target, device, ridge=ridge, subspace_rank=subspace_rank, vocab=vocab)
    attempts = []
    with torch.no_grad():
        for candidate in pairing.candidates(ctx, layer_map):
            ctx.layer_map = candidate.pairs
            records, tensors, extras = _run(ctx, adapter, modules, placed, method, min_similarity, force)
            report = _report(ctx, adapter, records, method, candidate, min_similarity, force, extras)
            attempts.append(_attempt(candidate, report))
            if method != AUTO or force or not TransferSummary.from_report(report).unrelated:
                break
    report["layers"]["tried"] = attempts
    if change is not None:
        report["warnings"] = report.get("warnings", []) + [TOKENIZER_CHANGE.format(change=change)]
    if method == AUTO and TransferSummary.from_report(report).unrelated and not force:
        raise Refused(_refusal(report, attempts))
    done = [r for r in records if r["transferred"]]
    if not done:
        raise NotApplicable("no module was transferred (see the reasons with --force or another --method): "
                       + "; ".join(f"{r['module']}: {r['decision']}" for r in records[:3]))
    return _adapter(adapter, target, target_name, done, tensors, extras), report


def _run(ctx: Context, adapter, modules: dict, placed: dict, method: str, min_similarity, force):
    """Every module under the current layer pairing: ``(records, tensors, extras)``."""

    records, tensors = [], {}
    for module in track(list(modules), "transfer-lora", unit="modules"):
        lm = modules[module]
        record, mapped = _transfer_module(ctx, lm, placed[module], method, min_similarity, force)
        records.append(record)
        ctx.forget_bases()
        if mapped is not None:
            dtype = lm.A.dtype
            tensors[adapter_key(record["target_module"], "A", lm.kind)] = mapped.A.to("cpu", dtype).contiguous()
            tensors[adapter_key(record["target_module"], "B", lm.kind)] = mapped.B.to("cpu", dtype).contiguous()
    extras = _carry_extras(ctx, adapter, _residual_method(method, records))
    return records, tensors, extras


def _adapter(adapter, target, target_name, done: list[dict], tensors: dict, extras: dict):

    for key, value in extras["tensors"].items():
        tensors[key] = value
    config = lora_config_dict(
        r=adapter.r, alpha=adapter.alpha, base_model=target_name or str(getattr(target, "path", target.name)),
        target_modules=_target_modules(done, target), rank_pattern=_pattern(done, adapter.rank_of, adapter.r),
        alpha_pattern=_pattern(done, adapter.alpha_of, adapter.alpha),
        modules_to_save=adapter.modules_to_save or None, use_rslora=bool(adapter.config.get("use_rslora")))
    return LoraAdapter(config=config, tensors=tensors)


# ------------------------------------------------------------------------------------------ checks

def _rows(ckpt) -> int:
    embed = family_of(ckpt).embed
    return int(ckpt.shape(embed)[0]) if embed in ckpt else 0


def _base_name(module: str, ckpt) -> str:
    name, embed = f"{module}.weight", family_of(ckpt).embed
    if name not in ckpt and arch.is_head(module) and embed in ckpt:
        return embed  # tied head: the output head reads the embedding table
    return name


def _check_module(adapter, lm, source) -> str:
    """The source weight name of one adapted module; PawError naming the key when it does not fit."""

    key = adapter_key(lm.module, "A", lm.kind)
    name = _base_name(lm.module, source)
    if name not in source:
        raise PawError(f"adapter key {key!r} matches no module of the source base {source.name} "
                       f"(no tensor {name!r})", path=adapter.path)
    shape = tuple(source.shape(name))
    if len(shape) != 2:
        raise PawError(f"unsupported module type: {key!r} adapts {name!r} of shape {list(shape)} "
                       "(only Linear and Embedding LoRA)", path=adapter.path)
    out_dim, in_dim = (shape[1], shape[0]) if lm.kind == "embedding" else shape
    if tuple(lm.B.shape)[0] != out_dim or tuple(lm.A.shape)[1] != in_dim:
        raise PawError(f"the source base {source.name} is not this adapter's base: {key!r} expects a "
                       f"({lm.B.shape[0]}, {lm.A.shape[1]}) weight but {name!r} is {list(shape)}",
                       path=adapter.path)
    return name


# --------------------------------------------------------------------------------------- per module

def _job(ctx: Context, lm, source_name: str) -> Job | str:
    target_module = rename_layer(lm.module, ctx.layer_map)
    if target_module is None:
        return "not transferred: its layer has no partner in the target"
    target_name = _base_name(target_module, ctx.target)
    if target_name not in ctx.target:
        return f"not transferred: the target has no {target_name!r}"
    W_s, W_t = ctx.weight("s", source_name), ctx.weight("t", target_name)
    embedding = lm.kind == "embedding"
    if embedding:
        W_s, W_t = W_s.T, W_t.T
    ls, lt = split_layer(lm.module), split_layer(target_module)
    return Job(lm.module, target_module, lm.A.to(ctx.device), lm.B.to(ctx.device), W_s, W_t,
               role_of(lm.module, ctx.families["s"]), source_name, target_name,
               (ls[1] if ls else None, lt[1] if lt else None), embedding)


def _r(x):
    return None if x is None else round(float(x), 6)


def _candidates(job: Job) -> list[str]:
    same = tuple(job.W_s.shape) == tuple(job.W_t.shape)
    return (["copy"] if same else []) + ["structural", "embed-map"]


def _warnings(evidence: dict) -> list[str]:
    """What the decision must say aloud: most of ΔW dropped, or its norm blown up."""
    out = []
    kept, ratio = evidence["kept"], evidence["norm_ratio"]
    if kept is not None and kept < KEPT_WARNING:
        out.append(f"keeps {kept:.0%} of ΔW")
    elif kept is None and ratio < KEPT_WARNING:
        out.append(f"norm ratio {ratio:.3g}: most of ΔW dropped")
    if ratio > NORM_GUARD:
        out.append(f"norm ratio {ratio:.3g} > {NORM_GUARD}")
    return out


def _decision(name: str, evidence: dict, note: str = "") -> str:
    warn = _warnings(evidence)
    parts = [p for p in (note, *(f"warning: {w}" for w in warn)) if p]
    return f"{name} ({'; '.join(parts)})" if parts else name


def _verdict(evidence: dict, min_similarity: float | None):
    floor_ok = min_similarity is None or (evidence["similarity"] or 0.0) >= min_similarity
    return judge(evidence["similarity_lift"], evidence["residual_lift"], min_similarity_ok=floor_ok)


def _transfer_module(ctx, lm, source_name, method, min_similarity, force) -> tuple[dict, Mapped | None]:
    job = _job(ctx, lm, source_name)
    base = {"module": lm.module, "kind": lm.kind, "rank": lm.rank,
            "shape_source": list(ctx.source.shape(source_name))}
    if isinstance(job, str):
        return {**base, "target_module": None, "method": None, "decision": job, "transferred": False}, None
    base.update(target_module=job.target_module, shape_target=list(ctx.target.shape(job.weight_t)))
    if method != AUTO:
        try:
            mapped = METHODS[method](ctx, job)
        except Unavailable as err:
            raise NotApplicable(str(err)) from None
        evidence = measure(ctx, job, mapped)
        verdict = _verdict(evidence, min_similarity)
        if min_similarity is not None and (evidence["similarity"] or 0.0) < min_similarity:
            return {**base, "method": method, "transferred": False, "related": verdict.related, **evidence,
                    "decision": f"skipped: similarity {evidence['similarity']} < --min-similarity {min_similarity}"
                    }, None
        return {**base, "method": method, "decision": _decision(method, evidence), "transferred": True,
                "related": verdict.related, "why": verdict.reason, **evidence}, mapped
    tried, first = [], None
    for name in _candidates(job):
        try:
            mapped = METHODS[name](ctx, job)
        except Unavailable as err:  # skipped with its reason; auto never fails because of one candidate
            tried.append({"method": name, "unavailable": str(err)})
            continue
        evidence = measure(ctx, job, mapped)
        verdict = _verdict(evidence, min_similarity)
        blow_up = evidence["norm_ratio"] > NORM_GUARD
        tried.append({"method": name, "related": verdict.related, "why": verdict.reason, "blow_up": blow_up,
                      **evidence})
        first = first or (name, mapped, evidence, verdict)
        if verdict.related and not blow_up:
            return {**base, "method": name, "decision": _decision(name, evidence, "related"), "transferred": True,
                    "related": True, "why": verdict.reason, **evidence, "candidates": tried}, mapped
    if first is None:
        reasons = "; ".join(f"{t['method']}: {t['unavailable']}" for t in tried)
        return {**base, "method": None, "transferred": False, "candidates": tried,
                "decision": f"not transferred: no candidate method applies ({reasons})"}, None
    name, mapped, evidence, verdict = first
    decision = _decision(name, evidence, "unrelated, forced") if force else "not transferred: target module unrelated"
    return {**base, "method": name, "decision": decision, "transferred": force, "related": False,
            "why": verdict.reason, **evidence, "candidates": tried}, (mapped if force else None)


# ---------------------------------------------------------------------------- modules_to_save etc.

def _residual_method(method: str, records: list[dict]) -> str:
    """How hidden columns of saved tensors move: the method, or under auto the mapping method used most."""
    if method != AUTO:
        return method
    used = [r["method"] for r in records if r["transferred"] and r["method"] in ("structural", "embed-map")]
    return max(sorted(set(used)), key=used.count) if used else "copy"


def _carry_extras(ctx: Context, adapter, how: str) -> dict:
    """Non-LoRA tensors (``modules_to_save`` copies, saved embedding base layers) moved as deltas.

    The saved tensor replaces the target's module on load, so it must have the target's shape: the
    target's own weight plus the source's change, mapped like a weight of that module
    (vocabulary rows through the vocabulary map, hidden columns through the method's residual map).
    """

    out, notes = {}, []
    for key, saved in sorted(adapter.other_tensors().items()):
        base = key.replace(".base_layer.", ".")
        if base not in ctx.source:
            raise PawError(f"adapter tensor {PEFT_PREFIX + key!r} matches no tensor of the source base "
                           f"{ctx.source.name}", path=adapter.path)
        target_base = rename_layer(base.removesuffix(".weight"), ctx.layer_map)
        if target_base is None:
            notes.append({"tensor": key, "decision": "not carried: its layer has no partner"})
            continue
        target_base += ".weight"
        delta = saved.to(ctx.device, ctx.dtype) - ctx.weight("s", base)
        W_t = ctx.weight("t", target_base)
        new = W_t + _map_delta(ctx, base, delta, W_t.shape, how) if bool(delta.any()) else W_t
        out[PEFT_PREFIX + key.replace(base, target_base)] = new.to("cpu", saved.dtype).contiguous()
        notes.append({"tensor": key, "target_tensor": target_base, "delta_norm": _r(float(delta.norm())),
                      "decision": "carried as a delta on the target's weight"})
    return {"tensors": out, "notes": notes}


def _map_delta(ctx: Context, base: str, delta, shape, how: str):
    """Map a (vocab, hidden) delta: rows through the vocabulary map, hidden columns as ``how`` says."""

    fam_s, fam_t = ctx.families["s"], ctx.families["t"]
    if base not in (fam_s.embed, fam_s.head):
        if tuple(delta.shape) == tuple(shape):
            return delta
        raise NotApplicable(f"cannot carry the saved tensor {base!r} from shape {list(delta.shape)} to {list(shape)}")
    rows = ctx.vocab.rows(delta)
    if how == "structural":
        return structural.gather(rows, ctx.hidden_map().index, 1)
    if how == "embed-map":
        M_st, M_ts = ctx.residual_maps()
        if base == fam_s.embed:
            return rows @ M_st.T
        g_s = ctx.gain("s", fam_s.final_norm, delta.shape[1])
        g_t = ctx.gain("t", fam_t.final_norm, shape[1])

        return rows @ (g_s[:, None] * M_ts * _safe_inverse(g_t)[None, :])
    if rows.shape[1] != shape[1]:
        raise NotApplicable(f"cannot carry {base!r} across hidden sizes {rows.shape[1]} -> {shape[1]} with this method")
    return rows


# ------------------------------------------------------------------------------------------ report

def _target_modules(done: list[dict], target) -> list[str]:
    """Suffixes (``q_proj``) where every such target module got a transfer, full paths elsewhere."""
    by_suffix: dict[str, set] = {}
    for r in done:
        by_suffix.setdefault(r["target_module"].rsplit(".", 1)[-1], set()).add(r["target_module"])
    names = []
    for suffix, got in sorted(by_suffix.items()):
        every = {n.removesuffix(".weight") for n in target if n.removesuffix(".weight").endswith("." + suffix)
                 or n.removesuffix(".weight") == suffix}
        names += [suffix] if got >= every else sorted(got)
    return names


def _pattern(done: list[dict], value_of, default) -> dict:
    return {r["target_module"]: value_of(r["module"]) for r in done if value_of(r["module"]) != default}


def _median(records: list[dict], key: str):
    values = [r[key] for r in records if r.get(key) is not None]
    return _r(statistics.median(values)) if values else None


def _kept_total(done: list[dict], adapter) -> dict:
    """The adapter as a whole: kept share (energy-weighted over modules that have one) and norm ratio."""

    weights, modules = {}, adapter.modules()
    for r in done:
        lm = modules[r["module"]]
        weights[r["module"]] = linalg.lora_norm(lm.A, lm.B) ** 2
    with_kept = [r for r in done if r.get("kept") is not None]
    total = sum(weights[r["module"]] for r in with_kept)
    kept = sum(r["kept"] * weights[r["module"]] for r in with_kept) / total if total > 0 else None
    norm_total = sum(weights.values())
    ratio = (sum(r["norm_ratio"] ** 2 * weights[r["module"]] for r in done) / norm_total) ** 0.5 if norm_total else None
    return {"kept_share": _r(kept), "kept_modules": len(with_kept), "norm_ratio_total": _r(ratio)}


def _report(ctx, adapter, records, method, chosen: pairing.Pairing, min_similarity, force, extras) -> dict:
    done = [r for r in records if r["transferred"]]
    n_s, n_t = ctx.n_layers
    matched = ctx.layer_map
    related = [r for r in records if r.get("related")]
    judged = [r for r in records if "related" in r]
    unrelated = method == AUTO and (not judged or len(related) < MIN_RELATED_FRACTION * len(judged))
    counts: dict[str, int] = {}
    for r in done:
        counts[r["method"]] = counts.get(r["method"], 0) + 1
    kept = _kept_total(done, adapter)
    warnings = []
    if done and kept["kept_share"] is not None and kept["kept_share"] < KEPT_WARNING:
        warnings.append(f"the transferred adapter keeps {kept['kept_share']:.0%} of the source update (energy "
                        f"share over {kept['kept_modules']} modules): most of it was dropped")
    elif done and kept["kept_share"] is None and (kept["norm_ratio_total"] or 0.0) < KEPT_WARNING:
        warnings.append(f"the transferred adapter's norm is {kept['norm_ratio_total']:.2f} of the source's: "
                        "most of the update was dropped")
    return {
        "format": "paw-transfer-report", "version": 2, "method": method, "force": force,
        "source": str(getattr(ctx.source, "path", ctx.source.name)),
        "target": str(getattr(ctx.target, "path", ctx.target.name)),
        "adapter": {"r": adapter.r, "alpha": adapter.alpha, "modules": len(records)},
        "ridge": ctx.ridge, "min_similarity": min_similarity,
        "thresholds": {"similarity_lift": SIMILARITY_LIFT, "residual_lift": RESIDUAL_LIFT,
                       "min_related_fraction": MIN_RELATED_FRACTION, "norm_guard": NORM_GUARD,
                       "kept_warning": KEPT_WARNING},
        "layers": {"how": chosen.how, "why": chosen.why, "source": n_s, "target": n_t,
                   "pairs": [[s, t] for s, t in sorted(matched.items())],
                   "source_without_partner": [i for i in range(n_s) if i not in matched],
                   "target_without_partner": [j for j in range(n_t) if j not in set(matched.values())]},
        "vocab": ctx.vocab.describe(),
        **{k: v for k, v in sorted(ctx.facts.items())},
        "summary": asdict(TransferSummary(
            transferred=len(done), not_transferred=len(records) - len(done), methods=dict(sorted(counts.items())),
            related=len(related) if judged else None, judged=len(judged) if judged else None,
            median_similarity=_median(records, "similarity"),
            median_similarity_null=_median(records, "similarity_null"),
            median_similarity_lift=_median(records, "similarity_lift"),
            median_chance=_median(records, "similarity_chance"),
            median_remix_residual=_median(records, "remix_residual"),
            median_residual_lift=_median(records, "residual_lift"),
            max_norm_ratio=_r(max((r["norm_ratio"] for r in done), default=0.0)), **kept, unrelated=unrelated)),
        "warnings": warnings,
        "extras": extras["notes"],
        "modules": records,
    }


def _attempt(candidate: pairing.Pairing, report: dict) -> dict:
    s = TransferSummary.from_report(report)
    return {"how": candidate.how, "pairs": [[a, b] for a, b in sorted(candidate.pairs.items())],
            "why": candidate.why, "related": s.related, "judged": s.judged, "refused": s.unrelated}


def _refusal(report: dict, attempts: list[dict]) -> str:
    s = TransferSummary.from_report(report)
    tried = "; ".join(f"{a['how']} {a['pairs']}: {a['related'] or 0}/{a['judged'] or 0} related" for a in attempts)
    return (f"target looks unrelated to the source under every layer pairing tried ({tried}): a module is "
            "related when it matches its partner clearly better than the other target layers (similarity "
            f"lift >= {SIMILARITY_LIFT} or residual lift >= {RESIDUAL_LIFT}); last pairing: median subspace "
            f"similarity {s.median_similarity} vs {s.median_similarity_null} for the other layers "
            f"(chance {s.median_chance}), median lift {s.median_similarity_lift}; no data-free map would "
            "transfer anything useful. Pass --force to write the adapter anyway, or " + DISTILL_HINT)
