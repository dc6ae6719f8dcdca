"""``paw demo``: the whole research loop on tiny local models, in under a minute on a laptop CPU.

1. **models**: a 400-token BPE tokenizer and a 2-layer Llama (hidden 64) from :mod:`paw.zoo`; a
   *successor* of it (the base plus a small "continued training" drift, same shapes); and a second,
   SentencePiece-style tokenizer on a tiny Qwen2 for the tokenizer comparison.
2. **train-lora**: two synthetic fact tasks (:mod:`paw.evaluate.synthetic`): "the colour of
   pixzone is red|blue|green|gold" and "kagalpix lives in the sea|forest|city|desert". A random
   base scores near chance (25 %); a LoRA on the colour facts learns them.
3. **tokenizers**: ``paw analyze-tokenizers`` compares the two tokenizers.
4. **transfer**: ``paw transfer-lora`` moves the colour LoRA to the successor, which is evaluated
   without and with it.
5. **task-vectors**: a second LoRA learns the home facts; both LoRAs are folded into full
   fine-tunes and ``paw task-vectors`` measures them against the base.
6. **merge**: ``paw merge --mode exp`` merges the two fine-tunes; the merged model is evaluated on
   both tasks.

Steps live in a registry (:data:`STEPS`) and call the same library pipelines as the ``paw``
commands (:func:`paw.vocab.pipelines.analyze_tokenizers`, :func:`paw.transfer.folder_pipeline.transfer_adapter`,
:func:`paw.taskvec.pipeline.task_vectors`, :func:`paw.merge.merge`); ``outdir/logs/`` records each
call, what it printed and what it returned. A step whose inputs failed is *skipped: needs ...*;
nothing stops the tour. Every report, plot and model lands under ``outdir``; ``summary.json``
gathers the numbers.
"""

from __future__ import annotations

import contextlib
import enum
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from paw import zoo
from paw.data import sample_texts
from paw.errors import PawError
from paw.evaluate.mc import evaluate
from paw.evaluate.synthetic import fact_task, tokenizer_corpus
from paw.evaluate.train import train_lora
from paw.io.atomic import check_output
from paw.io.hub import quiet_transformers
from paw.io.lm import load_lm, save_adapter
from paw.io.manifest import write_manifest
from paw.io.mcdata import write_items
from paw.io.reports import save_figure, write_json
from paw.knobs import RunOptions
from paw.merge import MergeOptions, execute, prepare
from paw.registry import Registry
from paw.taskvec.pipeline import task_vectors
from paw.transfer.folder_pipeline import transfer_adapter
from paw.vocab.options import AnalyzeOptions
from paw.vocab.pipelines import analyze_tokenizers

R = TypeVar("R")


@dataclass(frozen=True)
class DemoSettings:
    """Sizes of the demo; ``quick`` halves the LoRA training (a quarter off the whole demo) for a few points."""

    n_facts: int = 24        # facts per task
    steps: int = 200         # LoRA optimiser steps per task
    rank: int = 8
    alpha: float = 16
    lr: float = 3e-3
    batch_size: int = 8
    hidden_size: int = 64
    num_layers: int = 2
    vocab_size: int = 400
    drift: float = 0.05      # successor = base + drift x (per-tensor std) Gaussian noise
    seed: int = 0

    @classmethod
    def for_mode(cls, quick: bool) -> DemoSettings:
        return cls(n_facts=16, steps=100) if quick else cls()


class StepStatus(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class StepResult:
    name: str
    title: str
    status: StepStatus
    reason: str = ""         # why it failed or was skipped
    detail: str = ""         # what it found, for people
    seconds: float = 0.0

    @property
    def label(self) -> str:
        """``'ok'``, ``'failed: <why>'``, ``'skipped: needs models'``: the status line of ``summary.json``."""
        return f"{self.status.value}: {self.reason}" if self.reason else self.status.value


@dataclass
class Demo:
    """State shared by the steps: where things are, the tasks, the evaluations so far."""

    outdir: Path
    settings: DemoSettings
    tasks: dict[str, list] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)
    evals: dict[str, dict[str, dict]] = field(default_factory=dict)   # model label -> task -> metrics
    curves: dict[str, list[float]] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    logs: set[str] = field(default_factory=set)                       # log files begun in this run

    def path(self, key: str, relative: str) -> Path:
        self.paths[key] = self.outdir / relative
        return self.paths[key]


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[Demo], str]
    needs: tuple[str, ...] = ()         # steps that must have succeeded first


