"""Figures of what :mod:`paw.bpe` measures, built from plain numbers; ``paw.io`` only saves them.

>>> fig = compression_chart({"en.txt": {"my": 4.1, "llama3": 4.4}}, ylabel="bytes per token", title="t")
>>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
['en.txt']
"""

from __future__ import annotations


def compression_chart(values: dict[str, dict[str, float]], *, ylabel: str, title: str):
    """Grouped bars: ``values[group][series]`` (groups on the x axis, one colour per series), each
    bar labelled with its value. A ``matplotlib.figure.Figure``, drawn by no global pyplot state."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    groups = list(values)
    series = list(dict.fromkeys(s for g in groups for s in values[g]))
    width = 0.8 / max(1, len(series))
    fig = Figure(figsize=(1.6 + 1.4 * len(groups) * max(1, len(series)) ** 0.5, 4), dpi=120)
    ax = fig.add_subplot(1, 1, 1)
    for k, name in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ys = [values[g].get(name, 0.0) for g in groups]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
