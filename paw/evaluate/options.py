"""What ``paw eval`` is asked to do: one frozen dataclass, the source of its flags and of its ``--config`` keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.evaluate.formats import READERS  # light: the readers are plain functions
from paw.io.lm import DTYPES  # what load_lm accepts (light: torch is imported inside it)
from paw.knobs import knob, require
from paw.train.recipe import SCHEDULES  # light: no torch
from paw.validate import finite

FORMATS = ("auto", *READERS)


def batch_size_value(value: int | str) -> int | str:
    """``'auto'``, or a whole number >= 1 (typed as text on the command line).

    >>> batch_size_value("16"), batch_size_value("auto")
    (16, 'auto')
    """
    if value == "auto":
        return value
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise PawError(f"--batch-size {value!r}: a whole number >= 1, or auto")
    return int(text)


@dataclass(frozen=True)
class EvalOptions:
    """One evaluation: a model (with an adapter, or with another model's adapter shift: proxy-tuning) on one
    multiple-choice file."""

    model: str | None = knob(None, "Model folder, .gguf file or cached Hugging Face id.")
    data: str | Path | None = knob(None, "Multiple-choice JSON-lines file.", cli=Path)
    text: str | Path | None = knob(None, "Perplexity instead: a text file (one document) or .jsonl of {\"text\": ...}.",
                                   cli=Path)
    num_fewshot: int = knob(0, "Solved examples from --fewshot-data before each question.", min=0, max=1000)
    fewshot_data: str | Path | None = knob(None, "Where few-shot examples come from: a train split (never the item "
                                                 "itself).", cli=Path)
    seed: int = knob(1234, "Seed of the few-shot draw (1234: lm-eval's, so its examples).", min=0)
    max_length: int | None = knob(None, "Longest sequence, and the perplexity window, in tokens (default: the "
                                        "model's).", min=1)
    adapter: str | Path | None = knob(None, "PEFT LoRA folder to apply first.", cli=Path)
    format: str = knob("auto", "Data layout: auto (detected from the first line), or one of the readers "
                               "(mc: flat question/choices/answer).", choices=FORMATS)
    limit: int | None = knob(None, "Evaluate the first N items only.", min=1)
    batch_size: int | str = knob(8, "Sequences per forward pass, or auto (CUDA: from 64, halved on out of memory).",
                                 min=1, cli=str, parse=batch_size_value)
    output: str | Path | None = knob(None, "Write the metrics to this JSON file.", cli=Path)
    per_item: str | Path | None = knob(None, "Write every item's choices, log-likelihoods and pick to this "
                                             "JSON-lines file.", cli=Path)
    dtype: str = knob("auto", "Model dtype: auto (float32 on CPU, checkpoint dtype on GPU), float32, bfloat16, "
                              "float16.", choices=DTYPES)
    proxy_base: str | None = knob(None, "Proxy-tuning: the base model that --proxy-adapter was trained on (any "
                                        "tokenizer).")
    proxy_adapter: str | Path | None = knob(None, "Proxy-tuning: add what this LoRA changes in --proxy-base to every "
                                                  "choice's score (no training).", cli=Path)
    proxy_scale: float = knob(1.0, "Proxy-tuning: the factor on that shift.")

    def check(self) -> None:
        """Refuse what no evaluation can run, naming the flag, before a file is read."""
        require(self, "model")
        if self.text is not None:
            self._check_text()
        else:
            require(self, "data")
        if self.num_fewshot and self.fewshot_data is None:
            raise PawError(f"--num-fewshot {self.num_fewshot} needs --fewshot-data FILE (a train split; "
                           "the item itself is never its own example)")
        if self.fewshot_data is not None and not self.num_fewshot:
            raise PawError("--fewshot-data is for --num-fewshot K (K >= 1)")
        if (self.proxy_base is None) != (self.proxy_adapter is None):
            raise PawError("proxy-tuning needs both --proxy-base (the adapter's own base) and --proxy-adapter")
        finite("--proxy-scale", self.proxy_scale)
        if self.proxy_base is None and self.proxy_scale != 1.0:
            raise PawError("--proxy-scale is for --proxy-base and --proxy-adapter")
        if not 0 < self.proxy_scale <= 10:
            raise PawError(f"--proxy-scale {self.proxy_scale}: must be in (0, 10] (1: the adapter's shift as it is)")

    def _check_text(self) -> None:
        """``--text`` scores documents: none of the multiple-choice flags go with it."""
        given = [flag for flag, on in (("--data", self.data is not None), ("--num-fewshot", self.num_fewshot > 0),
                                       ("--proxy-base", self.proxy_base is not None),
                                       ("--format", self.format != "auto")) if on]
        if given:
            raise PawError(f"--text scores documents by perplexity; {given[0]} is for multiple-choice data")


@dataclass(frozen=True)
class TrainLoraOptions:
    """One LoRA trained on the right answers of a multiple-choice set (``paw train-lora``)."""

    model: str | None = knob(None, "Base model folder, .gguf file or cached Hugging Face id.")
    data: str | Path | None = knob(None, "Training multiple-choice JSON-lines file (the right answers are learnt).",
                                   cli=Path)
    output: str | Path | None = knob(None, "PEFT adapter folder to create (with metrics.json).", cli=Path)
    rank: int = knob(16, "LoRA rank r.", min=1)
    alpha: float = knob(32.0, "LoRA alpha (scaling alpha / r).")
    target_modules: str = knob("all-linear", "all-linear, or a comma-separated list of module names.")
    steps: int = knob(600, "Optimiser steps.", min=1)
    batch_size: int = knob(6, "Sequences per step.", min=1, max=4096)
    lr: float = knob(1.5e-5, "AdamW learning rate (the peak, under --schedule).")
    seed: int = knob(0, "Random seed; same inputs and seed give byte-identical outputs.")
    eval_data: str | Path | None = knob(None, "Test set: metrics before and after training.", cli=Path)
    format: str = knob("auto", "Data layout: auto (detected from the first line), or one of the readers.",
                       choices=FORMATS)
    limit: int | None = knob(None, "Train on the first N items only.", min=1)
    eval_limit: int | None = knob(None, "Evaluate on the first N items only.", min=1)
    save_every: int | None = knob(None, "Every N steps save OUT/checkpoint-STEP adapter folders and a resumable "
                                        "training state in OUT-work/.", min=1)
    resume: bool = knob(False, "Continue from the training state in OUT-work/ (same settings; a run killed loses "
                               "at most --save-every steps).")
    gradient_checkpointing: bool = knob(False, "Recompute activations in the backward pass: less memory, about a "
                                               "third more compute.")
    fsdp: bool = knob(False, "Under torchrun: shard the model's weights (and the LoRA) over the processes with torch "
                             "FSDP2, for a model that does not fit one device (docs/scale.md).")
    dtype: str = knob("auto", "Model dtype: auto (float32 on CPU, checkpoint dtype on GPU), float32, bfloat16, "
                              "float16.")
    schedule: str = knob("constant", "Learning-rate schedule: constant, warmup (linear, then constant) or cosine.",
                         choices=SCHEDULES)
    warmup: int = knob(0, "Linear warm-up steps of the warmup and cosine schedules.", min=0)
    accumulation: int = knob(1, "Micro-batches of --batch-size per optimiser step (gradient accumulation).", min=1)
    clip: float | None = knob(None, "Clip the gradient norm to this value (0: off) [default: off].", min=0)

    def check(self) -> None:
        require(self, "model", "data", "output")

    def knobs(self) -> dict:
        """The keyword arguments of :func:`paw.evaluate.pipeline.train_lora_adapter` past its three paths."""
        return {k: getattr(self, k) for k in ("rank", "alpha", "target_modules", "steps", "batch_size", "lr", "seed",
                                              "eval_data", "format", "limit", "eval_limit", "save_every", "resume",
                                              "gradient_checkpointing", "fsdp", "dtype", "schedule", "warmup",
                                              "accumulation", "clip")}
