"""``paw transfer-lora``: move a LoRA adapter to another base model without training data."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE, TRACK, choices
from paw.transfer.layers import LAYER_MAPS  # light: torch is imported inside the functions
from paw.transfer.pipeline import method_names

Method = choices("Method", method_names())
LayerMap = choices("LayerMap", LAYER_MAPS)


def register(app: typer.Typer) -> None:
    @app.command("transfer-lora")
    def transfer_lora_cmd(
        adapter: Path = typer.Option(..., "--adapter", help="PEFT LoRA adapter folder trained on the source base."),
        source_base: str = typer.Option(..., "--source-base", help="The adapter's base model (folder or cached ID)."),
        target_base: str = typer.Option(..., "--target-base", help="The model to move the adapter to."),
        output: Path = typer.Option(..., "--output", "-o", help="Output adapter folder (with its report)."),
        method: Method = typer.Option("auto", "--method", help="How factors are mapped; auto picks per "
                                      "module and refuses unrelated targets."),
        subspace_rank: int = typer.Option(None, "--subspace-rank", min=1,
                                          help="R of the truncated SVDs [default: min(32, min(out,in)/4)]."),
        min_similarity: float = typer.Option(None, "--min-similarity", min=0.0, max=1.0,
                                             help="Skip modules whose subspace similarity is below this "
                                                  "[auto default: chance + 0.25*(1-chance)]."),
        layer_map: LayerMap = typer.Option("name", "--layer-map",
                                           help="How layers pair up when depths differ."),
        vocab_map: Path = typer.Option(None, "--vocab-map", help="paw-vocab-map JSON when tokenizers differ."),
        ridge: float = typer.Option(1e-2, "--ridge", help="Ridge strength of least-squares maps, relative to "
                                    "the mean eigenvalue."),
        force: bool = typer.Option(False, "--force", help="Transfer even when auto finds the target unrelated."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
        track: str = TRACK,
    ):
        """Transfer a LoRA adapter to another base model (training-free, rank-preserving) with a report.

        Example: paw transfer-lora --adapter ./tiny/lora --source-base ./tiny/base --target-base ./tiny/finetune -o ./moved
        """
        from paw.cli._options import command_line, track_once
        from paw.io.tracking import check_kind
        from paw.io.transfer_report import REPORT_JSON
        from paw.transfer.run import transfer_adapter

        check_kind(track)
        result = transfer_adapter(adapter, source_base, target_base, output, method=method.value,
                                  subspace_rank=subspace_rank, min_similarity=min_similarity,
                                  layer_map=layer_map.value, vocab_map=vocab_map, ridge=ridge, force=force,
                                  device=device, overwrite=overwrite, command=command_line())
        report, inputs = result.report, result.inputs
        s = report["summary"]
        typer.echo(f"transferred {s['transferred']}/{report['adapter']['modules']} modules "
                   f"({', '.join(f'{k}: {v}' for k, v in s['methods'].items())}) -> {output}")
        typer.echo(f"median subspace similarity {s['median_similarity']} (chance {s['median_chance']}), "
                   f"median re-mix residual {s['median_remix_residual']}, max norm ratio {s['max_norm_ratio']}")
        lay = report["layers"]
        if lay["source_without_partner"] or lay["target_without_partner"]:
            typer.echo(f"layers without partner: source {lay['source_without_partner']}, "
                       f"target {lay['target_without_partner']}")
        if lay["source"] != lay["target"] and lay["how"] == "name":
            typer.echo(f"depths differ ({lay['source']} vs {lay['target']} layers): consider --layer-map "
                       "similarity (pruned/grown targets) or relative-depth")
        if s["not_transferred"]:
            typer.echo(f"{s['not_transferred']} module(s) not transferred; reasons in {output / REPORT_JSON}")
        for warning in report.get("warnings", []):
            typer.echo(f"warning: {warning}", err=True)
        track_once(track, output, {"command": command_line(), "method": method.value, **inputs},
                   {"transfer": s})
