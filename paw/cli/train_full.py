"""``paw train-full``: fully fine-tune a model on the right answers of a multiple-choice set."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE, SEED, command_line
from paw.evaluate.formats import READERS  # light: the readers are plain functions

FORMAT_HELP = (f"Data layout: auto (detected from the first line), {', '.join(READERS)} "
               "(mc: flat question/choices/answer).")


def register(app: typer.Typer) -> None:
    app.command("train-full")(train_full_command)


def train_full_command(
    model: str = typer.Option(..., "--model", help="Base model folder or cached Hugging Face id."),
    data: Path = typer.Option(..., "--data", help="Training multiple-choice JSON-lines file (the right answers are learnt)."),
    output: Path = typer.Option(..., "--output", help="Model folder to create (float32 safetensors, metrics.json)."),
    steps: int = typer.Option(300, "--steps", help="Optimiser steps."),
    batch_size: int = typer.Option(8, "--batch-size", help="Sequences per step."),
    lr: float = typer.Option(1e-5, "--lr", help="AdamW learning rate (constant)."),
    weight_decay: float = typer.Option(0.0, "--weight-decay", help="AdamW decoupled weight decay."),
    max_grad_norm: float = typer.Option(1.0, "--max-grad-norm", help="Clip the gradient norm (0: off)."),
    freeze_embeddings: bool = typer.Option(False, "--freeze-embeddings",
                                           help="Keep the input embedding (and a tied head) fixed."),
    seed: int = SEED,
    eval_data: Path | None = typer.Option(None, "--eval-data", help="Test set: metrics before and after training."),
    format: str = typer.Option("auto", "--format", help=FORMAT_HELP),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Train on the first N items only."),
    eval_limit: int | None = typer.Option(None, "--eval-limit", min=1, help="Evaluate on the first N items only."),
    device: str = DEVICE,
    overwrite: bool = OVERWRITE,
):
    """Fully fine-tune every weight on the right answers (train-lora's loss), saved in float32.

    Makes full fine-tunes for paw extract-lora, paw task-vectors and paw transfer-lora --finetune.

    Example: paw train-full --model ./tiny/base --data train.jsonl --eval-data test.jsonl --output ./tiny/ft --steps 100 --lr 1e-3
    """
    from paw.evaluate.finetune import FinetuneOptions, finetune_model

    options = FinetuneOptions(steps=steps, batch_size=batch_size, lr=lr, weight_decay=weight_decay,
                              max_grad_norm=max_grad_norm, freeze_embeddings=freeze_embeddings, seed=seed,
                              device=device)
    result = finetune_model(model, data, output, options, eval_data=eval_data, format=format, limit=limit,
                            eval_limit=eval_limit, overwrite=overwrite, command=command_line())
    m = result.metrics
    typer.echo(f"train loss     {m['train_loss_start']:.4f} -> {m['train_loss_end']:.4f} over {m['steps']} steps "
               f"({m['trainable_parameters']:,} trainable parameters, {m['train_seconds']:.1f} CPU s)")
    if "test/accuracy" in m:
        typer.echo(f"accuracy       {m['base/accuracy']:.4f} -> {m['test/accuracy']:.4f} ± {m['test/stderr']:.4f}"
                   f"   (n={m['test/n']})")
        typer.echo(f"accuracy_norm  {m['base/accuracy_norm']:.4f} -> {m['test/accuracy_norm']:.4f}")
    typer.echo(f"model: {output}")
