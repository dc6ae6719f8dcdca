"""Figures of a distillation run, built from its report; ``paw.io`` only saves them."""

from __future__ import annotations


def curve_figure(report: dict):
    """The distillation loss per step: the total and, when there are several, each of its parts.

    ``report["distill"]`` holds ``curve`` (``{"loss": [...], part: [...]}``, ``None`` where a step
    has no value), ``losses`` and ``inputs``, as :func:`paw.transfer.distill.run.distill_to_folder`
    writes them into ``transfer_report.json``. A ``matplotlib.figure.Figure``, no pyplot state.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    section = report["distill"]
    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    curve = section["curve"]
    parts = [k for k in curve if k != "loss" and any(v is not None for v in curve[k])]
    for key in (["loss"] + (parts if len(parts) > 1 else [])):
        values = [float("nan") if v is None else v for v in curve[key]]
        ax.plot(range(1, len(values) + 1), values, lw=1.2 if key == "loss" else 0.8, label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"distill: {' + '.join(section['losses'])} ({section['inputs']['source']}, "
                 f"{section['inputs']['train']} inputs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
