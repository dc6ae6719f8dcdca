"""The distill rows' figures and section of ``results.md``: CPU seconds per transfer, kept and recovered fractions.

Apart from :mod:`paw.bench.distill`, which runs the rows, so that reading results (and ``paw --help``,
through :mod:`paw.bench.conditions`) never loads the distillation code.
"""

from __future__ import annotations

from paw.bench.tables import table


def add_cpu_seconds(rows: list[dict], raw: dict, *, names: dict[str, str]) -> list[dict]:
    """Put the mean CPU seconds per transfer on every distill row (the kept fraction is every row's).

    ``names`` maps a row's condition name to its input budget (every distill row's, run or not).
    """
    for row in rows:
        if row["condition"] not in names or "accuracy" not in row:
            continue
        per_seed = raw[row["task"]][row["target"]]
        cpu = [(per_seed[s]["summaries"].get(row["condition"]) or {}).get("cpu_seconds") for s in sorted(per_seed)]
        row["cpu_seconds"] = sum(cpu) / len(cpu) if cpu and all(c is not None for c in cpu) else None
    return rows


def markdown(results: dict, *, names: dict[str, str]) -> str:
    """Per task: accuracy, kept and recovered fractions (± stderr) and CPU seconds of every distill row.

    ``names`` maps a row's condition name to its input budget. Rows that did not run are one line
    per input budget and reason, not a row per target; columns without a number are left out
    (:func:`paw.bench.tables.table`).
    """
    rows = [r for r in results["rows"] if r["condition"] in names]
    if not rows:
        return ""
    lines = []
    for task in dict.fromkeys(r["task"] for r in rows):
        here = [r for r in rows if r["task"] == task]
        cells = {(r["target"], names[r["condition"]]): [f"{100 * r['accuracy']['mean']:.1f} ± {100 * r['accuracy']['stderr']:.1f}",
                                           _fraction(r.get("kept")), _fraction(r.get("recovered")), _cpu(r)]
                 for r in here if "accuracy" in r}
        lines += table(f"Task `{task}`: distillation (kept = (transfer − target base) / (source+LoRA − source base); "
                       "recovered = (transfer − base) / (direct − base))",
                       ["accuracy (%)", "kept", "recovered", "CPU s / transfer"], cells, labels=("target", "inputs"))
        not_run: dict[tuple[str, str], list[str]] = {}
        for r in here:
            if "accuracy" not in r:
                reasons = r.get("reasons") or ["/".join(r["status"])]  # one per seed that gave its own
                why = reasons[0] + (f" (and {len(reasons) - 1} more like it)" if len(reasons) > 1 else "")
                not_run.setdefault((names[r["condition"]], why), []).append(r["target"])
        targets = list(dict.fromkeys(r["target"] for r in here))
        for (kind, why), missed in not_run.items():
            who = "every target" if missed == targets else ", ".join(missed)
            lines.append(f"Not run, inputs `{kind}` on {who}: {why}.")
        lines.append("")
    return "\n".join(lines) + "\n"


def _cpu(row: dict) -> str:
    cpu = row.get("cpu_seconds")
    return "–" if cpu is None else f"{cpu:.1f}" if cpu < 10 else f"{cpu:.0f}"


def _fraction(f: dict | None) -> str:
    if not f or f.get("value") is None:
        return "–"
    if f.get("ceiling_ok") is False:
        return "†"
    return f"{f['value']:.2f}" + (f" ± {f['stderr']:.2f}" if f.get("stderr") is not None else "")
