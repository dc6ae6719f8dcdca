"""``paw transfer-lora``: move a LoRA adapter to another base model without training data."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import ALLOW_NONFINITE, DEVICE, OVERWRITE, SEED, TRACK, choices
from paw.transfer.distill import DISTILL, INITS  # light, like the two below
from paw.transfer.layers import LAYER_MAPS  # light: torch is imported inside the functions
from paw.transfer.pipeline import method_names

Method = choices("Method", [*method_names(), DISTILL])  # distill trains a LoRA: paw/transfer/distill.py
LayerMap = choices("LayerMap", LAYER_MAPS)
DistillInit = choices("DistillInit", INITS)

_DISTILL_DEFAULTS = {"prompts": None, "synthesize": 0, "seed_examples": None, "discriminator": False,
                     "eval_prompts": None, "holdout": 0.1, "init": "auto", "rank": None, "alpha": None,
                     "target_modules": None, "max_steps": 200, "batch_size": 8, "lr": 1e-4, "max_new_tokens": 16,
                     "byte_kl": False, "next_words": 0, "seed": 0}


def _no_distill_options(given: dict) -> None:
    from paw.errors import PawError

    used = [k for k, v in _DISTILL_DEFAULTS.items() if getattr(given[k], "value", given[k]) != v]
    if used:
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in used)
        raise PawError(f"{flags} {'is a' if len(used) == 1 else 'are'} --method distill option{'s' * (len(used) > 1)}; "
                       f"add --method distill or drop {'it' if len(used) == 1 else 'them'}")


def _distill(a: dict) -> None:
    """``--method distill``: parse, call :func:`paw.transfer.distill_run.run_distill`, print the outcome."""
    from paw.cli._options import command_line, track_once
    from paw.io.tracking import check_kind
    from paw.transfer.distill_run import run_distill

    check_kind(a["track"])
    modules = [m.strip() for m in a["target_modules"].split(",") if m.strip()] if a["target_modules"] else None
    result = run_distill(
        a["adapter"], a["source_base"], a["target_base"], a["output"], prompts=a["prompts"],
        synthesize=a["synthesize"], seed_examples=a["seed_examples"], eval_prompts=a["eval_prompts"],
        discriminator=a["discriminator"], init=a["init"].value, rank=a["rank"], alpha=a["alpha"],
        target_modules=modules, steps=a["max_steps"], batch_size=a["batch_size"], lr=a["lr"],
        max_new_tokens=a["max_new_tokens"], holdout=a["holdout"], byte_kl=a["byte_kl"], next_words=a["next_words"],
        seed=a["seed"], device=a["device"], overwrite=a["overwrite"], allow_nonfinite=a["allow_nonfinite"])
    d = result.report["distill"]
    typer.echo(f"distilled {d['student']['modules']} LoRA modules on {d['inputs']['train_used']} inputs ({d['inputs']['source']}), "
               f"{d['steps']} steps ({' + '.join(d['losses'])}; init: {d['init']['how']}) -> {result.output}")
    before, after = d["agreement"]["before"], d["agreement"]["after"]
    for key, label in (("top1_agreement", "top-1 agreement"), ("kl", "KL"), ("choice_agreement", "choice agreement")):
        if after[key] is not None:
            typer.echo(f"{label} with the teacher on {d['agreement']['measured_on']}: {before[key]} -> {after[key]}")
    _echo_warnings(result.report)
    track_once(a["track"], result.output, {"command": command_line(), "method": DISTILL, **result.inputs},
               {"distill": {k: d[k] for k in ("loss_start", "loss_end")} | {"agreement": after}})


def _echo_warnings(report: dict) -> None:
    for warning in report.get("warnings", []):
        typer.echo(f"warning: {warning}", err=True)


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
                                          help="Subspace size of lora-x and cross-lora [default: "
                                               "lora-x min(32, min(out,in)/4), cross-lora 320]."),
        min_similarity: float = typer.Option(None, "--min-similarity", min=0.0, max=1.0,
                                             help="Also skip modules whose subspace similarity is below this."),
        layer_map: LayerMap = typer.Option("auto", "--layer-map",
                                           help="How layers pair up; auto: by name when depths and "
                                                "weights agree, else by similarity; tries the others before refusing."),
        vocab_map: Path = typer.Option(None, "--vocab-map", help="paw-vocab-map JSON when tokenizers differ."),
        ridge: float = typer.Option(1e-2, "--ridge", help="Ridge strength of least-squares maps, relative to "
                                    "the mean eigenvalue."),
        force: bool = typer.Option(False, "--force", help="Transfer even when auto finds the target unrelated."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = ALLOW_NONFINITE,
        track: str = TRACK,
        # ---- --method distill only (label-free inputs; see docs/distill.md) ----
        prompts: str = typer.Option(None, "--prompts", help="[distill] Task inputs: a file paw eval reads "
                                    "(answers ignored) or text, one input per line; or 'generic'."),
        synthesize: int = typer.Option(0, "--synthesize", min=0, help="[distill] Let the teacher write N inputs "
                                       "from --seed-examples."),
        seed_examples: Path = typer.Option(None, "--seed-examples", help="[distill] At most 5 task inputs for "
                                           "--synthesize."),
        discriminator: bool = typer.Option(False, "--discriminator", help="[distill] Keep only synthetic inputs "
                                           "the teacher finds task-like (likelihood ratio vs generic text)."),
        eval_prompts: Path = typer.Option(None, "--eval-prompts", help="[distill] Held-out inputs for the "
                                          "agreement figures [default: --holdout of the inputs]."),
        holdout: float = typer.Option(0.1, "--holdout", help="[distill] Fraction of inputs kept for agreement."),
        init: DistillInit = typer.Option("auto", "--init", help="[distill] auto: start from the weight-space "
                                         "transfer when the target is related; none: PEFT init."),
        rank: int = typer.Option(None, "--rank", min=1, help="[distill] LoRA rank [default: the source's]."),
        alpha: float = typer.Option(None, "--alpha", help="[distill] LoRA alpha [default: the source's]."),
        target_modules: str = typer.Option(None, "--target-modules", help="[distill] Comma list [default: the "
                                           "source adapter's module types that the target has]."),
        max_steps: int = typer.Option(200, "--max-steps", min=1, help="[distill] Optimiser steps."),
        batch_size: int = typer.Option(8, "--batch-size", min=1, max=4096, help="[distill] Inputs per step."),
        lr: float = typer.Option(1e-4, "--lr", help="[distill] AdamW learning rate."),
        max_new_tokens: int = typer.Option(16, "--max-new-tokens", min=1, help="[distill] Teacher continuation "
                                           "length (it also stops at a line break)."),
        byte_kl: bool = typer.Option(False, "--byte-kl/--no-byte-kl", help="[distill] Across tokenizers, also "
                                     "match the next-token distributions (over shared tokens) where both "
                                     "tokenizations cut the text at the same byte."),
        next_words: int = typer.Option(0, "--next-words", min=0, help="[distill] Across tokenizers, teach the "
                                       "teacher's distribution over its K likeliest next words of every input "
                                       "(0: off)."),
        seed: int = SEED,
    ):
        """Transfer a LoRA adapter to another base model (training-free, rank-preserving) with a report.

        --method distill instead trains a new LoRA on the target to imitate source + adapter on label-free
        inputs (any tokenizer, any family; docs/distill.md).

        Example: paw transfer-lora --adapter ./tiny/lora --source-base ./tiny/base --target-base ./tiny/finetune -o ./moved

        Example: paw transfer-lora --method distill --prompts inputs.jsonl --adapter ./lora --source-base ./a --target-base ./b -o ./moved
        """
        if method.value == DISTILL:
            _distill(locals())
            return
        _no_distill_options(locals())
        from paw.cli._options import command_line, track_once
        from paw.io.tracking import check_kind
        from paw.io.transfer_report import REPORT_JSON
        from paw.transfer.run import transfer_adapter

        check_kind(track)
        result = transfer_adapter(adapter, source_base, target_base, output, method=method.value,
                                  subspace_rank=subspace_rank, min_similarity=min_similarity,
                                  layer_map=layer_map.value, vocab_map=vocab_map, ridge=ridge, force=force,
                                  device=device, overwrite=overwrite, allow_nonfinite=allow_nonfinite,
                                  command=command_line())
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
        _echo_warnings(report)
        track_once(track, output, {"command": command_line(), "method": method.value, **inputs},
                   {"transfer": s})
