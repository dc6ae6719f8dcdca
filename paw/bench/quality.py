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
   bootstrap (:mod:`paw.bench.stats`).

Transferred adapters are merged into a copy of the base weights (``W + s B A``), which is what PEFT
computes; the folders ``paw transfer-lora`` writes are tested to load in PEFT by its own tests.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from paw.bench.lm import Schedule, held_out_loss, token_stream, train_lm
from paw.bench.stats import accuracy, recovered
from paw.bench.targets import TARGETS, Workshop
from paw.bench.tasks import TASKS, build_corpora, common_words
from paw.errors import PawError
from paw.progress import status

SOURCE = "source"
LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class BenchOptions:
    """Every knob of the benchmark, with the defaults of the published table."""

    seeds: tuple[int, ...] = (0, 1)             # task data + LoRA seeds (the models are built once)
    tasks: tuple[str, ...] = tuple(TASKS)       # facts, rule
    targets: tuple[str, ...] = tuple(TARGETS)   # upgrade, pruned, grown, distilled, tokenizer, unrelated
    methods: tuple[str, ...] | None = None      # transfer methods; None = auto + every registered one
    items: int = 300                            # held-out items per task and seed
    hidden_size: int = 64                       # source model shape (Llama, GQA)
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 176
    vocab_size: int = 768                       # byte-level BPE trained on the source corpus
    pretrain_steps: int = 400                   # source (and unrelated, distilled) pretraining steps
    heal_fraction: float = 0.25                 # healing / further-training steps, fraction of pretraining
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_steps: int = 300
    lora_batch: int = 16
    lora_lr: float = 3e-3
    model_seed: int = 0                         # initialisation / corpus-order seed of the models
    n_boot: int = 1000                          # bootstrap replicates for the recovered fraction
    commonsense: str | None = None              # folder of *_formatted.jsonl; None = embedded fallback
    device: str = "cpu"
    threads: int = 1                            # torch CPU threads: tiny models run best on one
    distill: tuple[str, ...] = ("inputs", "synth", "generic")  # distill rows (paw/bench/distill.py); () = none

    def check(self) -> None:
        unknown = [t for t in self.tasks if t not in TASKS] + [t for t in self.targets if t not in TARGETS]
        if unknown:
            raise PawError(f"unknown task/target {unknown[0]!r}; tasks: {', '.join(TASKS)}; "
                           f"targets: {', '.join(TARGETS)}")
        if not self.seeds:
            raise PawError("give at least one seed")
        _distill_conditions(self)  # unknown distill input budgets fail here, before any training
        if self.items < 10:
            raise PawError(f"--items {self.items}: at least 10 held-out items per task")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise PawError(f"hidden size {self.hidden_size}, heads {self.num_heads}, KV heads {self.num_kv_heads}: "
                           "heads must divide the hidden size and KV heads the heads")


@dataclass
class Base:
    """One base model under test, its tokenizer and its folder (for ``transfer_lora``)."""

    name: str
    model: Any
    tokenizer: Any
    folder: Path
    info: dict = field(default_factory=dict)
    vocab_map: Any = None


# ------------------------------------------------------------------------------------ scoring

def score_items(model, tokenizer, items, *, batch_size: int = 64) -> list[int]:
    """1/0 per item: is the highest-log-likelihood choice the answer? (:func:`paw.evaluate.mc.evaluate`'s rule)."""
    from paw.evaluate.encode import encode_pair, max_length_of, pad_id_of
    from paw.evaluate.mc import _argmax, score_encoded

    encoded, spans = [], []
    for item in items:
        spans.append((len(encoded), len(item.choices)))
        encoded.extend(encode_pair(tokenizer, c, x, max_length=max_length_of(model)) for c, x in item.pairs())
    scores = score_encoded(model, encoded, pad_id=pad_id_of(tokenizer), batch_size=batch_size,
                           device=next(model.parameters()).device, progress=False)
    return [int(_argmax([s for s, _ in scores[a:a + k]]) == item.answer) for (a, k), item in zip(spans, items, strict=True)]


