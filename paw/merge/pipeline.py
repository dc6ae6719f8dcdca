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
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from paw import __version__
from paw.errors import PawError
from paw.io.atomic import check_output
from paw.io.checkpoint import Checkpoint, open_checkpoint, read_json
from paw.io.manifest import describe_input
from paw.io.writer import write_checkpoint
from paw.merge.methods import MergeMethod, get_method, tensor_seed
from paw.merge.norms import task_vector_norms
from paw.merge.options import MergeOptions
from paw.merge.plan import MergePlan, plan_merge
from paw.merge.weights import weights_from_norms
from paw.progress import track

MANIFEST = "paw_merge.json"
BLOCK_ELEMENTS = 1 << 20  # entries per step of an elementwise method on a large tensor (4 MB in float32)


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

    def table(self) -> list[tuple[str, float | None, float]]:
        """``(model name, L2 norm or None, weight)`` per model, for the table printed before merging."""
        norms = self.norms or [None] * len(self.models)
        return [(m.name, n, w) for m, n, w in zip(self.models, norms, self.weights, strict=True)]


def prepare(options: MergeOptions) -> MergeJob:
    """Validate options and inputs, plan the tensors, find norms and weights. Raises PawError."""
    from paw.device import resolve_device

    options.check()
    method = get_method(options.method)
    if options.base is None and method.needs_base:
        raise PawError(f"--base is required for method {method.name} (only 'linear' works without one)")
    check_output(options.output, overwrite=options.overwrite)
    device = resolve_device(options.device)
    models = [open_checkpoint(m) for m in options.models]
    reference = open_checkpoint(options.base) if options.base is not None else models[0]
    plan = plan_merge(reference, models, vocab_policy=options.vocab_policy)
    norms, source = _norms(options, reference, models, plan, device)
    if options.weights is not None:
        weights = [float(w) for w in options.weights]
    else:
        weights = weights_from_norms(norms, options.mode, beta=options.beta, alpha=options.alpha) \
            if norms is not None else [1.0 / len(models)] * len(models)
    if method.normalise_weights and abs(sum(weights)) < 1e-12:
        raise PawError(f"--weights sum to zero; method {method.name} divides by their sum")
    return MergeJob(options, method, reference, models, plan, norms, source, weights, device)


def _norms(options: MergeOptions, base: Checkpoint, models: list[Checkpoint], plan: MergePlan,
           device) -> tuple[list[float] | None, str]:
    if options.l2_norms is not None:
        return [float(n) for n in options.l2_norms], "given"
    if options.stats_dir is not None:
        return [_summary_norm(Path(options.stats_dir), m.name) for m in models], "stats-dir"
    if options.weights is not None or options.mode == "equal":
        return None, "not needed"
    return task_vector_norms(base, models, plan.merge, device=device), "computed"


def _summary_norm(stats_dir: Path, model_name: str) -> float:
    path = stats_dir / model_name / "summary.json"
    if not path.exists():
        raise PawError(f"no task-vector summary for model {model_name!r} (run paw task-vectors --outdir "
                       f"{stats_dir}, or drop --stats-dir to compute the norms)", path=path)
    value = read_json(path).get("global_l2")
    if not isinstance(value, (int, float)):
        raise PawError("no numeric 'global_l2' in this summary", path=path)
    return float(value)


