"""``transfer_finetune``: move a *full fine-tune* to another base: extract a LoRA, then transfer it.

What ``paw transfer-lora --finetune F --source-base B`` runs in place of ``--adapter``::

    from paw.extract import ExtractOptions
    from paw.extract.finetune_transfer import transfer_finetune
    moved = transfer_finetune("./tiny/ft", "./tiny/base", "./tiny/other", "./moved", extract=ExtractOptions(rank=8))
    moved.report["extraction"]["summary"]["energy_held"]   # what the LoRA held before anything moved

1. :func:`paw.extract.extract_lora` turns ``finetune − source_base`` into a PEFT LoRA (``--rank`` or
   ``--energy``), into a private folder beside the output;
2. :func:`paw.transfer.folder_pipeline.transfer_adapter` moves that LoRA with the chosen method (every method,
   ``distill`` included: its teacher is then source base + the extracted LoRA), gain gate included;
3. the transfer's report gets an ``extraction`` block (options, energy held, relative error, modules
   kept whole or not carried, notes) and the extraction's report and plot, and the folder is published
   atomically. Nothing is written when any step fails.

The extraction holds what a LoRA can hold of the fine-tune: the moved adapter can carry no more. Norm
gains and biases a full fine-tune also moved are listed as ``not_carried``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.extract.pipeline import ExtractOptions, extract_lora
from paw.io.atomic import check_output
from paw.io.extract_files import add_extraction
from paw.io.gate_files import publish, staging
from paw.io.manifest import describe_input, records_call
from paw.transfer.distill.options import DistillOptions
from paw.transfer.folder_pipeline import TransferredAdapter, transfer_adapter
from paw.transfer.options import TransferOptions

PathLike = str | Path
LOW_ENERGY = 0.5  # below this share of the fine-tune's delta the report warns that little can move
_OPTION_FIELDS = {f.name for f in dataclasses.fields(TransferOptions)}


@records_call
def transfer_finetune(finetune: PathLike, source_base: PathLike, target_base: PathLike, output: PathLike, *,
                      extract: ExtractOptions = ExtractOptions(), overwrite: bool = False,
                      allow_nonfinite: bool = False, command: str | None = None, **transfer: Any) -> TransferredAdapter:
    """Extract a LoRA from ``finetune`` (a full fine-tune of ``source_base``) and move it to ``target_base``.

    ``transfer``: the keyword arguments of :func:`paw.transfer.folder_pipeline.transfer_adapter` (``method``,
    ``layer_map``, ``distill``, ``check_data``, ``device`` ...). Both option sets are checked before
    any model is read; the result's ``report['extraction']`` says how much of the fine-tune the
    extracted LoRA held before anything moved.
    """
    extract.check()
    knobs = {k: v for k, v in transfer.items() if k in _OPTION_FIELDS}
    if knobs.get("distill") is None:
        knobs["distill"] = DistillOptions()
    TransferOptions(**knobs).check()
    output = Path(output)
    check_output(output, overwrite=overwrite, inputs=[finetune, source_base, target_base])
    with staging(output) as folder:
        extracted = extract_lora(source_base, finetune, folder / "extracted-lora", extract, command=command)
        staged = folder / output.name
        result = transfer_adapter(extracted.output, source_base, target_base, staged, overwrite=False,
                                  allow_nonfinite=allow_nonfinite, command=command, **transfer)
        block, warnings = extraction_block(finetune, extracted.report)
        finetune_input = describe_input(finetune)
        add_extraction(staged, extracted.output, block=block, finetune_input=finetune_input, warnings=warnings)
        publish(staged, output, overwrite=overwrite, allow_nonfinite=allow_nonfinite)
    inputs = {"finetune": finetune_input, **{k: v for k, v in result.inputs.items() if k != "adapter"}}
    report = {**result.report, "extraction": block, "inputs": inputs,
              "warnings": [*warnings, *result.report.get("warnings", [])]}
    return dataclasses.replace(result, output=output, report=report, inputs=inputs)


def extraction_block(finetune: PathLike, report: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The ``extraction`` block of the transfer report and the warnings it calls for, from the
    extraction's own report (:func:`paw.extract.extract_lora`)."""
    s = report["summary"]
    block = {"finetune": str(finetune), "options": report["options"], "summary": s, "notes": report["notes"],
             "not_carried": report["not_carried"], "held": held_sentence(s)}
    warnings = []
    if s["energy_held"] < LOW_ENERGY:
        warnings.append(f"the extracted LoRA holds only {s['energy_held']:.2f} of the fine-tune's squared delta "
                        "(rank too low for it); the moved adapter can carry no more (raise --rank or --energy)")
    return block, warnings


def held_sentence(summary: dict[str, Any]) -> str:
    """One line for people: ``extracted 14 modules at rank 8: held 0.93 of the fine-tune's ...``."""
    lo, hi = summary["rank_min"], summary["rank_max"]
    ranks = f"rank {lo}" if lo == hi else f"ranks {lo}-{hi} (median {summary['rank_median']})"
    extra = []
    if summary["modules_to_save"]:
        extra.append(f"{summary['modules_to_save']} kept whole")
    if summary["not_carried"]:
        extra.append(f"{summary['not_carried']} changed tensor(s) not carried")
    tail = f"; {', '.join(extra)}" if extra else ""
    error = summary["relative_error"]
    if not math.isfinite(error):
        raise PawError("the extraction's relative error is not finite")
    return (f"extracted {summary['lora_modules']} modules at {ranks}: held {summary['energy_held']:.4f} of the "
            f"fine-tune's squared delta (relative error {error:.4f}){tail}")


def source_choice(*, adapter: PathLike | None, finetune: PathLike | None, rank: int | None,
                  energy: float | None) -> tuple[ExtractOptions | None, int | None]:
    """What ``paw transfer-lora`` moves: ``(extract options or None, the distillation's --rank)``.

    With ``--finetune``, ``--rank`` / ``--energy`` choose the extraction (the distilled student then
    takes the extracted LoRA's rank); with ``--adapter``, ``--rank`` stays the distillation's. Exactly
    one of ``--adapter`` and ``--finetune``; ``--energy`` only with ``--finetune``.
    """
    if adapter is not None and finetune is not None:
        raise PawError("give --adapter or --finetune, not both (--finetune extracts a LoRA from a full fine-tune)")
    if adapter is None and finetune is None:
        raise PawError("give --adapter (a PEFT LoRA folder) or --finetune (a full fine-tune of --source-base)")
    if finetune is None:
        if energy is not None:
            raise PawError("--energy chooses the extraction's ranks: it needs --finetune")
        return None, rank
    return ExtractOptions(rank=rank, energy=energy).check(), None

