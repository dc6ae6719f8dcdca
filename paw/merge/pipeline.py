"""The streamed merge: check everything from headers, find the weights, then merge tensor by tensor.

:func:`prepare` opens the checkpoints lazily, plans every tensor (:mod:`paw.merge.plan`), finds the
L2 norms (given, read from ``paw task-vectors`` summaries, or computed in a first streamed pass) and
the weights; it reads no tensor unless norms must be computed. :func:`execute` then walks the base's
tensors in order, holding one tensor of the base and of each model at a time (plus the result), and
hands them to the atomic sharded writer. Peak memory is near (N + 2) copies of the largest tensor in
float32 plus the output shard being filled (``max_shard_size``), whatever the model size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from paw import __version__
from paw.device import resolve_device
from paw.errors import PawError
from paw.io.atomic import check_output
from paw.io.chat_template import with_chat_template
from paw.io.checkpoint import Checkpoint, distinct_names
from paw.io.input_guard import input_scope
from paw.io.json_file import read_json
from paw.io.lora_model import describe_ref, open_model, ref_paths
from paw.io.manifest import call_text
from paw.io.stream import ReadAhead
from paw.io.union_tokenizer import read_token_table, union_tokenizer_files
from paw.io.writer import tokenizer_source, write_checkpoint
from paw.merge import schedule, thinning
from paw.merge.blocks import BLOCK_ELEMENTS as _BLOCK
from paw.merge.blocks import Deltas, block_numel
from paw.merge.card import model_card
from paw.merge.methods import MergeMethod, get_method
from paw.merge.norms import task_vector_norms
from paw.merge.options import MergeOptions
from paw.merge.params import TensorParams, flat_params
from paw.merge.plan import MergePlan, plan_merge
from paw.merge.slices import layer_count, open_sliced
from paw.merge.union import UnionVocab, build_union, permuted_matrices
from paw.merge.weights import weights_from_norms
from paw.progress import track
from paw.validate import NonFinite, all_finite, nonfinite

MANIFEST = "paw_merge.json"
BLOCK_ELEMENTS = _BLOCK  # entries per row block of a merged tensor (4 MB in float32)


@dataclass
class MergeJob:
    """Everything decided before the first merged tensor is computed."""

    options: MergeOptions
    method: MergeMethod
    reference: Checkpoint          # the base, or the first model for a base-free method
    models: list[Checkpoint]
    plan: MergePlan
    norms: list[float] | None      # None when neither the mode nor the table needs them
    norm_source: str               # given | stats-dir | computed | not needed
    weights: list[float]
    device: Any                    # torch.device
    nonfinite: dict[str, int] = field(default_factory=dict)  # tensor -> NaN/Inf written (allow_nonfinite)
    union: UnionVocab | None = None  # vocab_policy 'union': the merged vocabulary

    def params(self, name: str) -> TensorParams:
        """Weights, knobs and scale for tensor ``name``: the mergekit rules' or the flat options'."""
        if self.options.rules is not None:
            return self.options.rules.for_tensor(name)
        return flat_params(self.options, self.weights)

    def table(self) -> list[tuple[str, float | None, float]]:
        """``(model name, L2 norm or None, weight)`` per model, for the table printed before merging."""
        norms = self.norms or [None] * len(self.models)
        return [(m.name, n, w) for m, n, w in zip(self.models, norms, self.weights, strict=True)]


def prepare(options: MergeOptions) -> MergeJob:
    """Validate options and inputs, plan the tensors, find norms and weights. Raises PawError."""
    options.check()   # every key judged before a file is opened
    method = get_method(options.method)
    inputs = [p for ref in [*options.models, *([options.base] if options.base else [])] for p in ref_paths(ref)]
    inputs.append(options.stats_dir)
    check_output(options.output, overwrite=options.overwrite, inputs=inputs)
    device = resolve_device(options.device)
    if options.tokenizer_from is not None:
        what = "tokenizer_source" if options.rules is not None else "--tokenizer-from"
        try:
            options = replace(options, tokenizer_from=str(tokenizer_source(options.tokenizer_from, what=what)))
        except PawError as err:  # a mergekit config's key: name the file too
            where = options.rules.path if options.rules is not None else None
            raise PawError(str(err), path=where) from None
    if options.slices:  # mergekit slices: each role is a lazy view stacking layer ranges of its sources
        base, models = open_sliced(options.slices, open_model, stacking=method.name == "passthrough")
        reference = base if base is not None else models[0]
    else:
        models = [open_model(m) for m in options.models]   # MODEL+LORA: the LoRA applied as tensors are read
        reference = open_model(options.base) if options.base is not None else models[0]
        distinct_names([reference, *models])  # messages tell a/base from b/base
    check_output(options.output, overwrite=options.overwrite, inputs=[m.path for m in [reference, *models]])
    plan = plan_merge(reference, models, vocab_policy=options.vocab_policy)
    if options.rules is not None:  # every tensor's parameters resolved now: a missing one fails before writing
        options.rules.bind(layer_count(reference))
        for name in [*plan.merge, *plan.vocab_rows, *plan.union]:
            options.rules.for_tensor(name)
    union = _union(options, reference, models, plan) if plan.union else None
    norms, source = _norms(options, reference, models, plan, device)
    if options.weights is not None:
        weights = [float(w) for w in options.weights]
    else:
        weights = weights_from_norms(norms, options.mode, beta=options.beta, alpha=options.alpha) \
            if norms is not None else [1.0 / len(models)] * len(models)
    if not all(math.isfinite(w) for w in weights):
        raise PawError(f"the weights {weights} are not all finite numbers; nothing was written")
    if method.normalise_weights and abs(sum(weights)) < 1e-12:
        raise PawError(f"--weights sum to zero; method {method.name} divides by their sum")
    return MergeJob(options, method, reference, models, plan, norms, source, weights, device, union=union)


def _members(job_or_options, reference: Checkpoint, models: list[Checkpoint]) -> list[Checkpoint]:
    """The distinct inputs of a union merge: the base and the models, or the models alone."""
    return [reference, *models] if job_or_options.base is not None else list(models)


def _union(options: MergeOptions, reference: Checkpoint, models: list[Checkpoint], plan: MergePlan) -> UnionVocab:
    """The union vocabulary of every input's ``tokenizer.json`` (rows counted in the first vocabulary tensor)."""
    members = _members(options, reference, models)
    first = plan.union[0]
    union = build_union([read_token_table(c.path) for c in members], [c.shape(first)[0] for c in members],
                        pad_to_multiple_of=options.pad_to_multiple_of)
    for token in options.token_overrides or {}:
        if token not in union.tokens:
            raise PawError(f"tokenizer.tokens: {token!r} is in no input's vocabulary")
    return union


