"""Tables, plot and files of the transfer quality benchmark (from the dict :func:`run_benchmark` returns)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from paw import __version__
from paw.bench import conditions
from paw.bench.outcomes import TransferStatus
from paw.bench.tables import no_number, table
from paw.bench.tasks import TASK_LABELS
from paw.io.atomic import atomic_dir
from paw.io.manifest import write_json
from paw.io.reports import save_figure

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


def _decided(row: dict | None) -> list[str]:
    """``auto``'s pairing, methods, related modules and ΔW kept share from the first seed's transfer summary."""
    summaries = [v for v in ((row or {}).get("transfer_summary") or {}).values() if v and "methods" in v]
    if not summaries:
        return ["refused" if row and TransferStatus.REFUSED in _statuses(row) else "–", "–", "–", "–"]
    s = summaries[0]
    methods = ", ".join(f"{k} {v}" for k, v in s.get("methods", {}).items()) or "–"
    kept = "–" if s.get("kept_share") is None else f"{s['kept_share']:.2f}"
    return [f"{s.get('layers', '–')} {s.get('pairs', '')}", methods, f"{s.get('related')}/{s.get('judged')}", kept]


def markdown(results: dict) -> str:
    """Per task: accuracy (%) ± stderr, recovered and kept fractions ± bootstrap stderr, auto's spreads.

    Rows and columns without a number (every cell †, – or n/a) are left out and named in one line;
    a table left with none is one line (see :func:`paw.bench.tables.table`), so a quick run prints what it measured.
    """
    index = _index(results)
    methods = results["settings"]["methods"]
    lines = []
    for task in _order(results, "task"):
        targets = [t for t in _order(results, "target") if (task, t, "base") in index]
        label = f" ({TASK_LABELS[task]})" if task in TASK_LABELS else ""
        cols = ["base", "direct", *methods, "random"]
        lines += table(f"Task `{task}`{label}: accuracy (%) ± stderr", cols,
                        {t: [_acc(index.get((task, t, c))) for c in cols] for t in targets})
        cols = [*methods, "random"]
        for key, title in (("kept", "kept fraction (transfer − target base) / (source + LoRA − source base)"),
                           ("recovered", "recovered fraction (transfer − base) / (direct − base)")):
            lines += table(f"Task `{task}`: {title} ± stderr", cols,
                            {t: [_rec(index.get((task, t, c)), key) for c in cols] for t in targets})
        if "auto" in methods:
            lines += table(f"Task `{task}`, `auto`: kept fraction per seed, and what it decided (first seed)",
                           ["kept per seed", "layer pairing", "methods", "related", "ΔW kept share"],
                           {t: [_spread(index.get((task, t, "auto"))), *_decided(index.get((task, t, "auto")))]
                            for t in targets}, empty=lambda cell: not cell.strip("–/ "))  # 'refused' says something
        lines += _beside_taught(index, task, targets, [*methods, "random"])
    lines.append(conditions.markdown(results))  # e.g. kept fraction and CPU s of the distill rows
    skipped = {k: v["skipped"] for k, v in results["notes"].get("targets", {}).items() if "skipped" in v}
    for name, why in skipped.items():
        lines.append(f"Target `{name}`: {why}.")
    body = "\n".join(lines)
    notes = [note for mark, note in FOOTNOTES.items() if re.search(mark, body)]  # said once, where used
    return "\n".join([body, *notes]) + "\n"


def _beside_taught(index: dict, task: str, targets: list[str], cols: list[str]) -> list[str]:
    """For a reworded view (``facts:reworded``): its kept fraction beside the taught phrasing's, cell by cell."""
    taught = task.partition(":")[0]
    if task == taught or not any((taught, t, "base") in index for t in targets):
        return []

    def cell(target: str, condition: str) -> str:
        pair = [_rec(index.get((name, target, condition)), "kept") for name in (taught, task)]
        return "–" if all(no_number(c) for c in pair) else " → ".join(pair)

    return table(f"Task `{taught}`: kept fraction ± stderr, taught phrasing → asked in other words", cols,
                 {t: [cell(t, c) for c in cols] for t in targets})


