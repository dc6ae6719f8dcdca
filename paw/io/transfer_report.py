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
    """Two panels against source layer depth, one line per module type.

    Top: the subspace similarity of the base weights, with its chance level dashed (how related the
    models are; the same for every method). Bottom: ‖ΔW_t‖ / ‖ΔW_s‖, how much of the update the
    chosen method carried over. The bottom panel is what tells methods apart: ``copy`` keeps the whole
    update (1.0) where ``lora-x``'s projection onto a top-R subspace drops most of it.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 6), dpi=100)
    sim_ax, norm_ax = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2, sharex=None)
    sims, norms = _by_depth(report, "similarity"), _by_depth(report, "norm_ratio")
    for kind, pts in sorted(sims.items()):
        line = sim_ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=kind)[0]
        sim_ax.plot([p[0] for p in pts], [p[2] for p in pts], ls="--", lw=0.8, color=line.get_color())
    for kind, pts in sorted(norms.items()):
        norm_ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=kind)
    top = max([1.0] + [p[1] for pts in norms.values() for p in pts])
    for ax in (sim_ax, norm_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    sim_ax.set_ylabel("‖U_sᵀU_t‖²_F / R")
    sim_ax.set_ylim(-0.02, 1.02)
    sim_ax.set_title(f"subspace similarity of the bases ({report['method']}); dashed: the other target layers (null)", fontsize=9)
    norm_ax.set_xlabel("source layer")
    norm_ax.set_ylabel("‖ΔW_t‖ / ‖ΔW_s‖")
    norm_ax.set_ylim(-0.02, top * 1.05)
    norm_ax.axhline(1.0, color="grey", lw=0.6, ls=":")
    norm_ax.set_title("share of the update's norm carried over (1 = all of it)", fontsize=9)
    if sims:
        sim_ax.legend(fontsize=7, ncol=4, loc="lower left")
    fig.tight_layout()
    return fig


def _by_depth(report: dict, key: str) -> dict[str, list[tuple[int, float, float | None]]]:
    """``{module type: [(layer, value, null), ...]}`` sorted by layer, for the modules that have ``key``."""
    series: dict[str, list] = {}
    for rec in report["modules"]:
        m = re.search(r"layers\.(\d+)\.", rec["module"])
        if m and rec.get(key) is not None:
            kind = rec["module"].rsplit(".", 1)[-1]
            series.setdefault(kind, []).append((int(m[1]), rec[key], rec.get("similarity_null", rec.get("similarity_chance"))))
    return {k: sorted(v) for k, v in series.items()}


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
