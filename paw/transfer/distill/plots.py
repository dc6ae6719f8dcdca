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
    parts = [k for k in curve if k not in ("loss", "probe") and any(v is not None for v in curve[k])]
    for key in (["loss"] + (parts if len(parts) > 1 else [])):
        values = [float("nan") if v is None else v for v in curve[key]]
        ax.plot(range(1, len(values) + 1), values, lw=1.2 if key == "loss" else 0.8, label=key)
    every = (section.get("budget") or {}).get("probe_every")
    if curve.get("probe") and every:  # the automatic budget's stopping signal, measured every `every` steps
        right = ax.twinx()
        right.plot([every * (i + 1) for i in range(len(curve["probe"]))], curve["probe"], "o-", ms=3, lw=0.8,
                   color="tab:green", label="agreement on the probe (stopping signal)")
        right.set_ylabel("agreement")
        right.set_ylim(0, 1.02)
        right.legend(fontsize=8, loc="center right")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"distill: {' + '.join(section['losses'])} ({section['inputs']['source']}, "
                 f"{section['inputs']['train']} inputs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
