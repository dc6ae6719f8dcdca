"""``paw train-full``: fully fine-tune a model on the right answers of a multiple-choice set."""

from __future__ import annotations

import dataclasses

import typer

from paw.cli._options import RunOptions, command_line, options_command, track_steps
from paw.evaluate.finetune import FinetuneOptions, TrainFullFiles


def register(app: typer.Typer) -> None:
    options_command(app, "train-full", [(TrainFullFiles, ""), (FinetuneOptions, ""), (RunOptions, "")],
                    train_full_command, doc=train_full_command.__doc__)


def train_full_command(files: TrainFullFiles, options: FinetuneOptions, run: RunOptions) -> None:
    """Fully fine-tune every weight on the right answers (train-lora's loss), saved in float32.

    Makes full fine-tunes for paw extract-lora, paw task-vectors and paw transfer-lora --finetune.

    Example: paw train-full --model ./tiny/base --data train.jsonl --eval-data test.jsonl --output ./tiny/ft --steps 100 --lr 1e-3
    """
    from paw.evaluate.finetune import finetune_model
    from paw.io.tracking import check_kind

    files.check()
    check_kind(run.track)   # before any heavy work
    options = dataclasses.replace(options, device=run.device)
    result = finetune_model(files.model, files.data, files.output, options, eval_data=files.eval_data,
                            format=files.format, limit=files.limit, eval_limit=files.eval_limit,
                            overwrite=run.overwrite, command=command_line())
    m = result.metrics
    typer.echo(f"train loss     {m['train_loss_start']:.4f} -> {m['train_loss_end']:.4f} over {m['steps']} steps "
               f"({m['trainable_parameters']:,} trainable parameters, {m['train_seconds']:.1f} CPU s)")
    if "test/accuracy" in m:
        se = "N/A" if m["test/stderr"] is None else f"{m['test/stderr']:.4f}"   # lm-eval's, N/A for one item
        typer.echo(f"accuracy       {m['base/accuracy']:.4f} -> {m['test/accuracy']:.4f} ± {se}   (n={m['test/n']})")
        typer.echo(f"accuracy_norm  {m['base/accuracy_norm']:.4f} -> {m['test/accuracy_norm']:.4f}")
    typer.echo(f"model: {files.output}")
    losses = m.get("train_losses", [])
    track_steps(run.track, files.output, {"command": command_line(), **dataclasses.asdict(options)},
                [*((step, {"train/loss": loss}) for step, loss in enumerate(losses, start=1)),
                 (len(losses), {k: v for k, v in m.items() if k != "train_losses"})])
