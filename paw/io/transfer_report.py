"""Write the output folder of ``paw transfer-lora``: the PEFT adapter and its report.

Files: ``adapter_model.safetensors`` and ``adapter_config.json`` (loadable with
``PeftModel.from_pretrained`` on the target), ``transfer_report.json`` (provenance plus the full
report), ``transfer_report.csv`` (one row per module) and ``similarity_vs_depth.png``. No clock
time anywhere and PNGs without software/date metadata, so equal inputs give byte-identical folders.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from paw import __version__
from paw.io.adapter import CONFIG_NAME, WEIGHTS_NAME
from paw.io.atomic import atomic_dir
from paw.io.manifest import dumps, write_json
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


def similarity_figure(report: dict):
    """Subspace similarity of every module type against source layer depth, with the chance level dashed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    series: dict[str, list[tuple[int, float, float]]] = {}
    for rec in report["modules"]:
        m = re.search(r"layers\.(\d+)\.", rec["module"])
        if m and rec.get("similarity") is not None:
            kind = rec["module"].rsplit(".", 1)[-1]
            null = rec.get("similarity_null", rec["similarity_chance"])
            series.setdefault(kind, []).append((int(m[1]), rec["similarity"], null))
    for kind, pts in sorted(series.items()):
        pts.sort()
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=kind)[0]
        ax.plot([p[0] for p in pts], [p[2] for p in pts], ls="--", lw=0.8, color=line.get_color())
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("source layer")
    ax.set_ylabel("‖U_sᵀU_t‖²_F / R")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"subspace similarity ({report['method']}); dashed: the other target layers (null)")
    if series:
        ax.legend(fontsize=7, ncol=4, loc="lower left")
    fig.tight_layout()
    return fig


def write_transfer(output: str | Path, adapter, report: dict, *, command: str, inputs: dict[str, Any],
                   overwrite: bool = False) -> Path:
    """Write the adapter and its report into ``output`` atomically (nothing half-written on error)."""
    from safetensors.torch import save_file

    from paw.io.adapter import check_adapter

    # what PAW writes must load in PEFT: the same cross-check as on reading
    check_adapter(adapter.config, {k: tuple(v.shape) for k, v in adapter.tensors.items()}, path=output)
    with atomic_dir(output, overwrite=overwrite, inputs=[adapter.path]) as tmp:
        tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in sorted(adapter.tensors.items())}
        save_file(tensors, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        write_json(tmp / CONFIG_NAME, adapter.config)
        full = {"paw_version": __version__, "command": command, "inputs": inputs, **report}
        (tmp / REPORT_JSON).write_text(dumps(full), encoding="utf-8")
        (tmp / REPORT_CSV).write_text(report_csv(report), encoding="utf-8")
        fig = similarity_figure(report)
        save_figure(fig, tmp / PLOT, dpi=fig.dpi)
    return Path(output)
