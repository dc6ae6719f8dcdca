"""Small full fine-tuning on the correct answers of a multiple-choice set: every weight trains.

The same data path and loss as :func:`paw.evaluate.train.train_lora` (the right choice's tokens after
each question, cross-entropy on the answer tokens only, the context masked; the same seeded batch
order), but AdamW updates all parameters instead of a LoRA. It exists to make *full fine-tunes*
with a known task gain, the input :func:`paw.extract.extract_lora` turns into a LoRA and
``paw transfer-lora --finetune`` moves::

    from paw.evaluate.finetune import FinetuneOptions, finetune_model
    out = finetune_model("./tiny/base", "train.jsonl", "./tiny/ft", FinetuneOptions(steps=200, lr=1e-4),
                         eval_data="test.jsonl")
    out.metrics["base/accuracy"], out.metrics["test/accuracy"]

The weights are saved in float32 whatever the base's dtype: a few hundred steps at ``lr`` 1e-5 move a
weight by far less than one bfloat16 step (2⁻⁸ relative), so rounding to bfloat16 would erase most
of the update. Reproducible on CPU: ``torch.manual_seed(seed)`` and the seeded batch order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from paw import __version__
from paw.device import resolve_device
from paw.errors import PawError
from paw.evaluate.cards import training_card
from paw.evaluate.encode import max_length_of, pad_id_of
from paw.evaluate.formats import read_items
from paw.evaluate.items import MCItem
from paw.evaluate.options import FORMATS
from paw.evaluate.train import batch_answer_loss, batches_in_order, encode_answer, evaluate_items, prefixed
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.hub import quiet_transformers
from paw.io.lm import load_lm
from paw.io.manifest import describe_input, records_call
from paw.io.writer import write_checkpoint
from paw.knobs import knob, require
from paw.train import SCHEDULES, Recipe, run
from paw.validate import FLOAT32_MAX, finite

PathLike = str | Path
METRICS_JSON = "metrics.json"
MANIFEST_JSON = "paw_train_full.json"


@dataclass(frozen=True)
class TrainFullFiles:
    """What ``paw train-full`` reads and writes, and which items it takes."""

    model: str | None = knob(None, "Base model folder or Hub id (org/name[@rev]; downloaded if not cached).")
    data: str | Path | None = knob(None, "Training multiple-choice JSON-lines file (the right answers are learnt).",
                                   cli=Path)
    output: str | Path | None = knob(None, "Model folder to create (float32 safetensors, metrics.json).", cli=Path)
    eval_data: str | Path | None = knob(None, "Test set: metrics before and after training.", cli=Path)
    format: str = knob("auto", "Data layout: auto (detected from the first line), or one of the readers.",
                       choices=FORMATS)
    limit: int | None = knob(None, "Train on the first N items only.", min=1)
    eval_limit: int | None = knob(None, "Evaluate on the first N items only.", min=1)

    def check(self) -> None:
        require(self, "model", "data", "output")


@dataclass(frozen=True)
class FinetuneOptions:
    """Every knob of :func:`finetune` / :func:`finetune_model`; :meth:`check` runs before a model is read."""

    steps: int = knob(300, "Optimiser steps.")
    batch_size: int = knob(8, "Sequences per step.")
    lr: float = knob(1e-5, "AdamW learning rate (the peak, under --schedule).")
    weight_decay: float = knob(0.0, "AdamW decoupled weight decay.")
    max_grad_norm: float = knob(1.0, "Clip the gradient norm (0: off).")
    schedule: str = knob("constant", "Learning-rate schedule: constant, warmup (linear, then constant) or cosine.",
                         choices=SCHEDULES)
    warmup: int = knob(0, "Linear warm-up steps of the warmup and cosine schedules.", min=0)
    accumulation: int = knob(1, "Micro-batches of --batch-size per optimiser step (gradient accumulation).", min=1)
    freeze_embeddings: bool = knob(False, "Keep the input embedding (and a tied head) fixed.")
    seed: int = knob(0, "Random seed; same inputs and seed give byte-identical outputs.")
    device: str = "cpu"              # the run's --device (paw.knobs.RunOptions)

    def check(self) -> FinetuneOptions:
        """Refuse bad values naming the flag (one line, exit 2 in the CLI)."""
        for flag, value in (("--steps", self.steps), ("--batch-size", self.batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PawError(f"{flag} must be an integer of at least 1, got {value!r}")
        for flag, value, positive in (("--lr", self.lr, True), ("--weight-decay", self.weight_decay, False),
                                      ("--max-grad-norm", self.max_grad_norm, False)):
            ok = isinstance(value, (int, float)) and math.isfinite(value) and (value > 0 if positive else value >= 0)
            if not ok:
                raise PawError(f"{flag} must be a finite number {'above' if positive else 'of at least'} 0, got {value!r}")
            finite(flag, value, limit=FLOAT32_MAX)  # 1e39 is inf to float32 AdamW
        for flag, value in (("--warmup", self.warmup), ("--accumulation", self.accumulation)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (flag == "--accumulation"):
                raise PawError(f"{flag} must be an integer of at least {int(flag == '--accumulation')}, got {value!r}")
        if self.schedule not in SCHEDULES:
            raise PawError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        return self

    def recipe(self) -> Recipe:
        """The optimiser steps these options ask for (:class:`paw.train.Recipe`)."""
        return Recipe(steps=self.steps, lr=self.lr, schedule=self.schedule, warmup=self.warmup,
                      accumulation=self.accumulation, clip=self.max_grad_norm or None, seed=self.seed).check()


def finetune(model, tokenizer, items: Sequence[MCItem], options: FinetuneOptions = FinetuneOptions(), *,
             eval_items: Sequence[MCItem] | None = None, progress: bool = True) -> dict[str, Any]:
    """Train every weight of ``model`` (in place) on the right answers of ``items``; returns the metrics.

    ``metrics``: the options, ``n_train``, ``trainable_parameters``, ``train_losses`` (every step),
    ``train_loss_start`` / ``train_loss_end`` (mean of the first / last 10 steps), ``train_seconds``
    (process CPU time), and with ``eval_items`` the :func:`~paw.evaluate.mc.evaluate` figures before
    (``base/...``) and after (``test/...``) training. The steps are :func:`paw.train.run`'s
    (``options.recipe()``): a NaN or infinite loss stops it with :class:`paw.train.NonFiniteLoss`, naming the step.
    """
    import time

    import torch

    options.check()
    if not items:
        raise PawError("no training items")
    model.to(resolve_device(options.device))
    metrics: dict[str, Any] = {**asdict(options), "n_train": len(items)}
    if eval_items:
        metrics.update(prefixed("base", evaluate_items(model, tokenizer, eval_items, options.batch_size, progress)))
    torch.manual_seed(options.seed)
    params = _trainable(model, options.freeze_embeddings)
    metrics["trainable_parameters"] = sum(p.numel() for p in params)
    start = time.process_time()
    losses = _train(model, tokenizer, items, params, options, progress)
    window = max(1, min(10, options.steps))
    metrics.update(train_seconds=time.process_time() - start, train_losses=losses,
                   train_loss_start=sum(losses[:window]) / window, train_loss_end=sum(losses[-window:]) / window)
    if eval_items:
        metrics.update(prefixed("test", evaluate_items(model, tokenizer, eval_items, options.batch_size, progress)))
    return metrics


def _trainable(model, freeze_embeddings: bool) -> list:
    """The parameters AdamW updates: all of them, less the input embedding when asked (a tied head is
    the same tensor, so it stays fixed too)."""
    frozen = {id(model.get_input_embeddings().weight)} if freeze_embeddings else set()
    params = []
    for p in model.parameters():
        p.requires_grad_(id(p) not in frozen)
        if id(p) not in frozen:
            params.append(p)
    return params


def _train(model, tokenizer, items, params, options: FinetuneOptions, progress: bool) -> list[float]:
    import torch

    device = next(model.parameters()).device
    max_length = max_length_of(model)
    encoded = [encode_answer(tokenizer, item, max_length) for item in items]
    optimizer = torch.optim.AdamW(params, lr=options.lr, weight_decay=options.weight_decay)
    pad_id = pad_id_of(tokenizer)
    order = batches_in_order(len(encoded), options.batch_size * options.accumulation, options.steps, options.seed)
    model.train()
    done = run(options.recipe(), params, optimizer,
               lambda batch: batch_answer_loss(model, [encoded[i] for i in batch], pad_id, device), order.__getitem__,
               progress="fine-tuning" if progress else None)
    model.eval()
    return done.losses


@dataclass(frozen=True)
class FineTuned:
    """A full fine-tune written to ``output`` (a Hugging Face folder with ``metrics.json``)."""

    output: Path
    metrics: dict[str, Any]


@records_call
def finetune_model(model: PathLike, data: PathLike, output: PathLike, options: FinetuneOptions = FinetuneOptions(),
                   *, eval_data: PathLike | None = None, format: str = "auto", limit: int | None = None,
                   eval_limit: int | None = None, overwrite: bool = False,
                   command: str | None = None) -> FineTuned:
    """Fully fine-tune the model folder ``model`` on ``data`` and write it to ``output`` (float32).

    The folder holds exactly the base checkpoint's tensor names (a tied head stays tied), the base's
    tokenizer and side files, ``metrics.json`` and ``paw_train_full.json`` (provenance); it appears
    atomically. Bad options, data or paths are refused before the model is read. ``metrics.json`` is
    the returned metrics less ``train_seconds``: a duration would make a seeded rerun's bytes differ.
    """
    quiet_transformers()
    options.check()
    output = Path(output)
    check_output(output, overwrite=overwrite, inputs=[model, data, eval_data])
    ckpt = open_checkpoint(model)  # a wrong folder is named before anything is trained
    names = list(ckpt)
    items = read_items(data, format=format, limit=limit)
    eval_items = read_items(eval_data, format=format, limit=eval_limit) if eval_data else None
    lm, tokenizer = load_lm(model, device=resolve_device(options.device), dtype="float32")
    metrics = finetune(lm, tokenizer, items, options, eval_items=eval_items)
    state = lm.state_dict()
    missing = [n for n in names if n not in state]
    if missing:
        raise PawError(f"the loaded model has no tensor {missing[0]!r} of the checkpoint; "
                       "train-full writes plain Hugging Face folders only", path=model)
    config = {**(ckpt.config or lm.config.to_diff_dict()), "dtype": "float32"}  # the base's config.json, in float32
    if "torch_dtype" in config:
        config["torch_dtype"] = "float32"
    inputs = {k: describe_input(v) for k, v in (("model", model), ("data", data), ("eval_data", eval_data)) if v}
    manifest = {"paw_version": __version__, "command": command, "inputs": inputs, "options": asdict(options)}
    tensors = ((n, state[n].detach().to("cpu").contiguous()) for n in names)
    card = training_card(output, lora=False, model=model, data=data, eval_data=eval_data, settings=asdict(options),
                         metrics=metrics, command=command)
    write_checkpoint(output, tensors, config=config, copy_from=ckpt.path, overwrite=overwrite,
                     extra_files={METRICS_JSON: {k: v for k, v in metrics.items() if k != "train_seconds"},
                                  MANIFEST_JSON: manifest}, card=card)
    return FineTuned(output, metrics)