STEPS: Registry[Step] = Registry("demo step")


def step(name: str, title: str, *, needs: tuple[str, ...] = ()):
    def register(run: Callable[[Demo], str]) -> Callable[[Demo], str]:
        STEPS.add(name, Step(name, title, run, needs))
        return run

    return register


# --------------------------------------------------------------------------- helpers

def run_logged(demo: Demo, log_name: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``fn(*args, **kwargs)``, with the call and all it prints in ``outdir/logs/<log_name>.log``.

    The first call of a run starts the log; later calls with the same name append to it.
    """
    log = demo.outdir / "logs" / f"{log_name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    shown = [_show(a) for a in args] + [f"{k}={_show(v)}" for k, v in kwargs.items()]
    mode = "a" if log_name in demo.logs else "w"
    demo.logs.add(log_name)
    with log.open(mode, encoding="utf-8") as handle, contextlib.redirect_stdout(handle), \
            contextlib.redirect_stderr(handle):
        print(f">>> {fn.__module__}.{fn.__qualname__}({', '.join(shown)})", flush=True)
        return fn(*args, **kwargs)


def _show(value: Any) -> str:
    """An argument as the log shows it: paths as strings, big objects by their type."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    text = repr(str(value) if isinstance(value, Path) else value)
    return text if len(text) <= 400 else f"<{type(value).__name__}>"


def log_lines(demo: Demo, log_name: str, lines: list[str]) -> None:
    """Append what a logged call returned, for people, to its log."""
    with (demo.outdir / "logs" / f"{log_name}.log").open("a", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in lines)


def evaluate_model(demo: Demo, label: str, model: Path, adapter: Path | None = None) -> None:
    """Evaluate a model folder (+ adapter) on every task; store under ``label``."""
    lm, tokenizer = load_lm(model, adapter=adapter, device="cpu")
    demo.evals[label] = {task: evaluate(lm, tokenizer, items, batch_size=16, progress=False)
                         for task, items in demo.tasks.items()}


def _accuracy(demo: Demo, label: str, task: str = "colour") -> str:
    return f"{demo.evals[label][task]['accuracy']:.0%}"


def _train(demo: Demo, task: str):
    s = demo.settings
    lm, tokenizer = load_lm(demo.paths["base"], device="cpu")
    peft_model, metrics = train_lora(lm, tokenizer, demo.tasks[task], rank=s.rank, alpha=s.alpha, steps=s.steps,
                                     batch_size=s.batch_size, lr=s.lr, seed=s.seed, progress=True)
    demo.curves[task] = metrics["train_losses"]
    return peft_model, metrics


# --------------------------------------------------------------------------- steps

@step("models", "Build tiny models and tokenizers (paw.zoo)")
def _models(demo: Demo) -> str:
    s = demo.settings
    demo.tasks = {"colour": fact_task("colour", n=s.n_facts, seed=s.seed),
                  "home": fact_task("home", n=s.n_facts, seed=s.seed + 1)}
    texts = sample_texts("multi") + tokenizer_corpus(*demo.tasks.values())
    dims = dict(hidden_size=s.hidden_size, num_layers=s.num_layers)
    base = zoo.tiny_model(demo.path("base", "models/base"), "llama", seed=s.seed, vocab_size=s.vocab_size,
                          texts=texts, **dims)
    zoo.fine_tune(base, demo.path("successor", "models/successor"), seed=s.seed + 11, scale=s.drift)
    zoo.tiny_model(demo.path("other", "models/qwen2-sentencepiece"), "qwen2", seed=s.seed + 1,
                   vocab_size=s.vocab_size, texts=texts, tokenizer_kind="sentencepiece-bpe", **dims)
    _save_tasks(demo)
    evaluate_model(demo, "base", base)
    return f"llama base, successor (drift {s.drift}), qwen2 with a SentencePiece tokenizer; base colour accuracy " \
           f"{_accuracy(demo, 'base')}"


def _save_tasks(demo: Demo) -> None:
    """The tasks as flat ``mc`` JSON lines, so ``paw eval --data`` / ``paw train-lora --data`` can replay them."""
    for task, items in demo.tasks.items():
        write_items(demo.path(f"data-{task}", f"data/{task}.jsonl"), items)


@step("train-lora", "Train a LoRA on the colour facts", needs=("models",))
def _train_colour(demo: Demo) -> str:
    peft_model, metrics = _train(demo, "colour")
    save_adapter(peft_model, demo.path("lora", "adapters/colour-lora"), overwrite=True, base=demo.paths["base"],
                 extra_files={"metrics.json": metrics})
    evaluate_model(demo, "base + LoRA", demo.paths["base"], demo.paths["lora"])
    return f"train loss {metrics['train_loss_start']:.2f} -> {metrics['train_loss_end']:.2f}; colour accuracy " \
           f"{_accuracy(demo, 'base')} -> {_accuracy(demo, 'base + LoRA')}"


@step("tokenizers", "Compare two tokenizers", needs=("models",))
def _tokenizers(demo: Demo) -> str:
    out = demo.path("tokenizers", "reports/tokenizers")
    result = run_logged(demo, "analyze-tokenizers", analyze_tokenizers,
                        AnalyzeOptions(source=demo.paths["base"], target=demo.paths["other"], outdir=out),
                        RunOptions(overwrite=True))
    v = result.report["vocabulary"]
    detail = f"vocabulary.jaccard {v['jaccard']:.3g}, vocabulary.overlap_coefficient {v['overlap_coefficient']:.3g}"
    log_lines(demo, "analyze-tokenizers", [detail, f"wrote {out}"])
    return detail


@step("transfer", "Transfer the LoRA to the successor base", needs=("train-lora",))
def _transfer(demo: Demo) -> str:
    out = demo.path("transferred", "adapters/colour-lora-on-successor")
    moved = run_logged(demo, "transfer-lora", transfer_adapter, demo.paths["lora"], demo.paths["base"],
                       demo.paths["successor"], out, method="auto", device="cpu", overwrite=True)
    log_lines(demo, "transfer-lora", [_transfer_methods(moved.summary), f"wrote {out}"])
    evaluate_model(demo, "successor", demo.paths["successor"])
    evaluate_model(demo, "successor + transferred LoRA", demo.paths["successor"], out)
    return f"{_transfer_methods(moved.summary)}; colour accuracy on the successor {_accuracy(demo, 'successor')} -> " \
           f"{_accuracy(demo, 'successor + transferred LoRA')} (source + LoRA {_accuracy(demo, 'base + LoRA')})"


def _transfer_methods(summary: dict) -> str:
    """``'methods copy x14, median subspace similarity 0.995'`` from a transfer report's summary."""
    methods = summary.get("methods") or {}
    text = "methods " + ", ".join(f"{m} x{n}" for m, n in sorted(methods.items())) if methods else "transferred"
    similarity = summary.get("median_similarity")
    return text + (f", median subspace similarity {similarity:.3f}" if isinstance(similarity, float) else "")


@step("fine-tunes", "Train a second LoRA (home facts); fold both into full fine-tunes", needs=("train-lora",))
def _fine_tunes(demo: Demo) -> str:
    peft_model, metrics = _train(demo, "home")
    save_adapter(peft_model, demo.path("lora-home", "adapters/home-lora"), overwrite=True, base=demo.paths["base"],
                 extra_files={"metrics.json": metrics})
    for task, adapter in (("colour", demo.paths["lora"]), ("home", demo.paths["lora-home"])):
        lm, tokenizer = load_lm(demo.paths["base"], adapter=adapter, device="cpu")
        zoo.save_model(lm.merge_and_unload(), demo.path(f"ft-{task}", f"models/ft-{task}"), tokenizer=tokenizer)
        evaluate_model(demo, f"fine-tune {task}", demo.paths[f"ft-{task}"])
    return f"home accuracy {_accuracy(demo, 'base', 'home')} -> {_accuracy(demo, 'fine-tune home', 'home')}"


@step("task-vectors", "Task vectors of the two fine-tunes", needs=("fine-tunes",))
def _task_vectors(demo: Demo) -> str:
    out = demo.path("task-vectors", "reports/task-vectors")
    run = run_logged(demo, "task-vectors", task_vectors, demo.paths["base"],
                     [demo.paths["ft-colour"], demo.paths["ft-home"]], out, device="cpu", overwrite=True)
    results = run.results
    norms = [f"|Δ {task}| = {results.global_l2(i):.3f}" for i, task in enumerate(("colour", "home"))]
    detail = ", ".join([*norms, f"cosine {results.cosines()[0][1]:+.3f}"])
    log_lines(demo, "task-vectors", [detail, f"wrote {out}"])
    return detail


@step("merge", "Merge the two fine-tunes (exp L2 weights)", needs=("fine-tunes",))
def _merge(demo: Demo) -> str:
    out = demo.path("merged", "models/merged")
    options = MergeOptions(base=str(demo.paths["base"]), models=[str(demo.paths["ft-colour"]),
                           str(demo.paths["ft-home"])], output=str(out), mode="exp", device="cpu", overwrite=True)
    job = run_logged(demo, "merge", prepare, options)
    log_lines(demo, "merge", [f"{name}: L2 {'-' if norm is None else f'{norm:.6g}'}, weight {weight:.4f}"
                                 for name, norm, weight in job.table()])
    run_logged(demo, "merge", execute, job)
    log_lines(demo, "merge", [f"wrote {out}"])
    evaluate_model(demo, "merged", out)
    return f"merged model: colour {_accuracy(demo, 'merged')}, home {_accuracy(demo, 'merged', 'home')}"


def merge_note(evals: dict[str, dict[str, dict]]) -> list[str]:
    """Two lines under the table saying what its ``merged`` row means; [] when the merge did not run.

    A task counts as kept when the merged model's accuracy is nearer its fine-tune's than the base's:
    with colour 29% (base 33%, fine-tune 100%) and home 100% (base 25%, fine-tune 100%) ->
    ``['merged: the two fine-tunes in one model, ...', 'it keeps home (100%) but loses colour (29%, ...)']``.
    """
    merged = evals.get("merged")
    if not merged:
        return []
    kept, lost = [], []
    for task, result in merged.items():
        alone, base = evals.get(f"fine-tune {task}", {}).get(task), evals.get("base", {}).get(task)
        if alone is None or base is None:
            continue
        share = f"{task} ({result['accuracy']:.0%})"
        (kept if result["accuracy"] >= (alone["accuracy"] + base["accuracy"]) / 2 else lost).append(share)
    first = "merged: the two fine-tunes in one model, weighted by their task-vector norms (paw merge --mode exp);"
    if not lost:
        return [first, f"it keeps both tasks: {' and '.join(kept)}, as each fine-tune alone does."]
    held = f"keeps {' and '.join(kept)} but " if kept else ""
    return [first, f"it {held}loses {' and '.join(lost)}, back near chance: a merge is not a sure thing."]


@step("plots", "Training curves", needs=("train-lora",))
def _plots(demo: Demo) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    for task, losses in demo.curves.items():
        ax.plot(range(1, len(losses) + 1), losses, label=f"{task} LoRA")
    ax.set(xlabel="step", ylabel="answer-token loss", title="LoRA training (paw demo)")
    ax.legend()
    fig.tight_layout()
    path = save_figure(fig, demo.path("plot", "plots/lora_training_loss.png"))
    return str(path)


# --------------------------------------------------------------------------- driver

@dataclass
class DemoReport:
    outdir: Path
    steps: list[StepResult]
    evals: dict[str, dict[str, dict]]
    summary_path: Path
    seconds: float


def run_demo(outdir: str | Path, *, quick: bool = False, overwrite: bool = False,
             on_step: Callable[[StepResult], None] | None = None,
             on_begin: Callable[[int, Step], None] | None = None) -> DemoReport:
    """Run every registered step in order; returns what happened (also in ``outdir/summary.json``).

    A folder a previous demo wrote (it holds :data:`MANIFEST`) is replaced without ``overwrite``:
    the demo's own entries (:data:`OWN_ENTRIES`) are removed, anything else in it is left alone.
    Any other non-empty folder needs ``overwrite``.
    """
    import torch

    outdir = Path(outdir)
    if is_previous_demo(outdir):
        _remove_own_entries(outdir)
    elif outdir.exists() and any(outdir.iterdir()):
        check_output(outdir, overwrite=overwrite)
    outdir.mkdir(parents=True, exist_ok=True)
    settings = DemoSettings.for_mode(quick)
    # written first, so that a run that stops half-way is still recognised and replaced next time
    write_manifest(outdir, MANIFEST, command=f"paw demo{' --quick' if quick else ''} --outdir {outdir}",
                   inputs={}, settings=asdict(settings))
    quiet_transformers()
    demo = Demo(outdir=outdir, settings=settings)
    results: list[StepResult] = []
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread beats two fighting over a shared CPU
    try:
        for index, entry in enumerate(STEPS.values(), start=1):
            if on_begin is not None:
                on_begin(index, entry)
            result = _run_step(demo, entry, {r.name for r in results if r.status is StepStatus.OK})
            results.append(result)
            if on_step is not None:
                on_step(result)
    finally:
        torch.set_num_threads(threads)
    summary = _write_summary(demo, results)
    return DemoReport(outdir, results, demo.evals, summary, time.perf_counter() - start)


MANIFEST = "paw_demo.json"  # marks a folder as the demo's own output
OWN_ENTRIES = ("adapters", "data", "logs", "models", "plots", "reports", "summary.json", MANIFEST)


def is_previous_demo(outdir: Path) -> bool:
    """Whether ``outdir`` holds a manifest a previous ``paw demo`` wrote (JSON with ``paw_version``)."""
    try:
        data = json.loads((outdir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "paw_version" in data


def _remove_own_entries(outdir: Path) -> None:
    """Remove what a previous demo wrote in ``outdir``; files anyone else put there stay."""
    for name in OWN_ENTRIES:
        entry = outdir / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()


def _run_step(demo: Demo, entry: Step, done: set[str]) -> StepResult:
    result = StepResult(entry.name, entry.title, StepStatus.OK)
    missing = [n for n in entry.needs if n not in done]
    if missing:
        result.status, result.reason = StepStatus.SKIPPED, f"needs {', '.join(missing)}"
        return result
    began = time.perf_counter()
    try:
        result.detail = entry.run(demo)
    except PawError as err:
        result.status, result.reason = StepStatus.FAILED, str(err)
    except Exception as err:  # a bug in one step must not hide the others' results
        result.status, result.reason = StepStatus.FAILED, f"{type(err).__name__}: {err}"
    result.seconds = time.perf_counter() - began
    return result


def _write_summary(demo: Demo, results: list[StepResult]) -> Path:
    data = {
        "settings": asdict(demo.settings),
        "steps": [{"name": r.name, "title": r.title, "status": r.label, "detail": r.detail} for r in results],
        "evaluations": demo.evals,
        "paths": {k: str(v) for k, v in sorted(demo.paths.items())},
    }
    return write_json(demo.outdir / "summary.json", data)
