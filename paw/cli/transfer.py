"""``paw transfer-lora``: move a LoRA adapter to another base model without training data."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli import _transfer_distill as D
from paw.cli._options import ALLOW_NONFINITE, DEVICE, OVERWRITE, TRACK, choices
from paw.transfer.layers import LAYER_MAPS  # light: torch is imported inside the functions
from paw.transfer.pipeline import method_names

Method = choices("Method", [*method_names(), D.DISTILL])  # distill trains a LoRA: paw/cli/_transfer_distill.py
LayerMap = choices("LayerMap", LAYER_MAPS)


def register(app: typer.Typer) -> None:
    @app.command("transfer-lora")
    def transfer_lora_cmd(
        adapter: Path = typer.Option(..., "--adapter", help="PEFT LoRA adapter folder trained on the source base."),
        source_base: str = typer.Option(..., "--source-base", help="The adapter's base model (folder, .gguf or cached ID)."),
        target_base: str = typer.Option(..., "--target-base", help="The model to move the adapter to."),
        output: Path = typer.Option(..., "--output", "-o", help="Output adapter folder (with its report)."),
        method: Method = typer.Option("auto", "--method", help="How factors are mapped; auto picks per "
                                      "module and refuses unrelated targets."),
        subspace_rank: int = typer.Option(None, "--subspace-rank", min=1,
                                          help="R of lora-x/cross-lora's subspaces [default: lora-x "
                                               "min(32, min(out,in)/4), cross-lora 320 as its paper]."),
        min_similarity: float = typer.Option(None, "--min-similarity", min=0.0, max=1.0,
                                             help="Also skip modules whose subspace similarity is below this."),
        layer_map: LayerMap = typer.Option("auto", "--layer-map",
                                           help="How layers pair up; auto: by name when depths and weights "
                                                "agree, else by similarity, trying the others before refusing."),
        vocab_map: Path = typer.Option(None, "--vocab-map", help="paw-vocab-map JSON when tokenizers differ."),
        ridge: float = typer.Option(1e-2, "--ridge", help="Ridge strength of least-squares maps, relative to "
                                    "the mean eigenvalue."),
        force: bool = typer.Option(False, "--force", help="Transfer even when auto finds the target unrelated."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = ALLOW_NONFINITE,
        track: str = TRACK,
        prompts: str = D.PROMPTS, synthesize: int = D.SYNTHESIZE, seed_examples: Path = D.SEED_EXAMPLES,
        discriminator: bool = D.DISCRIMINATOR, eval_prompts: Path = D.EVAL_PROMPTS, holdout: float = D.HOLDOUT,
        init: D.DistillInit = D.INIT, rank: int = D.RANK, alpha: float = D.ALPHA, target_modules: str = D.TARGET_MODULES,
        max_steps: int = D.MAX_STEPS, batch_size: int = D.BATCH_SIZE, lr: float = D.LR,
        max_new_tokens: int = D.MAX_NEW_TOKENS, seed: int = D.DISTILL_SEED,
    ):
        """Transfer a LoRA adapter to another base model (training-free, rank-preserving) with a report.

        --method distill instead trains a new LoRA on the target to imitate source + adapter on label-free
        inputs, for any tokenizer and family (options marked [distill]; docs/distill.md).

        Example: paw transfer-lora --adapter ./tiny/lora --source-base ./tiny/base --target-base ./tiny/finetune -o ./moved

        Example: paw transfer-lora --method distill --prompts inputs.jsonl --adapter ./lora --source-base ./a --target-base ./b -o ./moved
        """
        if D.handle(method.value, locals()):
            return
        from paw.cli._options import command_line, track_once
        from paw.io.tracking import check_kind
        from paw.io.transfer_report import REPORT_JSON
        from paw.transfer.run import transfer_adapter

        check_kind(track)
        result = transfer_adapter(adapter, source_base, target_base, output, method=method.value,
                                  subspace_rank=subspace_rank, min_similarity=min_similarity,
                                  layer_map=layer_map.value, vocab_map=vocab_map, ridge=ridge, force=force,
                                  device=device, overwrite=overwrite, allow_nonfinite=allow_nonfinite)
        report, inputs = result.report, result.inputs
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
