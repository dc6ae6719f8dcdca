"""The transfer benchmark's results: per-item outcomes in, accuracy and recovered-fraction rows out.

``raw[task][base][seed]`` holds, per condition, the 0/1 outcome of every held-out item, and per
transfer method a :class:`TransferStatus` with its reason and the transfer report's summary.
:func:`summarize` turns that into rows; :func:`merge_results` pools runs of other seeds or tasks.
The raw part is kept in ``results.json`` (outcomes as ``'0110…'`` strings) so that runs can be
pooled later.
"""

from __future__ import annotations

import enum

from paw.bench.stats import accuracy, recovered
from paw.bench.targets import TARGETS
from paw.bench.tasks import TASKS
from paw.errors import PawError

SOURCE = "source"
FORMAT, VERSION = "paw-transfer-quality", 2   # version 2: statuses are TransferStatus values, reasons apart


class TransferStatus(str, enum.Enum):
    """What became of one transfer method on one base (the value is what ``results.json`` stores)."""

    OK = "ok"                          # transferred and scored
    REFUSED = "refused"                # ``auto`` judged the target unrelated: scored as the base
    NOT_APPLICABLE = "n/a"             # the method cannot map this adapter (e.g. copy across shapes)


def summarize(raw: dict, settings: dict, notes: dict, lora_notes: dict) -> dict:
    """Accuracy ± stderr and recovered fraction per task, base and condition; keeps the raw outcomes.

    A row's ``status`` lists the :class:`TransferStatus` values its seeds ended with (``['ok']``),
    ``reasons`` why a method did not run as asked.
    """
    methods = settings["methods"]
    rows = []
    order = [SOURCE, *TARGETS]
    for task in sorted(raw, key=lambda t: list(TASKS).index(t) if t in TASKS else len(TASKS)):
        per_base = raw[task]
        for base in sorted(per_base, key=lambda b: order.index(b) if b in order else len(order)):
            per_seed = per_base[base]
            seeds = sorted(per_seed)
            outcome = {s: per_seed[s]["outcomes"] for s in seeds}
            b, d = [outcome[s]["base"] for s in seeds], [outcome[s]["direct"] for s in seeds]
            for condition in ["base", "direct", "random", *methods]:
                statuses = sorted({per_seed[s]["status"].get(condition, TransferStatus.OK.value) for s in seeds})
                reasons = sorted({per_seed[s].get("reasons", {}).get(condition) for s in seeds} - {None})
                row = {"task": task, "target": base, "condition": condition, "status": statuses,
                       **({"reasons": reasons} if reasons else {})}
                if all(condition in outcome[s] for s in seeds):
                    t = [outcome[s][condition] for s in seeds]
                    row["accuracy"] = accuracy(t)
                    if condition not in ("base", "direct"):
                        row["recovered"] = recovered(t, b, d, n_boot=settings["n_boot"], seed=len(rows))
                    if condition in methods:
                        row["transfer_summary"] = {str(s): per_seed[s]["summaries"].get(condition) for s in seeds}
                rows.append(row)
    if any(m.startswith("distill[") for m in methods):  # the kept fraction: paw/bench/distill.py
        from paw.bench.distill import add_kept

        rows = add_kept(rows, raw, source=SOURCE, n_boot=settings["n_boot"])
    packed = {task: {base: {str(seed): {**r, "outcomes": {c: "".join(map(str, o)) for c, o in r["outcomes"].items()}}
                            for seed, r in per_seed.items()} for base, per_seed in per_base.items()}
              for task, per_base in raw.items()}
    return {"format": FORMAT, "version": VERSION, "settings": settings, "notes": notes,
            "lora": lora_notes, "rows": rows, "raw": packed}


def merge_results(runs: list[dict]) -> dict:
    """Pool runs made with other ``--seeds`` or ``--tasks`` but otherwise the same settings into one result.

    The models are rebuilt identically in every run (same ``model_seed``), so the runs describe the
    same bases; their times add up in ``notes.seconds`` (CPU work, not wall time when run in parallel).
    """
    if not runs:
        raise PawError("nothing to merge")
    free = ("seeds", "tasks")

    def fixed(run: dict) -> dict:
        return {k: v for k, v in run["settings"].items() if k not in free}

    raw: dict = {}
    for run in runs:
        if fixed(run) != fixed(runs[0]):
            raise PawError("runs differ in more than their seeds and tasks; they cannot be pooled")
        for task, per_base in run["raw"].items():
            for base, per_seed in per_base.items():
                for seed, r in per_seed.items():
                    outcomes = {c: [int(ch) for ch in o] for c, o in r["outcomes"].items()}
                    entry = {**r, "outcomes": outcomes}
                    if run.get("version", 1) < 2:
                        entry.update(_statuses_v1(r["status"]))
                    raw.setdefault(task, {}).setdefault(base, {})[int(seed)] = entry
    seeds = sorted({int(s) for run in runs for s in run["settings"]["seeds"]})
    tasks = list(dict.fromkeys(t for run in runs for t in run["settings"]["tasks"]))
    seconds = [run["notes"]["seconds"] for run in runs]
    notes = dict(runs[0]["notes"], seconds={k: sum(s.get(k, 0.0) for s in seconds) for k in seconds[0]},
                 merged_runs=len(runs))
    lora = {k: v for run in runs for k, v in run["lora"].items()}
    return summarize(raw, dict(runs[0]["settings"], seeds=seeds, tasks=tasks), notes, lora)


def _statuses_v1(status: dict[str, str]) -> dict[str, dict[str, str]]:
    """Version-1 files stored ``'n/a: <reason>'`` in one string; split it into a status and a reason."""
    statuses, reasons = {}, {}
    for method, text in status.items():
        value, _, reason = text.partition(": ")
        statuses[method] = TransferStatus(value).value
        if reason:
            reasons[method] = reason
    return {"status": statuses, "reasons": reasons}
