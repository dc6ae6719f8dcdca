"""``paw bench real``: PAW on two real pretrained models, SmolLM2-135M-Instruct and Gemma-3-270M, on CPU.

The models are the folders ``scripts/real_models.py`` writes (bf16 safetensors dequantized from the
GGUF files that ship in packages). Four parts, each optional (``parts``):

1. ``eval``: multiple-choice accuracy of both models on ARC-Easy, ARC-Challenge, OpenBookQA, PIQA,
   BoolQ and Winogrande (a fixed seeded subset of each set), next to published figures for the
   unquantized models (:data:`PUBLISHED`);
2. ``tokenizers``: the two tokenizers compared (:func:`paw.vocab.pipelines.analyze_tokenizers`)
   and Gemma's vocabulary aligned to SmolLM2's (the map transfers need);
3. ``transfer``: a LoRA trained on SmolLM2 for the invented-facts task, moved to Gemma-3 by every
   transfer method (``auto`` included) and by ``distill`` (a Gemma LoRA taught on the task's
   label-free prompts to continue them as SmolLM2 + LoRA does), scored item by item against Gemma's base, a random
   adapter of the same norms and a LoRA trained on Gemma itself (the ceiling). ``recovered`` is
   ``(t - b) / (d - b)`` against that ceiling, ``kept`` is ``(t - b) / (s_lora - s_base)`` against
   the source's own gain; both with a paired bootstrap over the task's clusters (:mod:`paw.bench.stats`).
   Every condition is also scored on the same facts asked in phrasings never used as a training
   or distillation prompt (``facts:reworded``, :data:`paw.bench.tasks.REWORDED`), reported beside;
4. ``merge``: task vectors of SmolLM2 against two LoRA-merged fine-tunes (two sets of invented
   facts) and merges of the two, scored on both sets (kept = share of each fine-tune's gain).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from paw.bench.options import BenchOptions
from paw.bench.outcomes import TransferStatus, first_line
from paw.bench.real.options import GEMMA, SMOL, RealOptions
from paw.bench.real.tasks import part_tasks
from paw.bench.stats import accuracy, kept, recovered
from paw.bench.tasks import REWORDED, TASKS, common_words, reworded_name
from paw.bench.testbed import (
    Base,
    adapter_deltas,
    applied,
    load_model,
    random_deltas,
    score_items,
    train_adapter,
    without_adapter,
)
from paw.data import sample_texts
from paw.errors import PawError, Refused
from paw.evaluate.formats import read_items
from paw.evaluate.mc import evaluate
from paw.io.checkpoint import open_checkpoint
from paw.io.manifest import write_json
from paw.io.tokenizer import open_tokenizer
from paw.io.writer import write_checkpoint
from paw.knobs import RunOptions
from paw.merge.options import MergeOptions
from paw.merge.pipeline import merge
from paw.progress import status
from paw.taskvec.pipeline import task_vectors
from paw.taskvec.report import summary as task_vector_summary
from paw.transfer import method_names, transfer_lora
from paw.transfer.distill import LM, distill_lora
from paw.transfer.summary import DistillSummary, TransferSummary
from paw.vocab.options import AlignOptions, AnalyzeOptions
from paw.vocab.pipelines import align_vocab, analyze_tokenizers

# set name -> file stem in <data>/raw (lm-eval's usual splits: test where labelled, else validation)
EVAL_SETS = {"ARC-Easy": "arc-easy_test", "ARC-Challenge": "arc-challenge_test", "OpenBookQA": "openbookqa_test",
             "PIQA": "piqa_validation", "BoolQ": "boolq_validation", "Winogrande": "winogrande_validation"}
# Published figures for the unquantized models, in percent: (value, metric, shots, source)
_SMOL_SRC = ("lm-eval 0-shot of the unquantized HuggingFaceTB/SmolLM2-135M-Instruct, a third-party run: the "
             "'Baseline' column of the model card of lldois/SmolLM2-135M-Reasoning-SLERP-Champion")
_GEMMA_SRC = "model card of google/gemma-3-270m, table of the pre-trained (PT) model"
PUBLISHED: dict[str, dict[str, tuple[float, str, str, str]]] = {
    SMOL: {"ARC-Easy": (54.12, "acc", "0-shot", _SMOL_SRC), "ARC-Challenge": (27.73, "acc_norm", "0-shot", _SMOL_SRC),
           "PIQA": (66.92, "acc_norm", "0-shot", _SMOL_SRC)},
    GEMMA: {"ARC-Easy": (57.7, "acc", "0-shot", _GEMMA_SRC), "PIQA": (67.7, "acc", "0-shot", _GEMMA_SRC),
            "BoolQ": (61.4, "acc", "0-shot", _GEMMA_SRC)},
}


# ------------------------------------------------------------------------------------ pure helpers

def seeded_subset(items: list, n: int, seed: int) -> list:
    """``n`` items drawn without replacement in a fixed order (all of them when ``n >= len``)."""
    if n >= len(items):
        return list(items)
    picked = sorted(random.Random(f"paw-bench-real-{seed}").sample(range(len(items)), n))
    return [items[i] for i in picked]


# ------------------------------------------------------------------------------------ the parts

def part_eval(opts: RealOptions, models: dict[str, Path]) -> dict:
    """Accuracy (raw and length-normalised) with stderr per model and set, and the published figures."""
    sets = {name: seeded_subset(read_items(Path(opts.data) / "raw" / f"{stem}.jsonl"), opts.eval_items, opts.seed)
            for name, stem in EVAL_SETS.items()}
    out: dict[str, Any] = {}
    for model_name, folder in models.items():
        lm, tok = load_model(folder, opts.device)
        out[model_name] = {}
        for set_name, items in sets.items():
            status(f"eval {model_name} on {set_name} ({len(items)} items)")
            r = evaluate(lm, tok, items, batch_size=opts.batch_size, progress=False)
            out[model_name][set_name] = {k: r[k] for k in ("n", "accuracy", "stderr", "accuracy_norm", "stderr_norm")}
        del lm
    return {"results": out, "published": {m: {s: dict(zip(("value", "metric", "shots", "source"), v, strict=True))
                                              for s, v in p.items()} for m, p in PUBLISHED.items()}}


def part_tokenizers(opts: RealOptions, models: dict[str, Path], workdir: Path) -> tuple[dict, Any]:
    """``analyze_tokenizers`` SmolLM2 -> Gemma (its report's headline figures) and the vocabulary map."""
    status("analyze-tokenizers SmolLM2 vs Gemma-3, align-vocab Gemma-3 -> SmolLM2")
    again = RunOptions(overwrite=True)
    analysis = analyze_tokenizers(AnalyzeOptions(source=models[SMOL], target=models[GEMMA],
                                                 outdir=workdir / "tokenizers", plots=False), again)
    alignment = align_vocab(AlignOptions(source=models[SMOL], target=models[GEMMA], output=workdir / "vocab_map.json"),
                            again)
    report = {k: v for k, v in analysis.report.items() if k not in ("paw_version", "command", "inputs")}
    return {"analysis": report, "alignment_coverage": alignment.coverage}, alignment.mapping


def _bench_options(opts: RealOptions) -> BenchOptions:
    return replace(BenchOptions(), lora_rank=opts.lora_rank, lora_alpha=opts.lora_alpha, lora_steps=opts.lora_steps,
                   lora_batch=opts.lora_batch, lora_lr=opts.lora_lr, device=opts.device)


def _task(name: str, opts: RealOptions, words: list[str]):
    return TASKS[name](opts.task_items, seed=opts.seed, words=words)


def _words(opts: RealOptions) -> list[str]:
    return common_words(sample_texts("en") * 4, n=200)


def part_transfer(opts: RealOptions, models: dict[str, Path], vocab_map, source) -> dict:
    """The facts LoRA of SmolLM2 moved to Gemma-3 by every method; outcomes item by item."""
    task = _task("facts", opts, _words(opts))
    items = task.scored  # the taught questions, then the same facts reworded (split by task.views at the end)
    bopts = _bench_options(opts)
    methods = [m for m in (opts.methods or method_names()) if m != "distill"]
    status(f"transfer: scoring SmolLM2 and training its facts LoRA ({opts.lora_steps} steps)")
    s_base = score_items(source.model, source.tokenizer, items)
    adapter, fit = train_adapter(source, task.train, bopts, opts.seed)
    with applied(source.model, adapter_deltas(adapter)):
        s_lora = score_items(source.model, source.tokenizer, items)
    lm, tok = load_model(models[GEMMA], opts.device)
    target = Base(GEMMA, lm, tok, models[GEMMA], vocab_map=vocab_map)
    status("transfer: Gemma-3 base, its own LoRA (the ceiling) and a random adapter")
    outcomes = {"base": score_items(lm, tok, items)}
    direct, fit_t = train_adapter(target, task.train, bopts, opts.seed)
    with applied(lm, adapter_deltas(direct)):
        outcomes["direct"] = score_items(lm, tok, items)
    norms = {k: float(d.norm()) for k, d in adapter_deltas(adapter).items()}
    with applied(lm, random_deltas(norms, lm, rank=opts.lora_rank, seed=opts.seed + 977)):
        outcomes["random"] = score_items(lm, tok, items)
    rows: dict[str, Any] = {}
    src_ckpt, tgt_ckpt = _checkpoints(models)
    for method in methods:
        status(f"transfer: method {method}")
        t0 = time.perf_counter()
        try:
            moved, report = transfer_lora(adapter, src_ckpt, tgt_ckpt, method=method, vocab_map=vocab_map,
                                          layer_map=opts.layer_map, device=opts.device)
        except Refused as err:  # auto judged Gemma unrelated: the base is what the user keeps
            rows[method] = {"status": TransferStatus.REFUSED.value, "reason": first_line(err, 300)}
            outcomes[method] = list(outcomes["base"])
            continue
        except PawError as err:  # this method cannot map this adapter
            rows[method] = {"status": TransferStatus.NOT_APPLICABLE.value, "reason": first_line(err, 300)}
            continue
        with applied(lm, adapter_deltas(moved)):
            outcomes[method] = score_items(lm, tok, items)
        rows[method] = {"status": TransferStatus.OK.value, "seconds": time.perf_counter() - t0,
                        "summary": TransferSummary.from_report(report).scalars()}
    if opts.methods is None or "distill" in opts.methods:
        rows["distill"], outcome = _distill(adapter, source, target, task, opts)
        if outcome is not None:
            outcomes["distill"] = outcome
    del lm
    views = {name: task.views(outcome) for name, outcome in {**outcomes, SOURCE_BASE: s_base, SOURCE_LORA: s_lora}.items()}
    figures = {view: view_figures({name: parts[view][0] for name, parts in views.items()}, clusters, n_boot=opts.n_boot,
                                  seed=opts.seed)
               for view, (_, clusters) in task.views(s_base).items()}
    for name, row in figures[task.name].items():
        rows.setdefault(name, {"status": TransferStatus.OK.value}).update(row)
    reworded = reworded_name(task.name)
    return {"task": "facts", "items": len(task.test), "layer_map": opts.layer_map,
            "source": {"base": accuracy([s_base[:len(task.test)]]), "lora": accuracy([s_lora[:len(task.test)]]),
                       "fit": fit},
            "target_fit": fit_t, "rows": rows,
            "reworded": {"task": reworded, "items": len(task.reworded), "phrasings": list(REWORDED),
                         "source": {"base": accuracy([views[SOURCE_BASE][reworded][0]]),
                                    "lora": accuracy([views[SOURCE_LORA][reworded][0]])},
                         "rows": figures[reworded]}}


SOURCE_BASE, SOURCE_LORA = "source base", "source + LoRA"  # the kept fraction's denominator, beside the conditions


def view_figures(outcomes: dict[str, list[int]], clusters: list[int] | None, *, n_boot: int, seed: int) -> dict:
    """Accuracy of every condition, and recovered and kept fractions of all but base and direct, on one view.

    ``outcomes`` holds the conditions on the target (``base``, ``direct``, ...) and the source's
    :data:`SOURCE_BASE` and :data:`SOURCE_LORA` on the same items; one seed, ``clusters`` resampled
    together (the questions about one fact).
    """
    s_base, s_lora = outcomes[SOURCE_BASE], outcomes[SOURCE_LORA]
    rows = {}
    for name, outcome in outcomes.items():
        if name in (SOURCE_BASE, SOURCE_LORA):
            continue
        row = rows[name] = {"accuracy": accuracy([outcome])}
        if name not in ("base", "direct"):
            row["recovered"] = recovered([outcome], [outcomes["base"]], [outcomes["direct"]], clusters=[clusters],
                                         n_boot=n_boot, seed=seed)
            row["kept"] = kept([outcome], [outcomes["base"]], [s_lora], [s_base], clusters=[clusters],
                               n_boot=n_boot, seed=seed)
    return rows


def _checkpoints(models: dict[str, Path]):
    return open_checkpoint(models[SMOL]), open_checkpoint(models[GEMMA])


def _distill(adapter, source, target, task, opts: RealOptions) -> tuple[dict, list[int] | None]:
    """``distill`` (issue 15): a Gemma LoRA taught to continue the task's prompts as SmolLM2 + LoRA does.

    The inputs are the training prompts without their answers ("Kavo Milret likes the colour"); the
    teacher writes the continuation and the student (Gemma, PEFT-initialised LoRA: the tokenizers
    differ, so ``auto`` offers no start) learns it as text. The recipe is ``distill_lora``'s
    defaults with the rank, batch and learning rate of the LoRAs above and
    ``opts.distill_budget`` steps, the rule of ``paw bench transfer``.
    """
    status(f"transfer: distill ({opts.distill_budget} steps on {len(task.train)} label-free prompts)")
    t0 = time.perf_counter()
    try:
        with applied(source.model, adapter_deltas(adapter)):
            moved, report = distill_lora(adapter, LM(source.model, source.tokenizer, SMOL,
                                                     tokenizer_info=open_tokenizer(source.folder),
                                                     adapter_off=without_adapter(source.model, adapter)),
                                         LM(target.model, target.tokenizer, GEMMA,
                                            tokenizer_info=open_tokenizer(target.folder)),
                                         prompts=[item.question for item in task.train],
                                         steps=opts.distill_budget, batch_size=opts.lora_batch, lr=opts.lora_lr,
                                         seed=opts.seed, device=opts.device, target_name=GEMMA, progress=False)
    except PawError as err:
        return {"status": TransferStatus.NOT_APPLICABLE.value, "reason": first_line(err, 300)}, None
    with applied(target.model, adapter_deltas(moved)):
        outcome = score_items(target.model, target.tokenizer, task.scored)
    d = DistillSummary.from_report(report)
    return {"status": TransferStatus.OK.value, "seconds": time.perf_counter() - t0,
            "summary": TransferSummary.from_report(report).scalars(), "losses": d.losses,
            "loss_tail_drop": d.loss_tail_drop, "vocabulary": d.vocabulary, "warnings": report["warnings"]}, outcome


def part_merge(opts: RealOptions, models: dict[str, Path], source, workdir: Path) -> dict:
    """Task vectors of SmolLM2's LoRA-merged fine-tunes (facts, facts-b) and their merges, scored on both."""
    # two sets of invented facts (other people, other seed): SmolLM2-Instruct already repeats words
    # (the 'rule' task) at 100%, so only new facts give both fine-tunes a gain a merge can keep or lose
    words = _words(opts)
    tasks = {"facts": _task("facts", opts, words),
             "facts-b": _task("facts", replace(opts, seed=opts.seed + 1000), words)}
    base_out = {n: score_items(source.model, source.tokenizer, t.test) for n, t in tasks.items()}
    base_ckpt = open_checkpoint(models[SMOL])
    folders, ft_out = {}, {}
    for name, task in tasks.items():
        status(f"merge: LoRA for '{name}' on SmolLM2, merged into a float32 fine-tune")
        adapter, _ = train_adapter(source, task.train, _bench_options(opts), opts.seed + 1)
        deltas = adapter_deltas(adapter)
        folders[name] = workdir / f"smollm2-{name}"
        tensors = ((k, base_ckpt[k].float() + deltas[k] if k in deltas else base_ckpt[k].float()) for k in base_ckpt)
        write_checkpoint(folders[name], tensors, copy_from=models[SMOL], overwrite=True)
        ft_out[name] = _score_folder(folders[name], tasks, opts)
    status("merge: task vectors of both fine-tunes")
    tv = task_vectors(models[SMOL], [folders[n] for n in tasks], workdir / "task_vectors", device=opts.device,
                      overwrite=True, command="paw bench real")
    tv_rows = {}
    for i, name in enumerate(tasks):
        s = task_vector_summary(tv.results, i, top_k=5)
        tv_rows[name] = {"global_l2": s["global_l2"], "global_l1": s["global_l1"], "groups": s["groups"]}
    merges = {}
    for method in ("task-arithmetic", "ties"):
        status(f"merge: {method} of the two fine-tunes")
        out = workdir / f"merged-{method}"
        merge(MergeOptions(models=[str(folders[n]) for n in tasks], base=str(models[SMOL]), output=str(out),
                           method=method, mode="equal", dtype="float32", device=opts.device, overwrite=True),
              command="paw bench real")
        scores = _score_folder(out, tasks, opts)
        merges[method] = {n: {"accuracy": accuracy([scores[n]]),
                              "kept": recovered([scores[n]], [base_out[n]], [ft_out[n][n]],
                                                clusters=[tasks[n].clusters], n_boot=opts.n_boot,
                                                seed=opts.seed)} for n in tasks}
    return {"tasks": {n: {"base": accuracy([base_out[n]]), "fine_tune": accuracy([ft_out[n][n]]),
                          "other_fine_tune": accuracy([ft_out[m][n] for m in tasks if m != n])} for n in tasks},
            "task_vectors": tv_rows, "merges": merges}


def _score_folder(folder: Path, tasks: dict, opts: RealOptions) -> dict[str, list[int]]:
    lm, tok = load_model(folder, opts.device)
    return {n: score_items(lm, tok, t.test) for n, t in tasks.items()}


# ------------------------------------------------------------------------------------ driver

def run_real(opts: RealOptions, workdir: str | Path) -> dict:
    """Run the requested parts; returns the results dict :func:`paw.bench.real.report.write_real` writes."""
    opts.check()
    workdir = Path(workdir)
    models = {SMOL: Path(opts.models) / SMOL, GEMMA: Path(opts.models) / GEMMA}
    load = os.getloadavg()
    seconds: dict[str, float] = {}
    out: dict[str, Any] = {"format": "paw-bench-real", "version": 1, "settings": asdict(opts),
                           "machine": {"cpus": os.cpu_count(), "load_before": list(load)}}
    t_all = time.perf_counter()
    if "eval" in opts.parts:
        t = time.perf_counter()
        out["eval"] = part_eval(opts, models)
        seconds["eval"] = time.perf_counter() - t
        _save_partial(workdir, out)
    vocab_map = None
    if "tokenizers" in opts.parts or "transfer" in opts.parts:
        t = time.perf_counter()
        out["tokenizers"], vocab_map = part_tokenizers(opts, models, workdir)
        seconds["tokenizers"] = time.perf_counter() - t
        _save_partial(workdir, out)
    if "transfer" in opts.parts or "merge" in opts.parts:
        lm, tok = load_model(models[SMOL], opts.device)
        source = Base(SMOL, lm, tok, models[SMOL])
        if "transfer" in opts.parts:
            t = time.perf_counter()
            out["transfer"] = part_transfer(opts, models, vocab_map, source)
            seconds["transfer"] = time.perf_counter() - t
            _save_partial(workdir, out)
        if "merge" in opts.parts:
            t = time.perf_counter()
            out["merge"] = part_merge(opts, models, source, workdir)
            seconds["merge"] = time.perf_counter() - t
            _save_partial(workdir, out)
    if "tasks" in opts.parts:
        t = time.perf_counter()
        out["tasks"] = part_tasks(opts, models, load_model, workdir)
        seconds["tasks"] = time.perf_counter() - t
        _save_partial(workdir, out)
    seconds["total"] = time.perf_counter() - t_all
    out["seconds"] = seconds
    out["machine"]["load_after"] = list(os.getloadavg())
    return out


def _save_partial(workdir: Path, out: dict) -> None:
    """Keep the parts done so far in ``workdir/partial-results.json``: a late failure loses only its part."""
    write_json(workdir / "partial-results.json", out)
