"""``paw transfer-lora``: move a LoRA adapter to another base model without training data."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from paw.cli._options import RunOptions, WriteOptions, options_command
from paw.transfer.distill.options import DISTILL, DistillOptions  # light, like the one below
from paw.transfer.options import TransferFiles, TransferOptions


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


def _distill_points(result) -> list[tuple[int, dict]]:
    """A distillation for ``--track``: each step's loss and its terms (``train/loss``, ``train/token-kl``,
    ...; a step with none, None in the report, is left out), then :func:`_figures` at the last step. The
    automatic budget's ``probe`` scores (one a check, not one a step) are not among them."""
    curve = result.report["distill"]["curve"]
    steps = len(curve.get("loss", []))
    per_step = {name: values for name, values in curve.items() if len(values) == steps}
    points = [(step + 1, {"train/loss" if name == "loss" else f"train/{name}": values[step]
                          for name, values in per_step.items() if values[step] is not None})
              for step in range(steps)]
    return [*points, (steps, _figures(result, DISTILL))]


def _echo_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


def register(app: typer.Typer) -> None:
    options_command(app, "transfer-lora", [(TransferFiles, ""), (TransferOptions, ""), (DistillOptions, "[distill] "),
                                           (RunOptions, ""), (WriteOptions, "")], transfer_lora, doc=transfer_lora.__doc__)


def transfer_lora(files: TransferFiles, options: TransferOptions, distill: DistillOptions, run: RunOptions,
                  write: WriteOptions) -> None:
    """Transfer a LoRA adapter to another base model (training-free, rank-preserving) with a report.

    --method distill instead trains a new LoRA on the target to imitate source + adapter on label-free
    inputs (any tokenizer, any family; docs/distill.md).

    Example: paw transfer-lora --adapter ./tiny/lora --source-base ./tiny/base --target-base ./tiny/finetune -o ./moved

    Example: paw transfer-lora --method distill --prompts inputs.jsonl --adapter ./lora --source-base ./a --target-base ./b -o ./moved
    """
    import dataclasses
    import functools

    from paw.cli._options import command_line, track_once, track_steps
    from paw.distributed import is_main
    from paw.extract.finetune_transfer import source_choice, transfer_finetune
    from paw.io.tracking import check_kind
    from paw.transfer.folder_pipeline import transfer_adapter

    files.check()
    check_kind(run.track)
    extract, rank = source_choice(adapter=files.adapter, finetune=files.finetune, rank=distill.rank,
                                  energy=files.energy)
    distill = dataclasses.replace(distill, rank=rank)
    move = transfer_adapter if extract is None else functools.partial(transfer_finetune, extract=extract)
    knobs = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    result = move(files.adapter or files.finetune, files.source_base, files.target_base, Path(files.output),
                  **{**knobs, "distill": distill}, device=run.device, overwrite=run.overwrite,
                  allow_nonfinite=write.allow_nonfinite, command=command_line())
    if not is_main():  # under torchrun, rank 0 alone reports
        return
    if extract is not None:  # what the LoRA held of the fine-tune, before anything moved
        typer.echo(result.report["extraction"]["held"])
    (_echo_transfer if result.distill is None else _echo_distill)(result)
    _echo_warnings(result.warnings)
    config = {"command": command_line(), "method": options.method, **result.inputs}
    if result.distill is None:
        track_once(run.track, Path(files.output), config, _figures(result, options.method))
    else:  # a training: every step's loss, then the summary, as train-lora logs
        track_steps(run.track, Path(files.output), config, _distill_points(result))
    if options.check_data is not None:  # the gain gate's verdict is the last line
        from paw.transfer.gate import line

        typer.echo(line(result.report["gate"], options.check_data))
