"""Figures of a LoRA transfer, as pure functions of its report (``paw.io`` only saves them)."""

from __future__ import annotations

import re


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
