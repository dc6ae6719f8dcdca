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
    """Histogram of per-line token-count ratios target/source, with the corpus-level ratio marked."""
    fig, ax = _figure()
    ratios = [r["length_ratio"] for r in rows if r["length_ratio"] is not None]
    ax.hist(ratios, bins=40, color="#4c72b0")
    overall = summary["overall"]["length_ratio"]
    if overall is not None:
        ax.axvline(overall, color="#c44e52", linestyle="--", label=f"corpus: {overall:.3f}")
        ax.legend()
    ax.set_xlabel(f"tokens({target}) / tokens({source}) per line")
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
