"""Write the output folder of ``paw transfer-lora``: the PEFT adapter and its report.

Files: ``adapter_model.safetensors`` and ``adapter_config.json`` (loadable with
``PeftModel.from_pretrained`` on the target), ``transfer_report.json`` (provenance plus the full
report), ``transfer_report.csv`` (one row per module) and ``similarity_vs_depth.png``. No clock
time anywhere and PNGs without software/date metadata, so equal inputs give byte-identical folders.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from paw import __version__
from paw.io.adapter import check_adapter, write_adapter_files
from paw.io.atomic import atomic_dir
from paw.io.manifest import dumps
from paw.io.model_card import Card, write_card
from paw.io.reports import save_figure

REPORT_JSON = "transfer_report.json"
REPORT_CSV = "transfer_report.csv"
PLOT = "similarity_vs_depth.png"
CSV_FIELDS = ("module", "target_module", "kind", "rank", "method", "decision", "transferred", "related",
              "similarity", "similarity_null", "similarity_lift", "similarity_chance", "similarity_out",
              "similarity_in", "subspace_rank", "remix_residual", "residual_lift", "kept", "norm_ratio",
              "shape_source", "shape_target")


def report_rows(report: dict) -> list[dict[str, Any]]:
    """One flat row per module of a transfer report (shapes as ``32x64``)."""
    rows = []
    for rec in report["modules"]:
        row = {k: rec.get(k) for k in CSV_FIELDS}
        for k in ("shape_source", "shape_target"):
            row[k] = "x".join(str(d) for d in row[k]) if row[k] else ""
        rows.append(row)
    return rows


def report_csv(report: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_FIELDS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(report_rows(report))
    return buf.getvalue()


def write_transfer(output: str | Path, adapter, report: dict, *, figure, command: str, inputs: dict[str, Any],
                   overwrite: bool = False, card: Card | None = None) -> Path:
    """Write the adapter, its report, ``figure`` (:func:`paw.transfer.plots.similarity_figure`) and
    ``card`` (the ``README.md``) into ``output`` atomically (nothing half-written on error)."""
    # what PAW writes must load in PEFT: the same cross-check as on reading
    check_adapter(adapter.config, {k: tuple(v.shape) for k, v in adapter.tensors.items()}, path=output)
    with atomic_dir(output, overwrite=overwrite, inputs=[adapter.path]) as tmp:
        write_adapter_files(tmp, adapter)
        full = {"paw_version": __version__, "command": command, "inputs": inputs, **report}
        (tmp / REPORT_JSON).write_text(dumps(full), encoding="utf-8")
        (tmp / REPORT_CSV).write_text(report_csv(report), encoding="utf-8")
        save_figure(figure, tmp / PLOT, dpi=figure.dpi)
        if card is not None:
            write_card(tmp, card)
    return Path(output)
