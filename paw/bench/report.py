"""Tables, plot and files of the transfer quality benchmark (from the dict :func:`run_benchmark` returns)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from paw.bench.results import TransferStatus

FIXED = ("base", "direct", "random")


def _statuses(row: dict) -> set[TransferStatus]:
    return {TransferStatus(value) for value in row["status"]}


def _acc(row: dict | None) -> str:
    if row is None:
        return "–"
    if "accuracy" not in row:
        return "n/a" if TransferStatus.NOT_APPLICABLE in _statuses(row) else "/".join(row["status"])
    a = row["accuracy"]
    mark = " (refused)" if TransferStatus.REFUSED in _statuses(row) else ""
    return f"{100 * a['mean']:.1f} ± {100 * a['stderr']:.1f}{mark}"


def _rec(row: dict | None, key: str = "recovered") -> str:
    if row is None or key not in row:
        return "–" if row is None else ("n/a" if TransferStatus.NOT_APPLICABLE in _statuses(row) else "–")
    r = row[key]
    if not r["ceiling_ok"] or r["value"] is None or not math.isfinite(r["value"]):
        return "†"
    if r["stderr"] is None:
        return f"{r['value']:.2f}"
    if r["stderr"] > 1:  # some resamples nearly cancel the denominator: the stderr says nothing, the interval does
        return f"{r['value']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"
    return f"{r['value']:.2f} ± {r['stderr']:.2f}"


def _index(results: dict) -> dict[tuple[str, str, str], dict]:
    return {(r["task"], r["target"], r["condition"]): r for r in results["rows"]}


def _order(results: dict, key: str) -> list[str]:
    seen: list[str] = []
    for row in results["rows"]:
        if row[key] not in seen:
            seen.append(row[key])
    return seen


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def _spread(row: dict | None) -> str:
    """Per-seed kept fractions and their spread (and across model builds, when runs were pooled)."""
    if row is None or "kept" not in row:
        return "–"
    k = row["kept"]
    text = " / ".join(_fmt(v) for v in k.get("per_seed", []))
    if k.get("seed_spread") is not None:
        text += f" (sd {k['seed_spread']:.2f})"
    if k.get("build_spread") is not None:
        text += "; builds " + " / ".join(_fmt(v) for v in k["per_build"].values()) + f" (sd {k['build_spread']:.2f})"
    return text


def _decided(row: dict | None) -> str:
    """``auto``'s pairing, methods, related modules and ΔW kept share from the first seed's transfer summary."""
    summaries = [v for v in ((row or {}).get("transfer_summary") or {}).values() if v and "methods" in v]
    if not summaries:
        return "refused | – | – | –" if row and TransferStatus.REFUSED in _statuses(row) else "– | – | – | –"
    s = summaries[0]
    methods = ", ".join(f"{k} {v}" for k, v in s.get("methods", {}).items()) or "–"
    kept = "–" if s.get("kept_share") is None else f"{s['kept_share']:.2f}"
    return f"{s.get('layers', '–')} {s.get('pairs', '')} | {methods} | {s.get('related')}/{s.get('judged')} | {kept}"


def markdown(results: dict) -> str:
    """Per task: accuracy (%) ± stderr, recovered and kept fractions ± bootstrap stderr, auto's spreads."""
    from paw.bench.tasks import TASK_LABELS

    index = _index(results)
    methods = results["settings"]["methods"]
    lines = []
    for task in _order(results, "task"):
        targets = [t for t in _order(results, "target") if (task, t, "base") in index]
        label = f" ({TASK_LABELS[task]})" if task in TASK_LABELS else ""
        cols = ["base", "direct", *methods, "random"]
        lines += [f"### Task `{task}`{label}: accuracy (%) ± stderr", "",
                  "| target | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for t in targets:
            lines.append(f"| {t} | " + " | ".join(_acc(index.get((task, t, c))) for c in cols) + " |")
        cols = [*methods, "random"]
        for key, title in (("kept", "kept fraction (transfer − target base) / (source + LoRA − source base)"),
                           ("recovered", "recovered fraction (transfer − base) / (direct − base)")):
            lines += ["", f"### Task `{task}`: {title} ± stderr", "",
                      "| target | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            for t in targets:
                lines.append(f"| {t} | " + " | ".join(_rec(index.get((task, t, c)), key) for c in cols) + " |")
        if "auto" in methods:
            lines += ["", f"Task `{task}`, `auto`: kept fraction per seed, and what it decided (first seed)", "",
                      "| target | kept per seed | layer pairing | methods | related | ΔW kept share |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {t} | {_spread(index.get((task, t, 'auto')))} | {_decided(index.get((task, t, 'auto')))} |"
                      for t in targets]
        lines.append("")
    from paw.bench.distill import markdown as distill_markdown  # kept fraction and CPU s of the distill rows

    lines.append(distill_markdown(results))
    skipped = {k: v["skipped"] for k, v in results["notes"].get("targets", {}).items() if "skipped" in v}
    for name, why in skipped.items():
        lines.append(f"Target `{name}`: {why}.")
    lines.append("† the denominator's gain is not two standard errors above zero, so the fraction is not meaningful; "
                 "[a, b]: the bootstrap's 2.5-97.5% interval, shown where some resamples nearly cancel the "
                 "denominator and the standard error is meaningless.")
    return "\n".join(lines) + "\n"


PLOTS = {  # row key -> (figure file, axis label, what a pale † cell means)
    "recovered": ("recovered.png", "recovered fraction", "the direct LoRA is not 2 stderr above the base"),
    "kept": ("kept.png", "kept fraction", "the source LoRA is not 2 stderr above the source base"),
}


def plot(results: dict, key: str = "recovered"):
    """Bar chart of the ``key`` fraction (recovered or kept) per target and method, one panel per task.

    Cells that are not plain numbers say so: a † cell (the ceiling is not two stderr above the base)
    is drawn pale and hatched with a † above it, a refused one (``auto`` kept the base) carries
    "refused", and a method that does not apply leaves its slot empty with "n/a". Returns the figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    _, label, dagger = PLOTS[key]
    index = _index(results)
    tasks = _order(results, "task")
    targets = _order(results, "target")
    methods = [*results["settings"]["methods"], "random"]
    fig, axes = plt.subplots(len(tasks), 1, figsize=(max(7, 1.3 * len(targets)), 3.2 * len(tasks)), squeeze=False)
    width = 0.8 / len(methods)
    for ax, task in zip(axes[:, 0], tasks, strict=True):
        top = 1.2   # the highest bar with its error, so that none is cut (at most 2.5: a ratio can explode)
        for j, method in enumerate(methods):
            cells = [_plot_cell(index.get((task, t, method)), key) for t in targets]
            x = np.arange(len(targets)) + (j - len(methods) / 2 + 0.5) * width
            bars = ax.bar(x, [c[0] for c in cells], width, yerr=[c[1] for c in cells], label=method, capsize=2)
            top = max([top, *(v + e for v, e, _ in cells if math.isfinite(v))])
            for bar, xi, (value, _, mark) in zip(bars, x, cells, strict=True):
                if mark == "†":
                    bar.set_alpha(0.35)
                    bar.set_hatch("//")
                if mark:
                    y = 0.02 if np.isnan(value) else max(value, 0) + 0.04
                    ax.text(xi, y, mark, ha="center", va="bottom", fontsize=6, rotation=90 if len(mark) > 1 else 0)
        ax.axhline(1.0, color="k", lw=0.6, ls="--")
        ax.axhline(0.0, color="k", lw=0.6)
        ax.set_xticks(np.arange(len(targets)), targets)
        ax.set_ylabel(label)
        ax.set_title(f"task: {task}   († pale: {dagger})", fontsize=9)
        ax.set_ylim(-0.5, min(top, 2.4) + 0.1)
    axes[0, 0].legend(ncol=min(len(methods), 4), fontsize=7)
    fig.tight_layout()
    return fig


def _plot_cell(row: dict | None, key: str = "recovered") -> tuple[float, float, str]:
    """``(value, stderr, mark)`` of one bar; value is NaN (no bar) where there is no number to draw."""
    nan = float("nan")
    if row is None:
        return nan, 0.0, ""
    statuses = _statuses(row)
    r = row.get(key)
    if r is None or r["value"] is None or not math.isfinite(r["value"]):
        mark = "n/a" if TransferStatus.NOT_APPLICABLE in statuses else ("†" if r is not None else "")
        return nan, 0.0, mark
    mark = "refused" if TransferStatus.REFUSED in statuses else ("†" if not r["ceiling_ok"] else "")
    return r["value"], r["stderr"] or 0.0, mark


def write_results(output: str | Path, results: dict, *, overwrite: bool = False, command: str = "") -> Path:
    """``output/`` with ``results.json``, ``results.md``, ``recovered.png`` and ``kept.png``, written atomically."""
    import matplotlib.pyplot as plt

    from paw import __version__
    from paw.io.atomic import atomic_dir
    from paw.io.manifest import write_json
    from paw.io.reports import save_figure

    record: dict[str, Any] = {"paw_version": __version__, "command": command, **results}
    with atomic_dir(output, overwrite=overwrite) as tmp:
        write_json(tmp / "results.json", record)
        (tmp / "results.md").write_text(markdown(results), encoding="utf-8")
        for key, (name, _, _) in PLOTS.items():
            fig = plot(results, key)
            save_figure(fig, tmp / name, dpi=110)
            plt.close(fig)
    return Path(output)
