"""Model cards of the trainers' outputs: ``paw train-lora`` (a PEFT adapter) and ``paw train-full`` (a model).

Built from what the run knows (base, data, settings, the metrics it returns), so the card says what
``metrics.json`` says, in words: the base model, the data, the steps and the rank, the training
loss, and the test accuracy before and after when ``--eval-data`` was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paw.io.model_card import Card


def training_card(output: str | Path, *, lora: bool, model: str | Path, data: str | Path,
                  eval_data: str | Path | None, settings: Mapping[str, Any], metrics: Mapping[str, Any],
                  command: str | None) -> Card:
    """The card of a trainer's output folder; ``settings`` as the run recorded them in its manifest."""
    what = "A LoRA adapter for" if lora else "A full fine-tune of"
    how = "`paw train-lora`" if lora else "`paw train-full` (every weight trained, saved in float32)"
    intro = (f"{what} `{model}`, trained with PAW's {how} on the right answers of a multiple-choice set: "
             "cross-entropy on the answer tokens only, the question masked.")
    sections = [("Training", tuple(_table(model, data, settings, metrics, lora=lora)))]
    if "test/accuracy" in metrics:
        sections.append(("Evaluation", tuple(_evaluation(eval_data, metrics))))
    tags = ("paw", "lora", "train-lora") if lora else ("paw", "full-fine-tune", "train-full")
    return Card(Path(output).name, "peft" if lora else "transformers", inputs=(str(model),), tags=tags,
                intro=intro, sections=tuple(sections), command=command)


def _table(model, data, settings: Mapping[str, Any], metrics: Mapping[str, Any], *, lora: bool) -> list[str]:
    rows = [("base model", f"`{model}`"), ("data", f"`{data}` ({metrics.get('n_train', '?')} items)"),
            ("steps", settings.get("steps")), ("batch size", settings.get("batch_size")),
            ("learning rate", settings.get("lr"))]
    if lora:
        rows += [("rank", settings.get("rank")), ("alpha", settings.get("alpha")),
                 ("target modules", f"`{settings.get('target_modules')}`")]
    rows += [(name.replace("_", " "), settings[name]) for name in ("schedule", "warmup", "accumulation", "clip",
                                                                   "weight_decay", "max_grad_norm")
             if settings.get(name) not in (None, "")]
    window = min(10, int(settings.get("steps") or 10))  # what train_loss_start and _end average
    rows += [("seed", settings.get("seed")),
             ("train loss", f"{metrics['train_loss_start']:.4f} -> {metrics['train_loss_end']:.4f} "
                            f"(mean of the first and of the last {window} steps)")]
    return ["| setting | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows if v is not None)]


def _evaluation(eval_data, metrics: Mapping[str, Any]) -> list[str]:
    def cell(prefix: str, name: str) -> str:
        value, stderr = metrics[f"{prefix}/{name}"], metrics.get(f"{prefix}/{_stderr(name)}")
        return f"{value:.4f}" + ("" if stderr is None else f" ± {stderr:.4f}")

    return [f"Multiple-choice accuracy on `{eval_data}` ({metrics['test/n']} items), as lm-evaluation-harness "
            "scores it (`acc`, and `acc_norm`: log-likelihood per character of the answer):", "",
            "| metric | base | trained |", "| --- | --- | --- |",
            *(f"| {name} | {cell('base', name)} | {cell('test', name)} |" for name in ("accuracy", "accuracy_norm")
              if f"base/{name}" in metrics and f"test/{name}" in metrics)]


def _stderr(name: str) -> str:
    return "stderr_norm" if name.endswith("_norm") else "stderr"
