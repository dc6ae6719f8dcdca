"""The transfer quality benchmark: does a transferred LoRA keep its gain, on which targets, by how much.

Pipeline (:func:`run_benchmark`):

1. corpora and a byte-level BPE tokenizer (:func:`paw.zoo.train_tokenizer`), a small Llama source
   pretrained from scratch (:mod:`paw.bench.lm`);
2. the targets of :data:`paw.bench.targets.TARGETS` built from it (upgrade, pruned, grown,
   distilled, tokenizer, unrelated);
3. per seed and task (:data:`paw.bench.tasks.TASKS`): a LoRA trained on the source
   (:func:`paw.evaluate.train.train_lora`), then on every target *and on the source itself*: the
   base, the adapter moved by every transfer method (:func:`paw.transfer.transfer_lora`, ``auto``
   included; a refusal counts as the base), a random adapter with the same per-module ``||ΔW||``,
   and a LoRA trained directly on that base (the ceiling). Every condition is scored item by item
   on the same held-out items, so the recovered fraction ``(t - b) / (d - b)`` gets a paired
   bootstrap (:mod:`paw.bench.stats`). ``facts`` items asked in other words
   (:data:`paw.bench.tasks.REWORDED`) are scored in the same pass and reported as ``facts:reworded``.

Transferred adapters are merged into a copy of the base weights (``W + s B A``), which is what PEFT
computes; the folders ``paw transfer-lora`` writes are tested to load in PEFT by its own tests.
"""

from __future__ import annotations

import multiprocessing
import pickle
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paw.bench import conditions
from paw.bench.lm import Schedule, held_out_loss, token_stream, train_lm
from paw.bench.options import BenchOptions
from paw.bench.outcomes import TransferStatus, first_line
from paw.bench.report import write_results
from paw.bench.results import BUILD, SOURCE, merge_results, summarize
from paw.bench.targets import TARGETS, Workshop
from paw.bench.tasks import TASKS, build_corpora, common_words, missing_sets
from paw.bench.testbed import (
    Base,
    adapter_deltas,
    applied,
    merged_copy,
    random_deltas,
    score_items,
    train_adapter,
)
from paw.data import sample_texts
from paw.device import resolve_device
from paw.errors import PawError, Refused, Skipped
from paw.io.atomic import atomic_dir, check_output, work_folder
from paw.io.checkpoint import open_checkpoint
from paw.io.json_file import read_json
from paw.io.manifest import records_call
from paw.io.vocab_map import read_vocab_map
from paw.knobs import RunOptions
from paw.progress import status
from paw.transfer import method_names, transfer_lora
from paw.transfer.summary import LayerPairing, TransferSummary
from paw.vocab.options import TransplantOptions
from paw.vocab.pipelines import transplant_tokenizer
from paw.zoo import build_model, save_model, train_tokenizer

__all__ = ["Base", "Transfer", "adapter_deltas", "applied", "benchmark_to_folder", "build_bases", "pool_to_folder",
           "random_deltas", "run_benchmark", "score_items", "train_adapter", "transfer"]

# ------------------------------------------------------------------------------------ models

def _source_model(opts: BenchOptions, vocab: int):
    return build_model("llama", seed=opts.model_seed, init_std=0.02, hidden_size=opts.hidden_size,
                       num_layers=opts.num_layers, num_heads=opts.num_heads, num_kv_heads=opts.num_kv_heads,
                       intermediate_size=opts.intermediate_size, vocab_size=vocab,
                       max_position_embeddings=max(256, 2 * opts.seq_len))


