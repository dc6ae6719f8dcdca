"""Files of ``paw transfer-lora --finetune``: the extraction's block and files added to a staged transfer.

The transfer of an extracted LoRA is written into a staging folder first (:func:`paw.io.gate_files.staging`);
:func:`add_extraction` puts the extraction's block into its ``transfer_report.json`` (and names the
fine-tune among the inputs in place of the temporary adapter) and copies the extraction's own report
and energy plot beside it, before :func:`paw.io.gate_files.publish` moves the folder into place.
This module knows files, not what the figures mean.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from paw.io.json_file import read_json
from paw.io.manifest import dumps

REPORT_JSON = "transfer_report.json"   # the transfer's report (paw.io.transfer_report)
COPIED = {"extract_report.json": "extract_report.json", "energy_vs_rank.png": "extract_energy_vs_rank.png"}


def add_extraction(folder: str | Path, extracted: str | Path, *, block: dict[str, Any], finetune_input: dict[str, Any],
                   warnings: list[str]) -> None:
    """``block`` as ``extraction`` in ``folder/transfer_report.json``; the extraction's report and plot copied in."""
    folder, extracted = Path(folder), Path(extracted)
    report = read_json(folder / REPORT_JSON)
    report["extraction"] = block
    inputs = report.setdefault("inputs", {})
    inputs.pop("adapter", None)  # a temporary folder, gone once the transfer is published
    report["inputs"] = {"finetune": finetune_input, **inputs}
    if warnings:
        report["warnings"] = [*warnings, *report.get("warnings", [])]
    (folder / REPORT_JSON).write_text(dumps(report), encoding="utf-8")
    for source, name in COPIED.items():
        if (extracted / source).is_file():
            shutil.copyfile(extracted / source, folder / name)
