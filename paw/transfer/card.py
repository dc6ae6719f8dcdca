"""The model card of a ``paw transfer-lora`` output: a PEFT adapter for the target base.

Its ``base_model`` is the target (the model the adapter now applies to); the text says where it
came from, which methods moved it and how related the two bases were, from the report's summary
(:mod:`paw.transfer.summary`), in the words ``paw transfer-lora`` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw.io.model_card import Card
from paw.transfer.summary import DistillSummary, LayerPairing, TransferSummary


def transfer_card(output: str | Path, report: dict[str, Any], *, source_base: str | Path, target_base: str | Path,
                  command: str | None) -> Card:
    """The card of a transfer (every method, distillation included) written to ``output``."""
    method = report["method"]
    intro = (f"A LoRA adapter for `{target_base}`, moved by PAW's `paw transfer-lora` (method `{method}`) from "
             f"a LoRA trained on `{source_base}`. Load it on `{target_base}` with PEFT's "
             "`PeftModel.from_pretrained`.")
    if "distill" in report:
        section = ("Distillation", tuple(_distilled(DistillSummary.from_report(report))))
    else:
        section = ("Transfer", tuple(_moved(TransferSummary.from_report(report), LayerPairing.from_report(report))))
    sections = [section]
    if report.get("warnings"):
        sections.append(("Warnings", tuple(f"- {w}" for w in report["warnings"])))
    return Card(Path(output).name, "peft", inputs=(str(target_base),),
                tags=("paw", "lora", "transfer-lora", method), intro=intro, sections=tuple(sections),
                command=command)


def _moved(s: TransferSummary, layers: LayerPairing) -> list[str]:
    methods = ", ".join(f"{k}: {v}" for k, v in s.methods.items())
    lines = [f"- transferred {s.transferred}/{s.modules} modules ({methods})"]
    if s.judged:
        lines.append(f"- related {s.related}/{s.judged}: median subspace similarity {s.median_similarity} of the "
                     f"paired layers against {s.median_similarity_null} for the other target layers (chance "
                     f"{s.median_chance})")
    if s.kept_share is not None:
        lines.append(f"- kept share of the update {s.kept_share}, norm ratio {s.norm_ratio_total}")
    lines.append(f"- layers paired by {layers.how}: {layers.why}")
    if s.not_transferred:
        lines.append(f"- {s.not_transferred} module(s) not transferred (reasons in `transfer_report.json`)")
    return lines


def _distilled(d: DistillSummary) -> list[str]:
    lines = [f"- distilled {d.student_modules} LoRA modules on {d.train_used} inputs ({d.inputs_source}), "
             f"{d.steps} steps{d.stopped_note} ({' + '.join(d.losses)}; init: {d.init})"]
    for key, label in (("top1_agreement", "top-1 agreement"), ("choice_agreement", "choice agreement")):
        if d.agreement_after.get(key) is not None:
            lines.append(f"- {label} with the teacher on {d.measured_on}: {d.agreement_before[key]} -> "
                         f"{d.agreement_after[key]}")
    return lines
