"""``paw extract-lora``: a PEFT LoRA from a full fine-tune, by truncated SVD of fine-tune − base per module."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE, SEED, command_line


def register(app: typer.Typer) -> None:
    app.command("extract-lora")(extract_lora_command)


def extract_lora_command(
    base: str = typer.Option(..., "--base", help="Base model: folder, weight file, .gguf or cached HF id."),
    finetune: str = typer.Option(..., "--finetune", help="Full fine-tune of the base (same architecture and shapes)."),
    output: Path = typer.Option(..., "--output", help="PEFT adapter folder to create (with extract_report.json)."),
    rank: int | None = typer.Option(None, "--rank", help="One LoRA rank for every module (16 when neither "
                                    "--rank nor --energy is given)."),
    energy: float | None = typer.Option(None, "--energy", help="Per module, the smallest rank holding this share "
                                        "of the delta's squared Frobenius norm, in (0, 1]."),
    max_rank: int | None = typer.Option(None, "--max-rank", help="Cap on any module's rank (default: --rank, "
                                        "or 128 with --energy)."),
    exact: bool = typer.Option(False, "--exact", help="Full SVD instead of the randomised one (slower on "
                               "large matrices; small ones are exact anyway)."),
    embed_energy: float = typer.Option(0.99, "--embed-energy", help="Embedding and head: a LoRA when the "
                                       "chosen rank holds this share of their delta, else saved whole "
                                       "(modules_to_save)."),
    seed: int = SEED,
    device: str = DEVICE,
    overwrite: bool = OVERWRITE,
):
    """Extract a PEFT LoRA from a full fine-tune: per projection, the truncated SVD of fine-tune − base.

    The folder loads onto the base with PeftModel.from_pretrained. extract_report.json gives, per
    module, the rank chosen, the energy held and the relative error ||D - BA|| / ||D||;
    energy_vs_rank.png plots energy against rank. Norms and biases are not carried (listed).

    Example: paw extract-lora --base tiny/base --finetune tiny/ft-math --output ft-lora --rank 8
    """
    from paw.extract import ExtractOptions, extract_lora

    options = ExtractOptions(rank=rank, energy=energy, max_rank=max_rank, exact=exact, embed_energy=embed_energy,
                             seed=seed, device=device, overwrite=overwrite)
    result = extract_lora(base, finetune, output, options, command=command_line())
    s = result.summary
    ranks = str(s["rank_min"]) if s["rank_min"] == s["rank_max"] else \
        f"{s['rank_min']}-{s['rank_max']} (median {s['rank_median']})"
    typer.echo(f"extracted {s['lora_modules']} LoRA modules, rank {ranks}: energy held {s['energy_held']:.4f}, "
               f"relative error {s['relative_error']:.4f}")
    typer.echo(f"modules_to_save {s['modules_to_save']}, unchanged {s['unchanged']}, not carried {s['not_carried']}")
    for note in result.report["notes"]:
        typer.echo(f"  {note}")
    typer.echo(f"adapter: {output}  (report: {output / 'extract_report.json'})")