def _transplanter(workdir: Path, source_folder: Path, device) -> Callable:
    """``(model, tokenizer, new_tokenizer) -> (model, how)`` through :func:`paw.vocab.pipelines.transplant_tokenizer`."""

    def transplant(model, tokenizer, new_tokenizer):
        from transformers import AutoModelForCausalLM

        tok_dir, out = workdir / "tokenizer-new", workdir / "models" / "tokenizer-transplanted"
        with atomic_dir(tok_dir, overwrite=True) as tmp:
            new_tokenizer.save_pretrained(tmp)
        command = f"paw transplant-tokenizer --model {source_folder} --tokenizer {tok_dir} --output {out}"
        result = transplant_tokenizer(TransplantOptions(model=source_folder, tokenizer=tok_dir, output=out, check=False),
                                      RunOptions(device=str(device), overwrite=True), command=command)
        # the mapping as shipped in the model folder (weights rounded as users get them), not the in-memory one
        return AutoModelForCausalLM.from_pretrained(result.output).float().eval(), {
            "command": command, "vocab_map": read_vocab_map(result.output / "paw_vocab_map.json")}

    return transplant


def build_bases(opts: BenchOptions, workdir: Path, *, progress: bool = True) -> tuple[list[Base], dict]:
    """Train the source and build every requested target; returns the bases (source first) and notes."""
    device = resolve_device(opts.device)
    t0 = time.perf_counter()
    folder = Path(opts.commonsense) if opts.commonsense else None
    source_texts, shifted_texts, corpus = build_corpora(folder, seed=opts.model_seed, embedded=sample_texts("en"))
    tokenizer = train_tokenizer(source_texts, opts.vocab_size)
    stream = token_stream(tokenizer, source_texts)
    held_out, stream = stream[-8 * opts.seq_len * 8:], stream[:-8 * opts.seq_len * 8]
    schedule = Schedule(steps=opts.pretrain_steps, batch_size=opts.batch_size, seq_len=opts.seq_len, lr=opts.lr)
    source = _source_model(opts, len(tokenizer)).to(device)
    status(f"pretraining the source ({sum(p.numel() for p in source.parameters()):,} parameters, "
           f"{schedule.steps} steps) on {corpus}")
    losses = train_lm(source, stream, schedule, seed=opts.model_seed, device=device, progress=progress)
    src_folder = save_model(source, workdir / "models" / SOURCE, tokenizer=tokenizer)
    notes = {"corpus": corpus, "corpus_fallback": bool(missing_sets(folder)), "corpus_texts": [len(source_texts), len(shifted_texts)],
             "corpus_tokens": int(len(stream)), "tokenizer_vocab": len(tokenizer),
             "source": {"parameters": sum(p.numel() for p in source.parameters()), "final_train_loss": losses[-1],
                        "held_out_loss": held_out_loss(source, held_out, seq_len=opts.seq_len)},
             "seconds": {"source": time.perf_counter() - t0}, "targets": {}}
    bases = [Base(SOURCE, source, tokenizer, src_folder, notes["source"])]
    ws = Workshop(source=source, tokenizer=tokenizer, source_stream=stream, shifted_texts=shifted_texts,
                  source_texts=source_texts, pretrain=schedule, heal_fraction=opts.heal_fraction,
                  seed=opts.model_seed, device=device, progress=progress,
                  transplant=_transplanter(workdir, src_folder, device))
    for name in opts.targets:
        t1 = time.perf_counter()
        status(f"building target '{name}'")
        try:
            built = TARGETS[name](ws)
        except Skipped as err:
            notes["targets"][name] = {"skipped": str(err)}
            continue
        info = dict(built.info)
        vocab_map = info.pop("transplant", {}).pop("vocab_map", None) if "transplant" in info else None
        target_held_out = token_stream(built.tokenizer, source_texts[-200:])
        info.update(parameters=sum(p.numel() for p in built.model.parameters()),
                    held_out_loss=held_out_loss(built.model, target_held_out, seq_len=opts.seq_len))
        folder_t = save_model(built.model, workdir / "models" / name, tokenizer=built.tokenizer)
        bases.append(Base(name, built.model.eval(), built.tokenizer, folder_t, info, vocab_map))
        notes["targets"][name] = info
        notes["seconds"][name] = time.perf_counter() - t1
    return bases, notes


# ------------------------------------------------------------------------------------ transfers

def _methods(opts: BenchOptions) -> list[str]:
    names = list(opts.methods) if opts.methods else method_names()
    unknown = [m for m in names if m not in method_names()]
    if unknown:
        raise PawError(f"unknown transfer method {unknown[0]!r}; choose from {', '.join(method_names())}")
    return names


