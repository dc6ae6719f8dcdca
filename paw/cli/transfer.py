"""``paw transfer-lora``: move a LoRA adapter to another base model without training data."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE, TRACK


class Method(str, Enum):
    auto = "auto"
    copy = "copy"
    lora_x = "lora-x"
    cross_lora = "cross-lora"
    embed_map = "embed-map"
    structural = "structural"


class LayerMap(str, Enum):
    auto = "auto"
    name = "name"
    relative_depth = "relative-depth"
    similarity = "similarity"


def register(app: typer.Typer) -> None:
    @app.command("transfer-lora")
    def transfer_lora_cmd(
        adapter: Path = typer.Option(..., "--adapter", help="PEFT LoRA adapter folder trained on the source base."),
        source_base: str = typer.Option(..., "--source-base", help="The adapter's base model (folder or cached ID)."),
        target_base: str = typer.Option(..., "--target-base", help="The model to move the adapter to."),
        output: Path = typer.Option(..., "--output", "-o", help="Output adapter folder (with its report)."),
        method: Method = typer.Option(Method.auto, "--method", help="How factors are mapped; auto picks per "
                                      "module and refuses unrelated targets."),
        subspace_rank: int = typer.Option(None, "--subspace-rank", min=1,
                                          help="R of lora-x/cross-lora's subspaces [default: lora-x "
                                               "min(32, min(out,in)/4), cross-lora 320 as its paper]."),
        min_similarity: float = typer.Option(None, "--min-similarity", min=0.0, max=1.0,
                                             help="Also skip modules whose subspace similarity is below this."),
        layer_map: LayerMap = typer.Option(LayerMap.auto, "--layer-map",
                                           help="How layers pair up; auto: by name when depths and weights "
                                                "agree, else by similarity, trying the others before refusing."),
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
        from paw.device import resolve_device
        from paw.io.adapter import read_adapter
        from paw.io.atomic import check_output
        from paw.io.checkpoint import open_checkpoint
        from paw.io.manifest import describe_input
        from paw.io.tracking import check_kind
        from paw.io.transfer_report import REPORT_JSON, write_transfer
        from paw.transfer import transfer_lora

        check_output(output, overwrite=overwrite)
        check_kind(track)
        dev = resolve_device(device)
        lora = read_adapter(adapter)
        source, target = open_checkpoint(source_base), open_checkpoint(target_base)
        mapping = None
        if vocab_map is not None:
            from paw.io.vocab_map import read_vocab_map

            mapping = read_vocab_map(vocab_map)
        moved, report = transfer_lora(lora, source, target, method=method.value, subspace_rank=subspace_rank,
                                      min_similarity=min_similarity, layer_map=layer_map.value,
                                      vocab_map=mapping, ridge=ridge, force=force, device=dev,
                                      target_name=target_base)
        inputs = {"adapter": describe_input(adapter), "source_base": describe_input(source_base),
                  "target_base": describe_input(target_base)}
        if vocab_map is not None:
            inputs["vocab_map"] = describe_input(vocab_map)
        write_transfer(output, moved, report, command=command_line(), inputs=inputs, overwrite=overwrite)
        s = report["summary"]
        typer.echo(f"transferred {s['transferred']}/{report['adapter']['modules']} modules "
                   f"({', '.join(f'{k}: {v}' for k, v in s['methods'].items())}) -> {output}")
        typer.echo(f"related {s['related']}/{s['judged']}: median subspace similarity {s['median_similarity']} "
                   f"vs {s['median_similarity_null']} for the other target layers (chance {s['median_chance']}); "
                   f"kept share {s['kept_share']}, norm ratio {s['norm_ratio_total']}")
        lay = report["layers"]
        typer.echo(f"layers paired by {lay['how']}: {lay['why']}")
        if lay["source_without_partner"] or lay["target_without_partner"]:
            typer.echo(f"layers without partner: source {lay['source_without_partner']}, "
                       f"target {lay['target_without_partner']}")
        if s["not_transferred"]:
            typer.echo(f"{s['not_transferred']} module(s) not transferred; reasons in {output / REPORT_JSON}")
        for warning in report.get("warnings", []):
            typer.echo(f"warning: {warning}", err=True)
        track_once(track, output, {"command": command_line(), "method": method.value, **inputs},
                   {"transfer": s})