def adapter_deltas(adapter) -> dict[str, Any]:
    """``{base weight name: ΔW}`` of a :class:`paw.io.adapter.LoraAdapter` (its factors, merged)."""
    return {m.base_key: m.delta() for m in adapter.modules().values()}


@contextmanager
def applied(model, deltas: dict[str, Any]):
    """``model`` with ``W += ΔW`` for each delta inside the block, restored exactly afterwards."""
    import torch

    params = dict(model.named_parameters())
    missing = [k for k in deltas if k not in params]
    if missing:
        raise PawError(f"the adapter names {missing[0]!r}, which the base model does not have")
    saved = {k: params[k].detach().clone() for k in deltas}
    with torch.no_grad():
        for k, d in deltas.items():
            params[k].add_(d.to(params[k].device, params[k].dtype))
    try:
        yield model
    finally:
        with torch.no_grad():
            for k, w in saved.items():
                params[k].copy_(w)


def random_deltas(norms: dict[str, float], model, *, rank: int, seed: int) -> dict[str, Any]:
    """Random rank-``rank`` ΔW for every adapted linear module of ``model``, with ``||ΔW||_F`` from ``norms``.

    ``norms`` is keyed by source weight name; a target module absent from the source (other depth)
    gets the mean norm of its module type (``q_proj``, ...).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    by_type: dict[str, list[float]] = {}
    for name, value in norms.items():
        by_type.setdefault(name.split(".")[-2], []).append(value)
    out = {}
    for name, p in model.named_parameters():
        kind = name.split(".")[-2] if name.endswith(".weight") else ""
        if kind not in by_type or p.ndim != 2:
            continue
        target = norms.get(name, sum(by_type[kind]) / len(by_type[kind]))
        delta = torch.randn(p.shape[0], rank, generator=gen) @ torch.randn(rank, p.shape[1], generator=gen)
        out[name] = delta * (target / float(delta.norm()))
    return out


# ------------------------------------------------------------------------------------ LoRA

def train_adapter(base: Base, task, opts: BenchOptions, seed: int, folder_name: str):
    """A LoRA trained on ``task.train`` on top of ``base``; returns a :class:`paw.io.adapter.LoraAdapter`."""
    from peft import get_peft_model_state_dict

    from paw.evaluate.train import train_lora
    from paw.io.adapter import LoraAdapter, lora_config_dict

    peft_model, metrics = train_lora(copy.deepcopy(base.model), base.tokenizer, task.train, rank=opts.lora_rank,
                                     alpha=opts.lora_alpha, target_modules=LINEAR, steps=opts.lora_steps,
                                     batch_size=opts.lora_batch, lr=opts.lora_lr, seed=seed, device=None,
                                     eval_items=None, tracker=None, progress=False)
    tensors = {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    config = lora_config_dict(r=opts.lora_rank, alpha=opts.lora_alpha, target_modules=LINEAR,
                              base_model=str(base.folder))
    return LoraAdapter(config=config, tensors=tensors), {
        "train_loss_start": metrics["train_loss_start"], "train_loss_end": metrics["train_loss_end"]}


# ------------------------------------------------------------------------------------ models

def _source_model(opts: BenchOptions, vocab: int):
    from paw.zoo import build_model

    return build_model("llama", seed=opts.model_seed, init_std=0.02, hidden_size=opts.hidden_size,
                       num_layers=opts.num_layers, num_heads=opts.num_heads, num_kv_heads=opts.num_kv_heads,
                       intermediate_size=opts.intermediate_size, vocab_size=vocab,
                       max_position_embeddings=max(256, 2 * opts.seq_len))


def _transplanter(workdir: Path, source_folder: Path) -> Callable | None:
    """``(model, tokenizer, new_tokenizer) -> (model, how)`` through ``paw transplant-tokenizer``, if present."""
    from paw.cli import app

    names = {c.name for c in app.registered_commands}
    names |= {getattr(c, "name", None) for g in app.registered_groups for c in g.typer_instance.registered_commands}
    if "transplant-tokenizer" not in names:
        return None

    def transplant(model, tokenizer, new_tokenizer):
        from transformers import AutoModelForCausalLM

        from paw.cli import main
        from paw.io.atomic import atomic_dir
        from paw.io.vocab_map import read_vocab_map

        tok_dir, out = workdir / "tokenizer-new", workdir / "models" / "tokenizer-transplanted"
        with atomic_dir(tok_dir, overwrite=True) as tmp:
            new_tokenizer.save_pretrained(tmp)
        argv = ["transplant-tokenizer", "--model", str(source_folder), "--tokenizer", str(tok_dir),
                "--output", str(out), "--overwrite", "--no-check"]
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
        if code:
            raise PawError(f"not run: paw transplant-tokenizer failed (exit {code})")
        return AutoModelForCausalLM.from_pretrained(out).float().eval(), {
            "command": "paw " + " ".join(argv[:-2]), "vocab_map": read_vocab_map(out / "paw_vocab_map.json")}

    return transplant


def build_bases(opts: BenchOptions, workdir: Path, *, progress: bool = True) -> tuple[list[Base], dict]:
    """Train the source and build every requested target; returns the bases (source first) and notes."""
    from paw.device import resolve_device
    from paw.zoo import sample_texts, save_model, train_tokenizer

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
    notes = {"corpus": corpus, "corpus_texts": [len(source_texts), len(shifted_texts)],
             "corpus_tokens": int(len(stream)), "tokenizer_vocab": len(tokenizer),
             "source": {"parameters": sum(p.numel() for p in source.parameters()), "final_train_loss": losses[-1],
                        "held_out_loss": held_out_loss(source, held_out, seq_len=opts.seq_len)},
             "seconds": {"source": time.perf_counter() - t0}, "targets": {}}
    bases = [Base(SOURCE, source, tokenizer, src_folder, notes["source"])]
    ws = Workshop(source=source, tokenizer=tokenizer, source_stream=stream, shifted_texts=shifted_texts,
                  source_texts=source_texts, pretrain=schedule, heal_fraction=opts.heal_fraction,
                  seed=opts.model_seed, device=device, progress=progress,
                  transplant=_transplanter(workdir, src_folder))
    for name in opts.targets:
        t1 = time.perf_counter()
        status(f"building target '{name}'")
        try:
            built = TARGETS[name](ws)
        except PawError as err:
            if not str(err).startswith("not run"):
                raise
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
    from paw.transfer import method_names

    names = list(opts.methods) if opts.methods else method_names()
    unknown = [m for m in names if m not in method_names()]
    if unknown:
        raise PawError(f"unknown transfer method {unknown[0]!r}; choose from {', '.join(method_names())}")
    return names


def transfer(adapter, source: Base, target: Base, method: str, device: str) -> tuple[str, Any, dict]:
    """``(status, adapter or None, report summary)``: 'ok', 'refused' (auto said unrelated) or 'n/a: why'."""
    from paw.io.checkpoint import open_checkpoint
    from paw.transfer import transfer_lora

    try:
        moved, report = transfer_lora(adapter, open_checkpoint(source.folder), open_checkpoint(target.folder),
                                      method=method, vocab_map=target.vocab_map, device=device)
    except PawError as err:
        text = str(err)
        if method == "auto" and "unrelated" in text:
            return "refused", None, {"message": text}
        return f"n/a: {text.splitlines()[0][:160]}", None, {}
    summary = dict(report.get("summary", {}))
    return "ok", moved, summary


def _evaluate_base(base: Base, source: Base, adapter, direct_adapter, task, opts: BenchOptions, seed: int,
                   methods: list[str]) -> dict:
    """Outcomes of every condition on ``base`` for one task and seed."""
    out: dict[str, Any] = {"outcomes": {}, "status": {}, "summaries": {}}
    items = task.test
    out["outcomes"]["base"] = base_outcome = score_items(base.model, base.tokenizer, items)
    with applied(base.model, adapter_deltas(direct_adapter)):
        out["outcomes"]["direct"] = score_items(base.model, base.tokenizer, items)
    norms = {k: float(d.norm()) for k, d in adapter_deltas(adapter).items()}
    with applied(base.model, random_deltas(norms, base.model, rank=opts.lora_rank, seed=seed + 977)):
        out["outcomes"]["random"] = score_items(base.model, base.tokenizer, items)
    for method in methods:
        state, moved, summary = transfer(adapter, source, base, method, opts.device)
        out["status"][method] = state
        out["summaries"][method] = summary
        if state == "ok":
            with applied(base.model, adapter_deltas(moved)):
                out["outcomes"][method] = score_items(base.model, base.tokenizer, items)
        elif state == "refused":
            out["outcomes"][method] = list(base_outcome)
    if opts.distill:  # distillation rows: paw/bench/distill.py
        from paw.bench import distill

        distill.run(out, base, source, adapter, task, opts, seed, score_items)
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


def _run(opts: BenchOptions, methods: list[str], workdir: Path, progress: bool) -> dict:
    t0 = time.perf_counter()
    bases, notes = build_bases(opts, workdir, progress=progress)
    source = bases[0]
    words = common_words(build_corpora(Path(opts.commonsense) if opts.commonsense else None,
                                       seed=opts.model_seed, embedded=_embedded())[0])
    raw: dict[str, dict[str, dict]] = {}     # task -> base -> per-seed results
    lora_notes: dict[str, Any] = {}
    t_models = time.perf_counter()
    for seed in opts.seeds:
        for task_name in opts.tasks:
            task = TASKS[task_name](opts.items, seed=seed, words=words)
            status(f"seed {seed}, task {task_name}: training the source LoRA")
            adapter, fit = train_adapter(source, task, opts, seed, "source")
            lora_notes[f"{task_name}/{seed}/source"] = fit
            for base in bases:
                status(f"seed {seed}, task {task_name}: {base.name}")
                if base.name == SOURCE:
                    direct = adapter
                else:
                    direct, fit_t = train_adapter(base, task, opts, seed, base.name)
                    lora_notes[f"{task_name}/{seed}/{base.name}"] = fit_t
                result = _evaluate_base(base, source, adapter, direct, task, opts, seed, methods)
                raw.setdefault(task_name, {}).setdefault(base.name, {})[seed] = result
    notes["seconds"]["loras_and_evaluation"] = time.perf_counter() - t_models
    notes["seconds"]["total"] = time.perf_counter() - t0
    return summarize(raw, asdict(opts) | {"methods": methods + _distill_conditions(opts)}, notes, lora_notes)


def _distill_conditions(opts: BenchOptions) -> list[str]:
    from paw.bench.distill import conditions

    return conditions(opts.distill)


def _embedded() -> list[str]:
    from paw.zoo import sample_texts

    return sample_texts("en")


def summarize(raw: dict, settings: dict, notes: dict, lora_notes: dict) -> dict:
    """Accuracy ± stderr and recovered fraction per task, base and condition; keeps the raw outcomes.

    ``raw[task][base][seed]`` holds ``outcomes`` (condition -> 0/1 per item), ``status`` and
    ``summaries`` (per transfer method). The raw part is kept in the output (outcomes as ``'0110…'``
    strings) so that runs of other seeds can be pooled later with :func:`merge_results`.
    """
    methods = settings["methods"]
    rows = []
    order = [SOURCE, *TARGETS]
    for task in sorted(raw, key=lambda t: list(TASKS).index(t) if t in TASKS else len(TASKS)):
        per_base = raw[task]
        for base in sorted(per_base, key=lambda b: order.index(b) if b in order else len(order)):
            per_seed = per_base[base]
            seeds = sorted(per_seed)
            outcome = {s: per_seed[s]["outcomes"] for s in seeds}
            b, d = [outcome[s]["base"] for s in seeds], [outcome[s]["direct"] for s in seeds]
            for condition in ["base", "direct", "random", *methods]:
                statuses = sorted({per_seed[s]["status"].get(condition, "ok") for s in seeds})
                row = {"task": task, "target": base, "condition": condition, "status": "/".join(statuses)}
                if all(condition in outcome[s] for s in seeds):
                    t = [outcome[s][condition] for s in seeds]
                    row["accuracy"] = accuracy(t)
                    if condition not in ("base", "direct"):
                        row["recovered"] = recovered(t, b, d, n_boot=settings["n_boot"], seed=len(rows))
                    if condition in methods:
                        row["transfer_summary"] = {str(s): per_seed[s]["summaries"].get(condition) for s in seeds}
                rows.append(row)
    if any(m.startswith("distill[") for m in methods):
        from paw.bench.distill import add_kept

        rows = add_kept(rows, raw, source=SOURCE, n_boot=settings["n_boot"])
    packed = {task: {base: {str(seed): {**r, "outcomes": {c: "".join(map(str, o)) for c, o in r["outcomes"].items()}}
                            for seed, r in per_seed.items()} for base, per_seed in per_base.items()}
              for task, per_base in raw.items()}
    return {"format": "paw-transfer-quality", "version": 1, "settings": settings, "notes": notes,
            "lora": lora_notes, "rows": rows, "raw": packed}


def merge_results(runs: list[dict]) -> dict:
    """Pool runs made with other ``--seeds`` or ``--tasks`` but otherwise the same settings into one result.

    The models are rebuilt identically in every run (same ``model_seed``), so the runs describe the
    same bases; their times add up in ``notes.seconds`` (CPU work, not wall time when run in parallel).
    """
    if not runs:
        raise PawError("nothing to merge")
    free = ("seeds", "tasks")

    def fixed(run: dict) -> dict:
        return {k: v for k, v in run["settings"].items() if k not in free}

    raw: dict = {}
    for run in runs:
        if fixed(run) != fixed(runs[0]):
            raise PawError("runs differ in more than their seeds and tasks; they cannot be pooled")
        for task, per_base in run["raw"].items():
            for base, per_seed in per_base.items():
                for seed, r in per_seed.items():
                    outcomes = {c: [int(ch) for ch in o] for c, o in r["outcomes"].items()}
                    raw.setdefault(task, {}).setdefault(base, {})[int(seed)] = {**r, "outcomes": outcomes}
    seeds = sorted({int(s) for run in runs for s in run["settings"]["seeds"]})
    tasks = list(dict.fromkeys(t for run in runs for t in run["settings"]["tasks"]))
    seconds = [run["notes"]["seconds"] for run in runs]
    notes = dict(runs[0]["notes"], seconds={k: sum(s.get(k, 0.0) for s in seconds) for k in seconds[0]},
                 merged_runs=len(runs))
    lora = {k: v for run in runs for k, v in run["lora"].items()}
    return summarize(raw, dict(runs[0]["settings"], seeds=seeds, tasks=tasks), notes, lora)


def quick_options(**overrides: Any) -> BenchOptions:
    """A seconds-long configuration for tests (tiny models, few steps, few items)."""
    base = BenchOptions(seeds=(0,), items=20, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                        intermediate_size=64, vocab_size=300, pretrain_steps=20, batch_size=4, seq_len=32,
                        lora_steps=10, lora_batch=4, n_boot=50)
    return replace(base, **overrides)