FOOTNOTES = {  # a pattern of the tables -> the note that explains it
    "†": "† the denominator's gain is not two standard errors above zero, so the fraction is not meaningful.",
    r"\d \[-?\d": "[a, b]: the bootstrap's 2.5-97.5% interval, shown where some resamples nearly cancel the "
                  "denominator and the standard error is meaningless.",
}


PLOTS = {  # row key -> (figure file, axis label, what a pale † cell means)
    "recovered": ("recovered.png", "recovered fraction", "the direct LoRA is not 2 stderr above the base"),
    "kept": ("kept.png", "kept fraction", "the source LoRA is not 2 stderr above the source base"),
}


def plot(results: dict, key: str = "recovered"):
    """Bar chart of the ``key`` fraction (recovered or kept) per target and method, one panel per task.

    Cells that are not plain numbers say so: a † cell (the ceiling is not two stderr above the base)
    is drawn pale and hatched with a † above it, a refused one (``auto`` kept the base) carries
    "refused", and a method that does not apply leaves its slot empty with "n/a". A task or a method
    without a single bar gets no panel or slot; the figure's title names them.
    Returns the figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, label, dagger = PLOTS[key]
    index = _index(results)
    targets = _order(results, "target")
    methods = [*results["settings"]["methods"], "random"]
    cells = {task: {m: [_plot_cell(index.get((task, t, m)), key) for t in targets] for m in methods}
             for task in _order(results, "task")}
    drawn = [task for task, per in cells.items() if any(math.isfinite(c[0]) for row in per.values() for c in row)]
    empty = [task for task in cells if task not in drawn]
    bare = [m for m in methods if not any(math.isfinite(c[0]) for task in drawn for c in cells[task][m])]
    cells = {task: {m: row for m, row in per.items() if m not in bare} for task, per in cells.items()}
    fig, axes = plt.subplots(max(len(drawn), 1), 1, figsize=(max(7, 1.3 * len(targets)), 3.2 * max(len(drawn), 1)),
                             squeeze=False)
    for ax, task in zip(axes[:, 0], drawn, strict=False):
        _panel(ax, task, cells[task], targets, label, dagger)
    said = "; ".join(([f"task{'s' * (len(empty) > 1)} {', '.join(empty)}"] if empty else [])
                     + ([f"method{'s' * (len(bare) > 1)} {', '.join(bare)}"] if bare and drawn else []))
    if not drawn:
        axes[0, 0].set_axis_off()
        axes[0, 0].text(0.5, 0.5, f"no {label} to draw (†, n/a or no rows)", ha="center", va="center")
    else:
        axes[0, 0].legend(ncol=min(len(methods) - len(bare), 4), fontsize=7)
        if said:
            fig.suptitle(f"not drawn, no {label} (†, n/a or no rows): {said}", fontsize=8)
    fig.tight_layout()
    return fig


def _panel(ax, task: str, cells: dict[str, list[tuple[float, float, str]]], targets: list[str], label: str,
           dagger: str) -> None:
    """One task's bars: per target, one bar per method (``cells[method][target index]``)."""
    import numpy as np

    width = 0.8 / len(cells)
    top = 1.2   # the highest bar with its error, so that none is cut (at most 2.5: a ratio can explode)
    for j, (method, row) in enumerate(cells.items()):
        x = np.arange(len(targets)) + (j - len(cells) / 2 + 0.5) * width
        bars = ax.bar(x, [c[0] for c in row], width, yerr=[c[1] for c in row], label=method, capsize=2)
        top = max([top, *(v + e for v, e, _ in row if math.isfinite(v))])
        for bar, xi, (value, _, mark) in zip(bars, x, row, strict=True):
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

    record: dict[str, Any] = {"paw_version": __version__, "command": command, **results}
    with atomic_dir(output, overwrite=overwrite) as tmp:
        write_json(tmp / "results.json", record)
        (tmp / "results.md").write_text(markdown(results), encoding="utf-8")
        for key, (name, _, _) in PLOTS.items():
            fig = plot(results, key)
            save_figure(fig, tmp / name, dpi=110)
            plt.close(fig)
    return Path(output)