def _norms(options: MergeOptions, base: Checkpoint, models: list[Checkpoint], plan: MergePlan,
           device) -> tuple[list[float] | None, str]:
    if options.l2_norms is not None:
        return [float(n) for n in options.l2_norms], "given"
    if options.stats_dir is not None:
        return [_summary_norm(Path(options.stats_dir), m.name) for m in models], "stats-dir"
    if options.weights is not None or options.mode == "equal" or options.rules is not None \
            or not get_method(options.method).weighted:
        return None, "not needed"
    return task_vector_norms(base, models, plan.merge, device=device, block_elements=BLOCK_ELEMENTS,
                             allow_nonfinite=options.allow_nonfinite), "computed"


def _summary_norm(stats_dir: Path, model_name: str) -> float:
    path = stats_dir / model_name / "summary.json"
    if not path.exists():
        raise PawError(f"no task-vector summary for model {model_name!r} (run paw task-vectors --outdir "
                       f"{stats_dir}, or drop --stats-dir to compute the norms)", path=path)
    value = read_json(path).get("global_l2")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise PawError("no numeric 'global_l2' in this summary", path=path)
    return float(value)


def _read_now(ckpt: Checkpoint, name: str, rows: tuple[int, int] | None = None):
    return ckpt[name] if rows is None else ckpt.rows(name, *rows)


def merged_tensors(job: MergeJob, read: Callable = _read_now) -> Iterator[tuple[str, Any]]:
    """Yield ``(name, tensor)`` for every tensor of the base, in its order: merged, row-merged or copied.

    ``read(checkpoint, name, rows)`` reads the inputs (a :class:`paw.io.stream.ReadAhead`'s ``get``
    reads them ahead). A tensor with NaN/Inf is refused (naming the model it comes from) unless
    ``allow_nonfinite``.
    """
    merge = set(job.plan.merge) | set(job.plan.vocab_rows) | set(job.plan.union)
    for name in track(job.plan.order, f"merging ({job.method.name})"):
        tensor = _merge_tensor(job, name, read) if name in merge else read(job.reference, name)
        if nonfinite(tensor):
            _refuse_nonfinite(job, name, tensor)
        yield name, tensor


