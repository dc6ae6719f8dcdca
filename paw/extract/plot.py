"""The figure of ``paw extract-lora``'s report: energy held against rank, one line per module.

Built from the report dict alone (no tensors, no files); :func:`paw.io.reports.save_figure` writes it.
"""

from __future__ import annotations

_ROLE_ORDER = ("q", "k", "v", "o", "gate", "up", "down", "embed", "head")


def energy_figure(report: dict):
    """Cumulative share of ‖Δ‖²_F held at ranks 1..K for every extracted module, coloured by role.

    Dots mark the rank each module got; the dashed line is ``--energy`` when it was given. A curve
    that climbs steeply means a low-rank delta (a LoRA holds it); a straight diagonal means a
    full-rank one (random noise, or an update no small rank summarises).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    colours = {}
    modules = [m for m in report["modules"] if m["energies"] and not (m["tied"] and m["role"] == "head")]
    roles = sorted({m["role"] for m in modules}, key=lambda r: (_ROLE_ORDER + (r,)).index(r))
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, role in enumerate(roles):
        colours[role] = cycle[i % len(cycle)]
    for m in modules:
        ranks = range(1, len(m["energies"]) + 1)
        ax.plot(list(ranks), m["energies"], lw=0.8, alpha=0.7, color=colours[m["role"]])
        rank = m["rank"] if m["rank"] is not None else m.get("rank_considered")
        if rank:
            ax.plot([rank], [m["energies"][rank - 1]], marker="o", ms=3, color=colours[m["role"]])
    for role in roles:
        ax.plot([], [], color=colours[role], label=role)
    energy = report["options"].get("energy")
    if energy is not None:
        ax.axhline(energy, color="grey", lw=0.8, ls="--", label=f"--energy {energy:g}")
    ax.set_xlabel("rank")
    ax.set_ylabel("share of ‖Δ‖²_F held")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(left=0)
    ax.set_title("energy of the fine-tune's delta held by a rank-r LoRA (dots: the rank chosen)", fontsize=9)
    if roles:
        ax.legend(fontsize=7, ncol=5, loc="lower right")
    fig.tight_layout()
    return fig