def merged_tensors(job: MergeJob) -> Iterator[tuple[str, Any]]:
    """Yield ``(name, tensor)`` for every tensor of the base, in its order: merged, row-merged or copied."""
    import torch

    opts, ref = job.options, job.reference
    merge = set(job.plan.merge) | set(job.plan.vocab_rows)
    params = dict(density=opts.density, drop_rate=opts.drop_rate, gamma=opts.gamma)
    for name in track(job.plan.order, f"merging ({job.method.name})"):
        if name not in merge:
            yield name, ref[name]
            continue
        out_dtype = getattr(torch, ref.dtype(name) if opts.dtype == "auto" else opts.dtype)
        compute = torch.float64 if ref.dtype(name) == "float64" else torch.float32
        rows = job.plan.vocab_rows.get(name)
        shape = ref.shape(name)
        out = torch.empty((rows, *shape[1:]) if rows is not None else shape, dtype=out_dtype, device=job.device)
        for block, get in _blocks(job, name, rows):
            base = get(0).to(compute)
            # bf16 - f32 promotes inside one kernel: no float32 copy of each model is ever made
            deltas = [torch.sub(get(i), base).to(compute) for i in range(1, len(job.models) + 1)]
            if job.method.random:
                params["generators"] = [torch.Generator(device=job.device).manual_seed(
                    tensor_seed(opts.seed, name, i)) for i in range(len(deltas))]
            merged = job.method(base, deltas, job.weights, **params)
            del deltas
            # base + scale * merged, cast to the output dtype, in one pass
            torch.add(base, merged, alpha=opts.scale, out=out[block] if out.ndim else out)
        if rows is not None:  # rows past the shared vocabulary stay the base's
            full = _load(ref, name, None, job.device).to(out_dtype, copy=True)
            full[:rows] = out
            out = full
        yield name, out


def _blocks(job: MergeJob, name: str, rows: int | None):
    """Yield ``(index, get)`` steps over one tensor; ``get(i)`` gives input i (0 = base) at ``index``.

    Methods that need the whole tensor (TIES ranks, DARE draws) get one step, and each input is read
    when asked for and dropped after its subtraction. Elementwise methods on tensors above
    :data:`BLOCK_ELEMENTS` read the inputs once in their stored dtype and walk them in blocks of rows:
    float32 temporaries then stay block-sized (cache-resident, a few MB), not tensor-sized.
    """
    ckpts = [job.reference, *job.models]
    shape = job.reference.shape(name)
    first = rows or (shape[0] if shape else 1)
    numel = first * math.prod(shape[1:])
    if not job.method.elementwise or numel <= BLOCK_ELEMENTS or not shape:
        yield slice(None), lambda i: _load(ckpts[i], name, rows, job.device)
        return
    raw = [_load(c, name, rows, job.device) for c in ckpts]
    step = max(1, BLOCK_ELEMENTS * first // numel)
    for start in range(0, first, step):
        yield slice(start, start + step), lambda i, s=slice(start, start + step): raw[i][s]


def _load(ckpt: Checkpoint, name: str, rows: int | None, device):
    """One tensor in its stored dtype, on ``device``, first ``rows`` rows only if given."""
    t = ckpt[name]
    return (t if rows is None else t[:rows]).to(device)


def manifest(job: MergeJob, command: str) -> dict[str, Any]:
    """The ``paw_merge.json`` record: method, parameters, weights, norms, seed and inputs."""
    opts = job.options
    used = {k: getattr(opts, k) for k in ("density", "drop_rate", "gamma") if k in job.method.params}
    return {
        "paw_version": __version__,
        "command": command,
        "inputs": {"base": describe_input(opts.base) if opts.base else None,
                   "models": [describe_input(m) for m in opts.models]},
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
        "options": {k: v for k, v in asdict(opts).items() if k not in ("overwrite", "device")},
    }


def execute(job: MergeJob, *, command: str | None = None) -> Path:
    """Stream the merge into ``options.output`` (atomic: nothing is left behind on failure).

    Without ``command`` the manifest records the library call ``paw.merge.pipeline.merge(options=...)``.
    """
    from paw.io.manifest import call_text

    opts = job.options
    command = command or call_text(merge, {"options": opts})
    config = None
    if opts.dtype != "auto" and job.reference.config is not None:  # say the new dtype to from_pretrained
        config = {**job.reference.config, "dtype": opts.dtype}
        if "torch_dtype" in config:
            config["torch_dtype"] = opts.dtype
    return write_checkpoint(opts.output, merged_tensors(job), config=config, copy_from=job.reference.path,
                            max_shard_size=opts.max_shard_size, overwrite=opts.overwrite,
                            extra_files={MANIFEST: manifest(job, command)})


def merge(options: MergeOptions, *, command: str | None = None) -> Path:
    """:func:`prepare` then :func:`execute`: the whole merge as one library call."""
    return execute(prepare(options), command=command)