def _merge_tensor(job: MergeJob, name: str, read: Callable = _read_now):
    """One merged tensor, computed in row blocks: base + scale * method(Δ_1 .. Δ_N), in the output dtype.

    A method that needs whole tensors (an angle or a norm over all entries) gets one block.
    """
    import torch

    if name in job.plan.union:
        return _merge_union(job, name)
    opts, ref = job.options, job.reference
    tp = job.params(name)
    out_dtype = getattr(torch, schedule.output_dtype(job, name))
    compute = torch.float64 if ref.dtype(name) == "float64" else torch.float32
    rows = job.plan.vocab_rows.get(name)
    shape = ref.shape(name)
    blocks = schedule.blocks(job, name, BLOCK_ELEMENTS)
    ckpts = [ref, *job.models]
    largest = max(block_numel(shape, b) for b in blocks)
    out = torch.empty((rows, *shape[1:]) if rows is not None else shape, dtype=out_dtype, device=job.device)
    terms = schedule.sum_terms(job, name)
    if terms is not None:
        _sum_inputs(job, name, read, terms, blocks, out, torch.empty(largest, dtype=compute, device=job.device))
        return _with_base_rows(job, name, read, out)
    load = Deltas(len(ckpts), largest, compute, job.device)

    def deltas(block):  # (base, [Δ_i]) of one block, in buffers the next call overwrites
        return load(read(c, name, block).to(job.device) for c in ckpts)

    if job.method.streamed:
        thin = thinning.sparsifiers(job, name, tp, blocks, deltas)
    for block in blocks:
        base, ds = deltas(block)
        if not opts.allow_nonfinite and not all(all_finite(d) for d in ds):
            _refuse_nonfinite(job, name, None)  # an input holds NaN/Inf here: name it, even if the method would drop it
        if job.method.streamed:
            for d, f in zip(ds, thin, strict=True):
                f(d)
            merged = job.method.combine(base, ds, tp.weights, **tp.params)
        else:
            merged = job.method(base, ds, tp.weights, **tp.params, generators=thinning.generators(job, name, tp))
        del ds
        target = out if block is None else out[block[0]:block[1]]
        if merged.dtype == compute != target.dtype and merged.shape == target.shape and merged.is_contiguous():
            # into float32 in place, then one rounding to the output dtype: the bits of add(out=target), faster
            target.copy_(torch.add(base, merged, alpha=tp.scale, out=merged))
        else:
            torch.add(base, merged, alpha=tp.scale, out=target)
    return _with_base_rows(job, name, read, out)


def _with_base_rows(job: MergeJob, name: str, read: Callable, out):
    """``out`` itself, or for a tensor merged on the shared vocabulary rows, the base's whole tensor
    with those rows replaced (the rows past them stay the base's)."""
    rows = job.plan.vocab_rows.get(name)
    if rows is None:
        return out
    full = read(job.reference, name).to(job.device).to(out.dtype, copy=True)
    full[:rows] = out
    return full


def _sum_inputs(job: MergeJob, name: str, read: Callable, terms: list, blocks, out, buffer):
    """Fill ``out`` block by block with ``Σ c·input`` over ``terms`` (:func:`paw.merge.schedule.sum_terms`):
    each input added once into ``buffer`` in the compute dtype, which holds it exactly, and the sum rounded
    once to the output dtype. No Δ is formed. A non-finite input makes the sum, and so the output,
    non-finite (a zero weight included: 0 × Inf is NaN): the check of the output in
    :func:`merged_tensors` finds it and names the input."""
    for block in blocks:
        target = out if block is None else out[block[0]:block[1]]
        acc = buffer[:target.numel()].view(target.shape)
        for k, (ckpt, c) in enumerate(terms):
            x = read(ckpt, name, block).to(job.device)
            if k == 0:
                acc.copy_(x)
                if c != 1.0:
                    acc.mul_(c)
            else:
                acc.add_(x, alpha=c)
        target.copy_(acc)


def _merge_union(job: MergeJob, name: str):
    """A vocabulary tensor of a union merge: every input laid out on the union ids, then merged whole."""
    import torch

    opts, ref = job.options, job.reference
    tp = job.params(name)
    out_dtype = getattr(torch, ref.dtype(name) if opts.dtype == "auto" else opts.dtype)
    members = _members(opts, ref, job.models)
    laid = permuted_matrices(job.union, [c[name].to(job.device).float() for c in members],
                             overrides=opts.token_overrides, base_given=opts.base is not None)
    base = laid[0]
    ds = [torch.sub(m, base) for m in (laid if opts.base is None else laid[1:])]
    if not opts.allow_nonfinite and not all(all_finite(d) for d in ds):
        _refuse_nonfinite(job, name, None)
    merged = job.method(base, ds, tp.weights, **tp.params, generators=thinning.generators(job, name, tp))
    return torch.add(base, merged, alpha=tp.scale).to(out_dtype)