@dataclass(frozen=True)
class Transfer:
    """One transfer method's outcome on one base: its status, the moved adapter (OK only), why not."""

    status: TransferStatus
    adapter: Any = None
    summary: TransferSummary | None = None        # the transfer report's summary (OK only)
    layers: LayerPairing | None = None            # its layer pairing (OK only)
    warnings: list[str] = field(default_factory=list)
    reason: str = ""
    refusal: str = ""                             # the whole refusal message (REFUSED only)

    def row(self) -> dict[str, Any]:
        """What ``results.json`` keeps: the summary with the pairing and warnings, or the refusal."""
        if self.summary is None:
            return {"message": self.refusal} if self.status is TransferStatus.REFUSED else {}
        return dict(asdict(self.summary), layers=self.layers.how, pairs=self.layers.pairs, warnings=self.warnings)


def transfer(adapter, source: Base, target: Base, method: str, device) -> Transfer:
    """Move ``adapter`` from ``source`` to ``target`` with ``method``; a refusal or a method that cannot
    apply is an outcome to score, not an error."""
    try:
        moved, report = transfer_lora(adapter, open_checkpoint(source.folder), open_checkpoint(target.folder),
                                      method=method, vocab_map=target.vocab_map, device=device)
    except Refused as err:  # auto judged the target unrelated
        return Transfer(TransferStatus.REFUSED, refusal=str(err), reason=first_line(err))
    except PawError as err:  # NotApplicable, or another reason this method cannot run on this pair
        return Transfer(TransferStatus.NOT_APPLICABLE, reason=first_line(err))
    return Transfer(TransferStatus.OK, moved, TransferSummary.from_report(report), LayerPairing.from_report(report),
                    report["warnings"])


def _evaluate_base(base: Base, source: Base, adapter, direct_adapter, task, opts: BenchOptions, seed: int,
                   methods: list[str], device) -> dict:
    """Outcomes of every condition on ``base`` for one task and seed."""
    out: dict[str, Any] = {"outcomes": {}, "status": {}, "reasons": {}, "summaries": {}}
    items = task.scored  # the held-out items, then the same facts reworded (split by _views)
    out["outcomes"]["base"] = base_outcome = score_items(base.model, base.tokenizer, items)
    with applied(base.model, adapter_deltas(direct_adapter)):
        out["outcomes"]["direct"] = score_items(base.model, base.tokenizer, items)
    norms = {k: float(d.norm()) for k, d in adapter_deltas(adapter).items()}
    with applied(base.model, random_deltas(norms, base.model, rank=opts.lora_rank, seed=seed + 977)):
        out["outcomes"]["random"] = score_items(base.model, base.tokenizer, items)
    for method in methods:
        moved = transfer(adapter, source, base, method, device)
        out["status"][method] = moved.status.value
        out["summaries"][method] = moved.row()
        if moved.reason:
            out["reasons"][method] = moved.reason
        if moved.status is TransferStatus.OK:
            with applied(base.model, adapter_deltas(moved.adapter)):
                out["outcomes"][method] = score_items(base.model, base.tokenizer, items)
        elif moved.status is TransferStatus.REFUSED:  # the user keeps the base: score it as such
            out["outcomes"][method] = list(base_outcome)
    conditions.run(out, base, source, adapter, task, opts, seed, score_items, device)  # e.g. distillation rows
    return out


