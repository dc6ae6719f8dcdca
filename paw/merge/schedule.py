"""What a streamed merge will read and write, known from the headers before the first tensor.

The merge walks the base's tensors in order; for each merged one it reads row blocks of every
input once per pass (two threshold passes first for TIES and Model Breadcrumbs, one rescale pass
for DELLA, then the merge pass), and it writes every tensor in a dtype and shape the options fix. Knowing both in advance
lets a reader thread read the next blocks while this one computes
(:class:`paw.io.stream.ReadAhead`) and the writer put each shard's header first and every byte
once (:class:`paw.io.writer.ShardedWriter`). Nothing here reads a tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from paw.merge.blocks import TopK, row_blocks, threshold_passes


def output_dtype(job, name: str) -> str:
    """The dtype tensor ``name`` is written in: the base's, or ``--dtype``; copied tensors keep theirs."""
    merged = name in job.plan.merge or name in job.plan.vocab_rows or name in job.plan.union
    if merged and job.options.dtype != "auto":
        return job.options.dtype
    return job.reference.dtype(name)


def layout(job) -> list[tuple[str, str, tuple[int, ...]]] | None:
    """``(name, dtype, shape)`` of every tensor the merge writes, in order; None for a union vocabulary
    (its row count is the union's, and laying it out reads the tokenizers)."""
    if job.plan.union:
        return None
    return [(name, output_dtype(job, name), tuple(job.reference.shape(name))) for name in job.plan.order]


def blocks(job, name: str, block_elements: int) -> list[tuple[int, int] | None]:
    """The row blocks tensor ``name`` is merged in: many for a streamed method, one (the whole
    tensor, or the shared vocabulary rows) for a method that needs whole tensors."""
    rows = job.plan.vocab_rows.get(name)
    shape = job.reference.shape(name)
    if job.method.streamed and not (job.method.sparsify == "della" and len(shape) == 1):
        return row_blocks(shape, rows, block_elements)
    # DELLA ranks a 1-D tensor as one row: whole, like the methods that need whole tensors
    return [None if rows is None or not shape else (0, rows)]


_LARGEST = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}
# the input dtypes each compute dtype holds exactly (a sum of inputs may then skip forming Δ)
_EXACT_IN = {"float32": {"float32", "bfloat16", "float16"}, "float64": {"float64", "float32", "bfloat16", "float16"}}


def combination(job, name: str) -> tuple[float, list[float]] | None:
    """``(c_base, [c_i])`` when tensor ``name`` merges as ``c_base·base + Σ_i c_i·M_i`` (task arithmetic
    and linear: :meth:`paw.merge.methods.MergeMethod.combination`) and every input's dtype is held
    exactly by the compute dtype; None otherwise. The merge then adds each input into one float buffer
    once, and leaves out the base when ``c_base`` is 0."""
    if name in job.plan.union:
        return None
    tp = job.params(name)
    coefs = job.method.combination(tp.weights, tp.scale, tp.params)
    compute = "float64" if job.reference.dtype(name) == "float64" else "float32"
    if coefs is None or any(c.dtype(name) not in _EXACT_IN[compute] for c in (job.reference, *job.models)):
        return None
    if not all(abs(c) <= _LARGEST[compute] for c in (coefs[0], *coefs[1])):  # s·w past the float: the Δ path
        return None
    return coefs


def sum_terms(job, name: str) -> list[tuple[Any, float]] | None:
    """``[(checkpoint, coefficient)]`` in reading order when ``name`` merges as a sum of inputs
    (:func:`combination`), else None. The reference is left out at coefficient 0 when the method needs
    no base (linear); a base the method is defined on is read even then, so that a NaN in it is refused
    (0 × NaN is NaN), as the task-vector form refuses it."""
    coefs = combination(job, name)
    if coefs is None:
        return None
    c_base, cs = coefs
    base = [] if c_base == 0.0 and not job.method.needs_base else [(job.reference, c_base)]
    return base + list(zip(job.models, cs, strict=True))


def inputs(job, name: str) -> list:
    """The checkpoints a merge pass over ``name`` reads, in order: the base (or reference), then each
    model, or the terms of its sum of inputs (:func:`sum_terms`)."""
    terms = sum_terms(job, name)
    return [job.reference, *job.models] if terms is None else [c for c, _ in terms]


def della_rescale_passes(job, tp) -> int:
    """1 when DELLA rescales to the L1 norm (some model's density below 1): a pass over the blocks
    finds each model's factor before the merge pass; else 0."""
    if job.method.sparsify != "della" or not tp.params.get("rescale", True):
        return 0
    return int(any(d < 1.0 for d in tp.per_model("density", len(job.models))))


def topks(job, name: str, tp) -> list[list[TopK]] | None:
    """Per model, the exact top-k selections the method's sparsifier needs (TIES: one; Model
    Breadcrumbs: the kept range's two ends); None for the other methods."""
    kind, count = job.method.sparsify, len(job.models)
    n = math.prod(job.reference.shape(name)) if name not in job.plan.vocab_rows else \
        job.plan.vocab_rows[name] * math.prod(job.reference.shape(name)[1:])
    if kind == "magnitude":
        return [[TopK(max(1, int(density * n)), n)] if density < 1.0 else [TopK(n, n)]
                for density in tp.per_model("density", count)]
    if kind == "outliers":
        out = []
        for density, gamma in zip(tp.per_model("density", count), tp.per_model("gamma", count), strict=True):
            n_keep = int(density * n)
            n_top = min(int(gamma * n), n - n_keep)
            out.append([TopK(n_top + n_keep, n), TopK(n_top, n)])
        return out
    return None


def read_plan(job, block_elements: int) -> Iterator[tuple[Any, str, tuple[int, int] | None]]:
    """Every read of the merge, in the order it makes them: ``(checkpoint, name, rows or None)``.

    Per merged tensor: the threshold passes and the merge pass, each reading every block of the
    base then of each model; a vocabulary tensor merged on its shared rows then reads the base's
    whole tensor; a copied tensor is read whole from the base. A union vocabulary is left out.
    """
    merged = set(job.plan.merge) | set(job.plan.vocab_rows)
    for name in job.plan.order:
        if name in job.plan.union:
            continue
        if name not in merged:
            yield job.reference, name, None
            continue
        row_ranges = blocks(job, name, block_elements)
        passes = 1
        if job.method.streamed:
            selections = topks(job, name, job.params(name))
            if selections is not None:
                passes += threshold_passes(selections, float32=job.reference.dtype(name) != "float64")
            passes += della_rescale_passes(job, job.params(name))
        ckpts = inputs(job, name)
        for _ in range(passes):
            for block in row_ranges:
                for ckpt in ckpts:
                    yield ckpt, name, block
        if name in job.plan.vocab_rows:
            yield job.reference, name, None