def _refuse_nonfinite(job: MergeJob, name: str, tensor) -> None:
    """Name the input that brought NaN/Inf into ``name`` (``tensor``: the result, None while reading
    inputs); refuse unless ``allow_nonfinite``."""
    if job.options.allow_nonfinite:
        job.nonfinite[name] = nonfinite(tensor)
        return
    sources = [c for c in [job.reference, *job.models] if name in c and nonfinite(c[name])]
    where = "; ".join(f"model {c.name} ({c.path}) holds {nonfinite(c[name])}" for c in sources) or \
        "no input holds any: the weights or --scale overflow"
    result = "" if tensor is None else f", and the merge would hold {nonfinite(tensor)}"
    raise NonFinite(f"tensor {name!r}: NaN/Inf value(s): {where}{result}; nothing was written; "
                    "pass --allow-nonfinite to write it anyway")


def manifest(job: MergeJob, command: str) -> dict[str, Any]:
    """The ``paw_merge.json`` record: method, parameters, weights, norms, seed and inputs."""
    opts = job.options
    used = {k: getattr(opts, k) for k in ("density", "drop_rate", "gamma") if k in job.method.params}
    return {
        "paw_version": __version__,
        "command": command,
        "inputs": {"base": describe_ref(opts.base) if opts.base else None,
                   "models": [describe_ref(m) for m in opts.models]},
        "method": job.method.name,
        "parameters": used,
        "mode": None if opts.weights is not None else opts.mode,
        "beta": opts.beta, "alpha": opts.alpha, "scale": opts.scale,
        "seed": opts.seed,
        "models": [{"name": name, "l2": norm, "weight": weight} for name, norm, weight in job.table()],
        "weights": job.weights,
        "norms": job.norms, "norm_source": job.norm_source,
        "dtype": opts.dtype, "vocab_policy": opts.vocab_policy,
        "copied_from_base": job.plan.copy,
        "vocab_rows_merged": job.plan.vocab_rows,
        "options": {k: v for k, v in asdict(opts).items()
                    if k not in ("overwrite", "device", "rules", "slices", "token_overrides")},
        "mergekit_config": None if opts.rules is None else opts.rules.source,
        "union_vocabulary": None if job.union is None else {
            "rows": job.union.rows, "tokens": len(job.union.tokens),
            "added": {t["content"]: _members(job.options, job.reference, job.models)[
                job.union.from_member[t["content"]]].name for t in job.union.new}},
        "nonfinite_written": dict(job.nonfinite),  # tensor -> NaN/Inf count, only with allow_nonfinite
    }


def execute(job: MergeJob, *, command: str | None = None) -> Path:
    """Stream the merge into ``options.output`` (atomic: nothing is left behind on failure).

    Without ``command`` the manifest records the library call ``paw.merge.pipeline.merge(options=...)``.
    """
    opts = job.options
    command = command or call_text(merge, {"options": opts})
    config = job.reference.config if opts.slices else None  # sliced: the new layer count
    if job.union is not None and job.reference.config is not None:
        config = _with_vocab_size(config or job.reference.config, job.union.rows)
    if opts.dtype != "auto" and job.reference.config is not None:  # say the new dtype to from_pretrained
        config = {**(config or job.reference.config), "dtype": opts.dtype}
        if "torch_dtype" in config:
            config["torch_dtype"] = opts.dtype
    extra: dict[str, Any] = {MANIFEST: lambda: manifest(job, command)}  # after the tensors
    if job.union is not None:
        extra.update(union_tokenizer_files(job.reference.path, job.union.new, chat_template=opts.chat_template))
    elif opts.chat_template is not None:
        tokenizer = opts.tokenizer_from or job.reference.path
        extra["tokenizer_config.json"] = lambda: with_chat_template(tokenizer, opts.chat_template)
    def card():  # after the tensors, as the manifest (mergekit writes a card too)
        return model_card(manifest(job, command), name=Path(opts.output).name)

    # three threads in step: one reads the next blocks, this one merges, one writes the last tensor
    with ReadAhead(schedule.read_plan(job, BLOCK_ELEMENTS)) as ahead:
        return write_checkpoint(opts.output, merged_tensors(job, ahead.get), config=config,
                                copy_from=job.reference.path, tokenizer_from=opts.tokenizer_from,
                                max_shard_size=opts.max_shard_size, overwrite=opts.overwrite,
                                allow_nonfinite=opts.allow_nonfinite, extra_files=extra, card=card,
                                layout=schedule.layout(job), overlap=True)


def _with_vocab_size(config: dict, rows: int) -> dict:
    out = dict(config)
    if isinstance(out.get("text_config"), dict) and "vocab_size" in out["text_config"]:
        out["text_config"] = {**out["text_config"], "vocab_size": rows}
    out["vocab_size"] = rows
    return out


def merge(options: MergeOptions, *, command: str | None = None) -> Path:
    """:func:`prepare` then :func:`execute`: the whole merge as one library call."""
    with input_scope():  # nothing this merge reads may be written over
        return execute(prepare(options), command=command)