def run_benchmark(opts: BenchOptions, workdir: str | Path, *, progress: bool = True) -> dict:
    """Run everything; returns the results dict that :func:`paw.bench.report.write_results` writes."""
    import torch

    opts.check()
    methods = _methods(opts)
    workdir = Path(workdir)
    torch.manual_seed(opts.model_seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(opts.threads)
    try:
        return _run(opts, methods, workdir, progress)
    finally:
        torch.set_num_threads(threads)


@records_call
def benchmark_to_folder(opts: BenchOptions, output: str | Path, *, workdir: str | Path | None = None,
                        overwrite: bool = False, command: str | None = None, progress: bool = True) -> dict:
    """:func:`run_benchmark`, then ``output/`` with results.json, results.md, recovered.png and kept.png.

    The models live in ``workdir`` (kept) or in a temporary folder removed afterwards.
    """
    check_output(output, overwrite=overwrite)
    with tempfile.TemporaryDirectory(prefix="paw-bench-") as tmp:
        results = run_benchmark(opts, work_folder(workdir) if workdir else tmp, progress=progress)
    write_results(output, results, overwrite=overwrite, command=command)
    return results


@records_call
def pool_to_folder(folders: list[str | Path], output: str | Path, *, overwrite: bool = False,
                   command: str | None = None) -> dict:
    """Finished runs (their ``results.json``) pooled by :func:`paw.bench.results.merge_results` into ``output/``."""
    check_output(output, overwrite=overwrite)
    results = merge_results([read_json(Path(folder) / "results.json") for folder in folders])
    write_results(output, results, overwrite=overwrite, command=command)
    return results


def _run(opts: BenchOptions, methods: list[str], workdir: Path, progress: bool) -> dict:
    device = resolve_device(opts.device)
    t0 = time.perf_counter()
    bases, notes = build_bases(opts, workdir, progress=progress)
    words = common_words(build_corpora(Path(opts.commonsense) if opts.commonsense else None,
                                       seed=opts.model_seed, embedded=sample_texts("en"))[0])
    raw: dict[str, dict[str, dict]] = {}     # task -> base -> per-seed results
    lora_notes: dict[str, Any] = {}
    t_models = time.perf_counter()
    units = [(seed, task_name) for seed in opts.seeds for task_name in opts.tasks]
    context = _Context(opts, methods, bases, words, device)
    for (seed, _), (views, fits) in zip(units, _map_units(context, units), strict=True):
        lora_notes.update(fits)
        for view, results in views.items():  # 'facts', and 'facts:reworded' scored with the same adapters
            for base_name, result in results.items():
                raw.setdefault(view, {}).setdefault(base_name, {})[BUILD * opts.model_seed + seed] = result
    notes["seconds"]["loras_and_evaluation"] = time.perf_counter() - t_models
    notes["seconds"]["total"] = time.perf_counter() - t0
    return summarize(raw, asdict(opts) | {"methods": methods + conditions.chosen(opts)}, notes, lora_notes)


@dataclass(frozen=True)
class _Context:
    """What every (seed, task) unit reads; the bases are built once, before any unit runs."""

    opts: BenchOptions
    methods: list[str]
    bases: list[Base]
    words: list[str]
    device: Any


def _views(task, result: dict) -> dict[str, dict]:
    """One base's result over ``task.scored`` as one result per reported task (outcomes and clusters split)."""
    split = {condition: task.views(outcome) for condition, outcome in result["outcomes"].items()}
    views = task.views([0] * len(task.scored))
    return {view: {**result, "outcomes": {c: parts[view][0] for c, parts in split.items()}, "clusters": clusters}
            for view, (_, clusters) in views.items()}


def _unit(context: _Context, seed: int, task_name: str) -> tuple[dict[str, dict[str, dict]], dict[str, Any]]:
    """One seed and task: the source LoRA, then every base's outcomes; ``({view: {base: result}}, LoRA fit notes)``.

    A view is a task as reported: the task itself and, for ``facts``, its reworded questions.
    """
    opts, bases = context.opts, context.bases
    source = bases[0]
    task = TASKS[task_name](opts.items, seed=seed, words=context.words)
    status(f"seed {seed}, task {task_name}: training the source LoRA")
    adapter, fit = train_adapter(source, task.train, opts, seed)
    fits, results = {f"{task_name}/{seed}/source": fit}, {}
    for base in bases:
        status(f"seed {seed}, task {task_name}: {base.name}")
        if task.known and base.name != SOURCE:  # a target that learned part of the task in its own training
            base, fits[f"{task_name}/{seed}/{base.name}/known"] = knowing(base, task, opts, seed)
        if base.name == SOURCE:
            direct = adapter
        else:
            direct, fits[f"{task_name}/{seed}/{base.name}"] = train_adapter(base, task.train, opts, seed)
        results[base.name] = _evaluate_base(base, source, adapter, direct, task, opts, seed, context.methods,
                                            context.device)
    views: dict[str, dict[str, dict]] = {}
    for base_name, result in results.items():
        for view, part in _views(task, result).items():
            views.setdefault(view, {})[base_name] = part
    return views, fits


def knowing(base: Base, task, opts: BenchOptions, seed: int) -> tuple[Base, dict]:
    """``base`` after its own training on ``task.known``: a LoRA trained with the bench's recipe and merged
    into a copy, saved beside the base's folder (transfers read the target from disk); ``(Base, fit)``."""
    adapter, fit = train_adapter(base, task.known, opts, seed + KNOWN_SEED)
    model = merged_copy(base.model, adapter)
    folder = save_model(model, base.folder.parent / f"{base.name}+{task.name}-{seed}", tokenizer=base.tokenizer)
    info = {**base.info, "knows": f"{len(task.known)} {task.name} items from its own training"}
    return Base(base.name, model.eval(), base.tokenizer, folder, info, base.vocab_map), fit


KNOWN_SEED = 7919  # the targets' own training draws its batches apart from the source LoRA's


_CONTEXT: _Context | None = None   # what a worker reads: copied by fork, or unpickled by _spawned


def start_method(*, gpu_visible: bool) -> str:
    """How ``--jobs`` starts its workers: ``'fork'`` where that is safe, else ``'spawn'``.

    A fork costs nothing and copies the parent's models page by page as they are written. Where
    PyTorch sees a GPU a fork fails once the parent has run autograd (it trained every base model:
    the engine then holds device threads a child cannot inherit), and some platforms cannot fork;
    there each worker is spawned, a fresh interpreter that imports torch (seconds) and gets the
    context from :func:`_spawned`.

    >>> start_method(gpu_visible=True)
    'spawn'
    """
    if gpu_visible or "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    return "fork"


def _spawned(context: bytes, filters: list) -> None:
    """Give a spawned worker what a forked one inherits: its own copy of the context, the parent's warning
    filters (the CLI silences library FutureWarnings) and torch's generator seeded as
    :func:`run_benchmark` seeds the parent (every unit seeds its own work; this only keeps a worker from
    starting at a random state).

    The context comes as plain pickle bytes, not through multiprocessing's own pickler: that one moves
    every tensor into memory shared by the parent and every worker, and :func:`applied` adds an adapter
    into a base's weights in place, so one worker scored with another's adapter merged in. That is why
    the spawned workers first tried for issue 53 gave other scores than ``--jobs 1``.
    """
    import torch

    global _CONTEXT
    warnings.filters[:] = filters
    _CONTEXT = pickle.loads(context)
    torch.manual_seed(_CONTEXT.opts.model_seed)


def _worker(unit: tuple[int, str]):
    import torch

    torch.set_num_threads(_CONTEXT.opts.threads)
    return _unit(_CONTEXT, *unit)


def _map_units(context: _Context, units: list[tuple[int, str]]):
    """Results of every unit, in order: in this process, or in ``opts.jobs`` worker processes.

    Every unit seeds its own work and every worker holds its own copy of the bases, so the results
    do not depend on how the units are spread. On a GPU the workers share it, each with its own
    CUDA context and copy of the (small) models.
    """
    import torch

    global _CONTEXT
    jobs = min(context.opts.jobs, len(units))
    if jobs == 1:
        return [_unit(context, *u) for u in units]
    method = start_method(gpu_visible=torch.cuda.is_available())
    where = "the CPU" if context.device.type == "cpu" else f"{context.device}, shared"
    status(f"--jobs {jobs}: {len(units)} (seed, task) units over {jobs} {method}ed worker processes on {where}")
    if method == "spawn":
        setup = {"initializer": _spawned, "initargs": (pickle.dumps(context), list(warnings.filters))}
        with multiprocessing.get_context("spawn").Pool(jobs, **setup) as pool:
            return pool.map(_worker, units, chunksize=1)
    _CONTEXT = context
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            return pool.map(_worker, units, chunksize=1)
    finally:
        _CONTEXT = None
