"""``paw extract-lora``: a PEFT LoRA from a full fine-tune, by truncated SVD of fine-tune − base per module."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from paw.cli._options import RunOptions, command_line, options_command
from paw.extract.pipeline import ExtractFiles, ExtractOptions  # light: torch is imported inside the functions


def register(app: typer.Typer) -> None:
    options_command(app, "extract-lora", [(ExtractFiles, ""), (ExtractOptions, ""), (RunOptions, "", ("track",))],
                    extract_lora_command, doc=extract_lora_command.__doc__)


def extract_lora_command(files: ExtractFiles, options: ExtractOptions, run: RunOptions) -> None:
    """Extract a PEFT LoRA from a full fine-tune: per projection, the truncated SVD of fine-tune − base.

    The folder loads onto the base with PeftModel.from_pretrained. extract_report.json gives, per
    module, the rank chosen, the energy held and the relative error ||D - BA|| / ||D||;
    energy_vs_rank.png plots energy against rank. Norms and biases are not carried (listed).

    Example: paw extract-lora --base tiny/base --finetune tiny/ft-math --output ft-lora --rank 8
    """
    from paw.extract import extract_lora

    files.check()
    options = dataclasses.replace(options, device=run.device, overwrite=run.overwrite)
    output = Path(files.output)
    result = extract_lora(files.base, files.finetune, output, options, command=command_line())
    s = result.summary
    ranks = str(s["rank_min"]) if s["rank_min"] == s["rank_max"] else \
        f"{s['rank_min']}-{s['rank_max']} (median {s['rank_median']})"
    typer.echo(f"extracted {s['lora_modules']} LoRA modules, rank {ranks}: energy held {s['energy_held']:.4f}, "
               f"relative error {s['relative_error']:.4f}")
    typer.echo(f"modules_to_save {s['modules_to_save']}, unchanged {s['unchanged']}, not carried {s['not_carried']}")
    for note in result.report["notes"]:
        typer.echo(f"  {note}")
    typer.echo(f"adapter: {output}  (report: {output / 'extract_report.json'})")
