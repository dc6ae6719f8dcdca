"""Figures for ``paw analyze-tokenizers`` (matplotlib, Agg backend; returned, never saved here)."""

from __future__ import annotations

from typing import Any


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "paw"
    return plt.subplots(figsize=(7, 4))


def length_ratio_figure(rows: list[dict[str, Any]], summary: dict[str, Any], *, source: str, target: str):
    """Histogram of per-line token-count ratios target/source, with the corpus-level ratio marked.

    Ratios are spread on a log axis (0.5 and 2 are equally far from 1) that spans the middle 98 % of
    lines: a few very short lines (ratio 10 from 1 token against 10) would otherwise stretch the axis
    and squeeze the mass near 1 into one bar. Lines outside the span are drawn in the end bins and
    counted in the legend.
    """
    import numpy as np

    fig, ax = _figure()
    ratios = np.array([r["length_ratio"] for r in rows if r["length_ratio"]], dtype=float)
    overall = summary["overall"]["length_ratio"]
    if len(ratios):
        lo, hi = np.percentile(ratios, [1, 99])
        lo, hi = min(lo, overall or lo) / 1.05, max(hi, overall or hi) * 1.05
        outside = int(((ratios < lo) | (ratios > hi)).sum())
        ax.hist(np.clip(ratios, lo, hi), bins=np.geomspace(lo, hi, 41), color="#4c72b0",
                label=f"{outside} line(s) beyond the axis, in the end bins" if outside else None)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        from matplotlib.ticker import FormatStrFormatter

        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="x", which="minor", labelsize=7)
    if overall is not None:
        ax.axvline(overall, color="#c44e52", linestyle="--", label=f"corpus: {overall:.3f}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.set_xlabel(f"tokens({target}) / tokens({source}) per line (log scale)")
    ax.set_ylabel("lines")
    ax.set_title("Length ratio, target over source")
    fig.tight_layout()
    return fig


def bytes_per_token_figure(summary: dict[str, Any], *, source: str, target: str):
    """Grouped bars: UTF-8 bytes per token for each script, source vs target."""
    import numpy as np

    fig, ax = _figure()
    scripts = list(summary["by_script"])
    x = np.arange(len(scripts))
    for k, (side, label) in enumerate((("source", source), ("target", target))):
        vals = [summary["by_script"][s][f"{side}_bytes_per_token"] or 0.0 for s in scripts]
        ax.bar(x + (k - 0.5) * 0.4, vals, width=0.4, label=label)
    ax.set_xticks(x, scripts, rotation=30, ha="right")
    ax.set_ylabel("bytes per token")
    ax.set_title("Bytes per token by script (higher = fewer tokens)")
    ax.legend()
    fig.tight_layout()
    return fig
