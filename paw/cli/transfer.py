"""``paw transfer-lora``: move a LoRA adapter to another base model without training data."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from paw.cli._options import ALLOW_NONFINITE, DEVICE, OVERWRITE, SEED, TRACK, choices
from paw.transfer.distill.options import DISTILL, INITS, DistillOptions  # light, like the three below
from paw.transfer.layers import LAYER_MAPS  # light: torch is imported inside the functions
from paw.transfer.options import TransferOptions
from paw.transfer.pipeline import method_names

Method = choices("Method", [*method_names(), DISTILL])  # distill trains a LoRA: paw/transfer/distill/
LayerMap = choices("LayerMap", LAYER_MAPS)
DistillInit = choices("DistillInit", INITS)
T, D = TransferOptions(), DistillOptions()  # every default below is read from these


def _modules(text: str | None) -> tuple[str, ...] | None:
    """``'q_proj, v_proj'`` -> ``('q_proj', 'v_proj')``; nothing given -> None (the source adapter's)."""
    modules = tuple(m.strip() for m in text.split(",") if m.strip()) if text else ()
    return modules or None


def _echo_transfer(result) -> None:
    from paw.io.transfer_report import REPORT_JSON

    s, lay, output = result.transfer, result.layers, result.output
    typer.echo(f"transferred {s.transferred}/{s.modules} modules "
               f"({', '.join(f'{k}: {v}' for k, v in s.methods.items())}) -> {output}")
    typer.echo(f"related {s.related}/{s.judged}: median subspace similarity {s.median_similarity} "
               f"vs {s.median_similarity_null} for the other target layers (chance {s.median_chance}); "
               f"kept share {s.kept_share}, norm ratio {s.norm_ratio_total}")
    typer.echo(f"layers paired by {lay.how}: {lay.why}")
    if lay.source_without_partner or lay.target_without_partner:
        typer.echo(f"layers without partner: source {lay.source_without_partner}, "
                   f"target {lay.target_without_partner}")
    if s.not_transferred:
        typer.echo(f"{s.not_transferred} module(s) not transferred; reasons in {output / REPORT_JSON}")


def _echo_distill(result) -> None:
    d = result.distill
    typer.echo(f"distilled {d.student_modules} LoRA modules on {d.train_used} inputs ({d.inputs_source}), "
               f"{d.steps} steps{d.stopped_note} ({' + '.join(d.losses)}; init: {d.init}) -> {result.output}")
    before, after = d.agreement_before, d.agreement_after
    for key, label in (("adapter_agreement", "agreement where the adapter changed the teacher"),
                       ("top1_agreement", "top-1 agreement"), ("kl", "KL"), ("choice_agreement", "choice agreement")):
        if after.get(key) is not None:
            typer.echo(f"{label} with the teacher on {d.measured_on}: {before[key]} -> {after[key]}")


def _figures(result, method: str) -> dict:
    """What ``--track`` logs: the transfer summary, or the distillation's loss and agreement."""
    gate = result.report.get("gate")  # --check-data: the gain and the verdict
    gated = {} if gate is None else {"gate": {"gain": gate["gain"]["difference"], "gain_stderr": gate["gain"]["stderr"],
                                              "passed": int(gate["passed"])}}
    if method != DISTILL:
        return {"transfer": asdict(result.transfer), **gated}
    d = result.distill
    return {"distill": {"loss_start": d.loss_start, "loss_end": d.loss_end, "agreement": d.agreement_after}, **gated}


def _echo_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


def register(app: typer.Typer) -> None:
    @app.command("transfer-lora")
    def transfer_lora_cmd(
        adapter: Path = typer.Option(None, "--adapter", help="PEFT LoRA adapter folder trained on the source base."),
        finetune: Path = typer.Option(None, "--finetune", help="Or a full fine-tune: extract a LoRA, move it."),
        energy: float = typer.Option(None, "--energy", help="With --finetune: extract at this energy share."),
        source_base: str = typer.Option(..., "--source-base", help="The adapter's base model (folder, .gguf or cached ID)."),
        target_base: str = typer.Option(..., "--target-base", help="The model to move the adapter to."),
        output: Path = typer.Option(..., "--output", "-o", help="Output adapter folder (with its report)."),
        method: Method = typer.Option(T.method, "--method", help="How factors are mapped; auto picks per "
                                      "module and refuses unrelated targets."),
        subspace_rank: int = typer.Option(T.subspace_rank, "--subspace-rank", min=1,
                                          help="Subspace size of lora-x and cross-lora [default: "
                                               "lora-x min(32, min(out,in)/4), cross-lora 320]."),
        min_similarity: float = typer.Option(T.min_similarity, "--min-similarity", min=0.0, max=1.0,
                                             help="Also skip modules whose subspace similarity is below this."),
        layer_map: LayerMap = typer.Option(T.layer_map, "--layer-map",
                                           help="How layers pair up; auto: by name when depths and "
                                                "weights agree, else by similarity; tries the others before refusing."),
        vocab_map: Path = typer.Option(T.vocab_map, "--vocab-map", help="paw-vocab-map JSON when tokenizers differ."),
        ridge: float = typer.Option(T.ridge, "--ridge", help="Ridge strength of least-squares maps, relative to "
                                    "the mean eigenvalue."),
        force: bool = typer.Option(T.force, "--force", help="Transfer even when auto finds the target unrelated."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = ALLOW_NONFINITE,
        track: str = TRACK,
        check_data: Path = typer.Option(T.check_data, "--check-data", help="Labeled MC file never trained on: "
                                        "the moved adapter's paired gain over the target base."),
        require_gain: bool = typer.Option(T.require_gain, "--require-gain", help="With --check-data: no gain "
                                          "by --gain-z stderrs: exit 3, write nothing."),
        gain_z: float = typer.Option(T.gain_z, "--gain-z", help="With --check-data: the paired gain must exceed "
                                     "this many stderrs (clustered by the items' 'group' field)."),
        # ---- --method distill only (label-free inputs; see docs/distill.md) ----
        prompts: str = typer.Option(D.prompts, "--prompts", help="[distill] Task inputs: a file paw eval reads "
                                    "(answers ignored) or text, one input per line; or 'generic'."),
        synthesize: int = typer.Option(D.synthesize, "--synthesize", min=0, help="[distill] Let the teacher write N inputs "
                                       "from --seed-examples."),
        seed_examples: Path = typer.Option(D.seed_examples, "--seed-examples", help="[distill] At most 5 task inputs for "
                                           "--synthesize."),
        discriminator: bool = typer.Option(D.discriminator, "--discriminator", help="[distill] Keep only synthetic inputs "
                                           "the teacher finds task-like (likelihood ratio vs generic text)."),
        eval_prompts: Path = typer.Option(D.eval_prompts, "--eval-prompts", help="[distill] Held-out inputs for the "
                                          "agreement figures."),
        holdout: float = typer.Option(D.holdout, "--holdout", help="[distill] Share of inputs set apart for "
                                      "agreement (0: train on all)."),
        init: DistillInit = typer.Option(D.init, "--init", help="[distill] auto: start from the weight-space "
                                         "transfer when the target is related; none: PEFT init."),
        rank: int = typer.Option(D.rank, "--rank", min=1, help="[distill] LoRA rank [default: the source's]; "
                                "with --finetune the extraction's [16]."),
        alpha: float = typer.Option(D.alpha, "--alpha", help="[distill] LoRA alpha [default: the source's]."),
        target_modules: str = typer.Option(D.target_modules, "--target-modules", help="[distill] Comma list [default: the "
                                           "source adapter's module types that the target has]."),
        max_steps: int = typer.Option(D.max_steps, "--max-steps", min=1, help="[distill] Optimiser steps [default: until "
                                      "agreement levels off]."),
        batch_size: int = typer.Option(D.batch_size, "--batch-size", min=1, max=4096, help="[distill] Inputs per step."),
        lr: float = typer.Option(D.lr, "--lr", help="[distill] AdamW learning rate."),
        max_new_tokens: int = typer.Option(D.max_new_tokens, "--max-new-tokens", min=1, help="[distill] Teacher continuation "
                                           "length (it also stops at a line break)."),
        byte_kl: bool = typer.Option(D.byte_kl, "--byte-kl/--no-byte-kl", help="[distill] Across tokenizers, also "
                                     "match next-token distributions where both cut the text alike."),
        next_words: int = typer.Option(D.next_words, "--next-words", min=0, help="[distill] Across tokenizers, teach the "
                                       "teacher's K likeliest next words (0: off)."),
        token_focus: float = typer.Option(D.token_focus, "--token-focus", help="[distill] Train on the share of tokens "
                                          "the adapter changed most (TiTok)."),
        target: str = typer.Option(D.target, "--target", help="[distill] What the student learns: teacher (the "
                                   "source + adapter) or shift (its own base + the adapter's shift; docs/distill.md)."),
        shift_scale: float = typer.Option(D.shift_scale, "--shift-scale", help="[distill] --target shift: the "
                                          "factor on the adapter's shift."),
        seed: int = typer.Option(D.seed, *SEED.param_decls, help=SEED.help),
        save_every: int = typer.Option(D.save_every, "--save-every",  # >= 1: DistillOptions.check
                                       help="[distill] Checkpoint every K steps."),
        resume: bool = typer.Option(D.resume, "--resume", help="[distill] Continue from OUT-work/."),
        offload_teacher: bool = typer.Option(D.offload_teacher, "--offload-teacher",
                                             help="[distill] Free the teacher before training."),
        gradient_checkpointing: bool = typer.Option(D.gradient_checkpointing, "--gradient-checkpointing",
                                                    help="[distill] Less memory, more compute."),
        dtype: str = typer.Option(D.dtype, "--dtype", help="[distill] Weights' dtype."),
        fsdp: bool = typer.Option(D.fsdp, "--fsdp", help="[distill] Shard the student (FSDP2, torchrun)."),
    ):
        """Transfer a LoRA adapter to another base model (training-free, rank-preserving) with a report.

        --method distill instead trains a new LoRA on the target to imitate source + adapter on label-free
        inputs (any tokenizer, any family; docs/distill.md).

        Example: paw transfer-lora --adapter ./tiny/lora --source-base ./tiny/base --target-base ./tiny/finetune -o ./moved

        Example: paw transfer-lora --method distill --prompts inputs.jsonl --adapter ./lora --source-base ./a --target-base ./b -o ./moved
        """
        import functools

        from paw.cli._options import command_line, track_once
        from paw.distributed import is_main
        from paw.extract.transfer import source_choice, transfer_finetune
        from paw.io.tracking import check_kind
        from paw.transfer.run import transfer_adapter

        check_kind(track)
        extract, rank = source_choice(adapter=adapter, finetune=finetune, rank=rank, energy=energy)
        distill = DistillOptions(prompts=prompts, synthesize=synthesize, seed_examples=seed_examples,
                                 discriminator=discriminator, eval_prompts=eval_prompts, holdout=holdout,
                                 init=init.value, rank=rank, alpha=alpha, target_modules=_modules(target_modules),
                                 max_steps=max_steps, batch_size=batch_size, lr=lr, max_new_tokens=max_new_tokens,
                                 byte_kl=byte_kl, next_words=next_words, token_focus=token_focus, target=target,
                                 shift_scale=shift_scale, seed=seed, save_every=save_every,
                                 resume=resume, offload_teacher=offload_teacher,
                                 gradient_checkpointing=gradient_checkpointing, dtype=dtype, fsdp=fsdp)
        move = transfer_adapter if extract is None else functools.partial(transfer_finetune, extract=extract)
        result = move(adapter or finetune, source_base, target_base, output, method=method.value,
                                  subspace_rank=subspace_rank, min_similarity=min_similarity,
                                  layer_map=layer_map.value, vocab_map=vocab_map, ridge=ridge, force=force,
                                  distill=distill, device=device, overwrite=overwrite,
                                  allow_nonfinite=allow_nonfinite, check_data=check_data, require_gain=require_gain,
                                  gain_z=gain_z, command=command_line())
        if not is_main():  # under torchrun, rank 0 alone reports
            return
        if extract is not None:  # what the LoRA held of the fine-tune, before anything moved
            typer.echo(result.report["extraction"]["held"])
        (_echo_transfer if result.distill is None else _echo_distill)(result)
        _echo_warnings(result.warnings)
        track_once(track, output, {"command": command_line(), "method": method.value, **result.inputs},
                   _figures(result, method.value))
        if check_data is not None:  # the gain gate's verdict is the last line
            from paw.transfer.gate import line

            typer.echo(line(result.report["gate"], check_data))
