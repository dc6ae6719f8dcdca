"""The transfer benchmark's results: per-item outcomes in; accuracy, kept and recovered-fraction rows out.

``raw[task][base][key]`` (key: ``model_seed * 1000 + seed``) holds, per condition, the 0/1 outcome of
every held-out item, the items' clusters, and per transfer method a :class:`TransferStatus` with its
reason and the transfer report's summary. :func:`summarize` turns that into rows; :func:`merge_results`
pools runs of other seeds, tasks or model builds. The raw part is kept in ``results.json`` (outcomes
as ``'0110…'`` strings) so that runs can be pooled later.
"""

from __future__ import annotations

from paw.bench import conditions
from paw.bench.outcomes import TransferStatus
from paw.bench.stats import accuracy, build_spread, kept, recovered
from paw.bench.targets import TARGETS
from paw.bench.tasks import TASKS
from paw.errors import PawError

SOURCE = "source"
BUILD = 1000  # replicate key = model_seed * BUILD + seed, so pooled runs of other model builds stay apart
FORMAT, VERSION = "paw-transfer-quality", 2   # version 2: statuses are TransferStatus values, reasons apart
__all__ = ["BUILD", "FORMAT", "SOURCE", "VERSION", "TransferStatus", "merge_results", "summarize"]


def _ratios(t, b, d, src: dict | None, clusters, settings: dict, seed: int, keys: list[int]) -> dict:
    """Recovered and kept fractions of one condition, with their seed and (pooled runs) model-build spreads."""
    def both(idx: list[int], n_boot: int) -> dict:
        pick = [[x[i] for i in idx] for x in (t, b, d)]
        cl = [clusters[i] for i in idx]
        out = {"recovered": recovered(*pick, clusters=cl, n_boot=n_boot, seed=seed)}
        if src is not None:
            out["kept"] = kept(pick[0], pick[1], [src["direct"][i] for i in idx], [src["base"][i] for i in idx],
                               clusters=cl, n_boot=n_boot, seed=seed)
        return out

    out = both(list(range(len(keys))), settings["n_boot"])
    builds = sorted({k // BUILD for k in keys})
    if len(builds) > 1:
        per = {build: both([i for i, k in enumerate(keys) if k // BUILD == build], 0) for build in builds}
        for name in out:
            values = {build: per[build][name]["value"] for build in builds}
            out[name].update(per_build={str(k): v for k, v in values.items()}, build_spread=build_spread(values))
    return out


def _task_order(task: str) -> tuple[int, str]:
    """Registry order, each task's views (``facts:reworded``) right after it, unknown names last."""
    head = task.partition(":")[0]
    return (list(TASKS).index(head) if head in TASKS else len(TASKS), task)


def summarize(raw: dict, settings: dict, notes: dict, lora_notes: dict) -> dict:
    """Accuracy ± stderr, kept and recovered fractions per task, base and condition; keeps the raw outcomes.

    A row's ``status`` lists the :class:`TransferStatus` values its seeds ended with (``['ok']``),
    ``reasons`` why a method did not run as asked. The kept fraction divides by the source's own gain
    on the same items (``raw[task]['source']``); items of one cluster are resampled together.
    """
    methods = settings["methods"]
    rows = []
    order = [SOURCE, *TARGETS]
    for task in sorted(raw, key=_task_order):
        per_base = raw[task]
        for base in sorted(per_base, key=lambda b: order.index(b) if b in order else len(order)):
            per_seed = per_base[base]
            seeds = sorted(per_seed)
            outcome = {s: per_seed[s]["outcomes"] for s in seeds}
            clusters = [per_seed[s].get("clusters") for s in seeds]
            b, d = [outcome[s]["base"] for s in seeds], [outcome[s]["direct"] for s in seeds]
            source = per_base.get(SOURCE, {})
            src = ({"base": [source[s]["outcomes"]["base"] for s in seeds],
                    "direct": [source[s]["outcomes"]["direct"] for s in seeds]}
                   if all(s in source for s in seeds) else None)
            for condition in ["base", "direct", "random", *methods]:
                statuses = sorted({per_seed[s]["status"].get(condition, TransferStatus.OK.value) for s in seeds})
                reasons = sorted({per_seed[s].get("reasons", {}).get(condition) for s in seeds} - {None})
                row = {"task": task, "target": base, "condition": condition, "status": statuses,
                       **({"reasons": reasons} if reasons else {})}
                if all(condition in outcome[s] for s in seeds):
                    t = [outcome[s][condition] for s in seeds]
                    row["accuracy"] = accuracy(t)
                    if condition not in ("base", "direct"):
                        row.update(_ratios(t, b, d, src, clusters, settings, len(rows), seeds))
                    if condition in methods:
                        row["transfer_summary"] = {str(s): per_seed[s]["summaries"].get(condition) for s in seeds}
                rows.append(row)
    rows = conditions.add_columns(rows, raw, methods)  # e.g. CPU seconds per distillation
    packed = {task: {base: {str(seed): {**r, "outcomes": {c: "".join(map(str, o)) for c, o in r["outcomes"].items()}}
                            for seed, r in per_seed.items()} for base, per_seed in per_base.items()}
              for task, per_base in raw.items()}
    return {"format": FORMAT, "version": VERSION, "settings": settings, "notes": notes,
            "lora": lora_notes, "rows": rows, "raw": packed}


def merge_results(runs: list[dict]) -> dict:
    """Pool runs made with other ``--seeds``, ``--tasks`` or ``--model-seed`` but otherwise the same settings.

    Runs of one model seed rebuild the same bases, so their LoRA seeds pool directly; runs of other
    model seeds are other builds of the same recipe, kept apart (replicate key ``model_seed * 1000 +
    seed``) so that the spread between builds is reported. Times add up in ``notes.seconds`` (CPU
    work, not wall time when run in parallel).
    """
    if not runs:
        raise PawError("nothing to merge")
    free = ("seeds", "tasks", "model_seed")

    def fixed(run: dict) -> dict:
        return {k: v for k, v in run["settings"].items() if k not in free}

    raw: dict = {}
    for run in runs:
        if fixed(run) != fixed(runs[0]):
            raise PawError("runs differ in more than their seeds, tasks and model seeds; they cannot be pooled")
        build = int(run["settings"].get("model_seed", 0))
        for task, per_base in run["raw"].items():
            for base, per_seed in per_base.items():
                for seed, r in per_seed.items():
                    outcomes = {c: [int(ch) for ch in o] for c, o in r["outcomes"].items()}
                    entry = {**r, "outcomes": outcomes}
                    if run.get("version", 1) < 2:
                        entry.update(_statuses_v1(r["status"]))
                    raw.setdefault(task, {}).setdefault(base, {})[int(seed) % BUILD + BUILD * build] = entry
    seeds = sorted({int(s) for run in runs for s in run["settings"]["seeds"]})
    tasks = list(dict.fromkeys(t for run in runs for t in run["settings"]["tasks"]))
    seconds = [run["notes"]["seconds"] for run in runs]
    notes = dict(runs[0]["notes"], seconds={k: sum(s.get(k, 0.0) for s in seconds) for k in seconds[0]},
                 merged_runs=len(runs))
    lora = {k: v for run in runs for k, v in run["lora"].items()}
    builds = sorted({int(run["settings"].get("model_seed", 0)) for run in runs})
    settings = dict(runs[0]["settings"], seeds=seeds, tasks=tasks, model_seeds=builds)
    return summarize(raw, settings, notes, lora)


def _statuses_v1(status: dict[str, str]) -> dict[str, dict[str, str]]:
    """Version-1 files stored ``'n/a: <reason>'`` in one string; split it into a status and a reason."""
    statuses, reasons = {}, {}
    for method, text in status.items():
        value, _, reason = text.partition(": ")
        statuses[method] = TransferStatus(value).value
        if reason:
            reasons[method] = reason
    return {"status": statuses, "reasons": reasons}
