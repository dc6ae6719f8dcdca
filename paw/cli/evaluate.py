"""``paw eval`` and ``paw train-lora``: measure a model on multiple-choice data, train a small LoRA."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import (
    ALLOW_NONFINITE,
    DEVICE,
    OVERWRITE,
    SEED,
    RunOptions,
    command_line,
    options_command,
)
from paw.evaluate.formats import READERS  # light: the readers are plain functions
from paw.evaluate.options import EvalOptions

FORMAT_HELP = (f"Data layout: auto (detected from the first line), {', '.join(READERS)} "
               "(mc: flat question/choices/answer).")
DTYPE = typer.Option("auto", "--dtype", help="Model dtype: auto (float32 on CPU, checkpoint dtype on GPU), "
                                             "float32, bfloat16, float16.")


def register(app: typer.Typer) -> None:
    options_command(app, "eval", [(EvalOptions, ""), (RunOptions, "")], eval_command, doc=eval_command.__doc__)
    app.command("train-lora")(train_lora_command)


def eval_command(options: EvalOptions, run: RunOptions) -> None:
    """Multiple-choice accuracy (raw and length-normalised), its standard error, and the loss and
    perplexity of the correct answers.

    Example: paw eval --model ./paw_demo/models/base --data ./paw_demo/data/colour.jsonl --limit 200

    Proxy-tuning (a LoRA of another model, applied at scoring time): paw eval --model ./b --data d.jsonl --proxy-base ./a --proxy-adapter ./a-lora
    """
    from paw.evaluate.pipeline import evaluate_model

    result = evaluate_model(options, run, command=command_line())
    if "proxy" in result.metrics:
        alone = result.metrics["proxy"]["target_alone"]
        typer.echo(f"target alone   {alone['accuracy']:.4f} ± {alone['stderr']:.4f}   (proxy-tuned below, "
                   f"scale {result.metrics['proxy']['scale']:g})")
    _print_metrics(result.metrics)
    if result.output is not None:
        typer.echo(f"results: {result.output}")


def train_lora_command(
    model: str = typer.Option(..., "--model", help="Base model folder, .gguf file or cached Hugging Face id."),
    data: Path = typer.Option(..., "--data", help="Training multiple-choice JSON-lines file (the right answers are learnt)."),
    output: Path = typer.Option(..., "--output", help="PEFT adapter folder to create (with metrics.json)."),
    rank: int = typer.Option(16, "--rank", min=1, help="LoRA rank r."),
    alpha: float = typer.Option(32, "--alpha", help="LoRA alpha (scaling alpha / r)."),
    target_modules: str = typer.Option("all-linear", "--target-modules",
                                       help="all-linear, or a comma-separated list such as q_proj,v_proj."),
    steps: int = typer.Option(600, "--steps", min=1, help="Optimiser steps."),
    batch_size: int = typer.Option(6, "--batch-size", min=1, max=4096, help="Sequences per step."),
    lr: float = typer.Option(1.5e-5, "--lr", help="AdamW learning rate (constant)."),
    seed: int = SEED,
    eval_data: Path | None = typer.Option(None, "--eval-data", help="Test set: metrics before and after training."),
    format: str = typer.Option("auto", "--format", help=FORMAT_HELP),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Train on the first N items only."),
    eval_limit: int | None = typer.Option(None, "--eval-limit", min=1, help="Evaluate on the first N items only."),
    save_every: int | None = typer.Option(None, "--save-every", min=1,
                                          help="Every N steps save OUT/checkpoint-STEP adapter folders and a "
                                               "resumable training state in OUT-work/."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the training state in OUT-work/ "
                                "(same settings; a run killed loses at most --save-every steps)."),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing",
                                                help="Recompute activations in the backward pass: less memory, "
                                                     "about a third more compute."),
    fsdp: bool = typer.Option(False, "--fsdp", help="Under torchrun: shard the model's weights (and the LoRA) over "
                              "the processes with torch FSDP2, for a model that does not fit one device (docs/scale.md)."),
    device: str = DEVICE,
    dtype: str = DTYPE,
    track: str = typer.Option("none", "--track", help="Experiment tracking: none, csv, or swanlab (offline); "
                                                       "logs go to OUT-tracking/ beside the adapter."),
    overwrite: bool = OVERWRITE,
    allow_nonfinite: bool = ALLOW_NONFINITE,  # honoured by the writer (paw.io.finite, opened in _options)
):
    """Train a PEFT LoRA on the correct answers of a multiple-choice set (loss on answer tokens only).

    Example: paw train-lora --model ./tiny/base --data train.jsonl --eval-data test.jsonl --output ./lora --steps 200 --lr 3e-3

    On N processes: torchrun --nproc-per-node N -m paw train-lora ... (same --batch-size and --lr; docs/scale.md)
    """
    from paw.distributed import is_main
    from paw.evaluate.pipeline import train_lora_adapter

    result = train_lora_adapter(model, data, output, rank=rank, alpha=alpha, target_modules=target_modules,
                                steps=steps, batch_size=batch_size, lr=lr, seed=seed, eval_data=eval_data,
                                format=format, limit=limit, eval_limit=eval_limit, save_every=save_every,
                                resume=resume, gradient_checkpointing=gradient_checkpointing, fsdp=fsdp,
                                device=device, dtype=dtype, track=track, overwrite=overwrite, command=command_line())
    if not is_main():
        return
    _print_training(result.metrics)
    typer.echo(f"adapter: {output}" + (f"  (tracking: {result.tracking})" if result.tracking else ""))


def _print_metrics(metrics: dict, prefix: str = "") -> None:
    m = {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}
    typer.echo(f"accuracy       {m['accuracy']:.4f} ± {m['stderr']:.4f}   (n={m['n']})")
    typer.echo(f"accuracy_norm  {m['accuracy_norm']:.4f} ± {m['stderr_norm']:.4f}")
    typer.echo(f"loss           {m['loss']:.4f}   perplexity {m['perplexity']:.2f}   ({m['n_tokens']} answer tokens)")


def _print_training(metrics: dict) -> None:
    typer.echo(f"train loss     {metrics['train_loss_start']:.4f} -> {metrics['train_loss_end']:.4f} "
               f"over {metrics['steps']} steps ({metrics['trainable_parameters']:,} trainable parameters)")
    if "test/accuracy" in metrics:
        typer.echo(f"test accuracy  {metrics['base/accuracy']:.4f} -> {metrics['test/accuracy']:.4f}")
        _print_metrics(metrics, prefix="test/")
