"""``paw bench real`` results as ``results.json``, ``results.md``, ``real.png`` and, with the tasks part,
``tasks.png`` (see :mod:`paw.bench.real.run`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from paw import __version__
from paw.bench.real.options import GEMMA, SMOL
from paw.bench.real.run import EVAL_SETS, run_real
from paw.bench.real.tasks import VARIANTS
from paw.io.atomic import atomic_dir, check_output, work_folder
from paw.io.manifest import write_json
from paw.io.reports import save_figure
from paw.progress import format_duration

_NAMES = {SMOL: "SmolLM2-135M-Instruct (Q4_1)", GEMMA: "Gemma-3-270M (Q4_K_M)"}


def _pct(acc: dict | None) -> str:
    return "—" if not acc else f"{100 * acc['mean']:.1f} ± {100 * acc['stderr']:.1f}"


def _frac(r: dict | None) -> str:
    if not r or r.get("value") is None:
        return "—"
    se = f" ± {r['stderr']:.2f}" if r.get("stderr") is not None else ""
    return f"{r['value']:.2f}{se}"


def _eval_table(ev: dict) -> list[str]:
    lines = ["| set | model | acc | acc_norm | published (unquantized) |", "|---|---|---|---|---|"]
    for set_name in EVAL_SETS:
        for model, per_set in ev["results"].items():
            r = per_set.get(set_name)
            if r is None:
                continue
            pub = ev["published"].get(model, {}).get(set_name)
            pub_text = f"{pub['value']:.1f} ({pub['metric']}, {pub['shots']})" if pub else "—"
            lines.append(f"| {set_name} | {_NAMES[model]} | {100 * r['accuracy']:.1f} ± {100 * r['stderr']:.1f} "
                         f"| {100 * r['accuracy_norm']:.1f} ± {100 * r['stderr_norm']:.1f} | {pub_text} |")
    return lines


def _transfer_table(tr: dict) -> list[str]:
    lines = [f"Task `{tr['task']}` ({tr['items']} held-out items, chance 25%). SmolLM2 base "
             f"{_pct(tr['source']['base'])}, with its LoRA {_pct(tr['source']['lora'])}.", "",
             "| condition on Gemma-3-270M | status | accuracy % | recovered | kept |", "|---|---|---|---|---|"]
    for name, row in tr["rows"].items():
        note = row.get("reason", "")
        state = row["status"] + (f": {note[:90]}" if note else "")
        lines.append(f"| {name} | {state} | {_pct(row.get('accuracy'))} | {_frac(row.get('recovered'))} "
                     f"| {_frac(row.get('kept'))} |")
    return lines


def _reworded_table(tr: dict) -> list[str]:
    """The same facts asked in phrasings never trained or distilled on, beside the taught phrasing's kept fraction."""
    rw = tr["reworded"]
    lines = [f"The same facts asked in {len(rw['phrasings'])} phrasings never used as a training or distillation "
             f"prompt ({rw['items']} items, task `{rw['task']}`). SmolLM2 base {_pct(rw['source']['base'])}, "
             f"with its LoRA {_pct(rw['source']['lora'])}.", "",
             "| condition on Gemma-3-270M | accuracy % | recovered | kept | kept, taught phrasing |",
             "|---|---|---|---|---|"]
    for name, row in rw["rows"].items():
        taught = tr["rows"].get(name, {})
        lines.append(f"| {name} | {_pct(row.get('accuracy'))} | {_frac(row.get('recovered'))} | {_frac(row.get('kept'))} "
                     f"| {_frac(taught.get('kept'))} |")
    return lines


def _merge_table(mg: dict) -> list[str]:
    lines = ["| task | SmolLM2 base % | its fine-tune % | " + " | ".join(f"{m} % (kept)" for m in mg["merges"]) + " |",
             "|---|---|---|" + "---|" * len(mg["merges"])]
    for task, row in mg["tasks"].items():
        cells = [f"{_pct(mg['merges'][m][task]['accuracy'])} ({_frac(mg['merges'][m][task]['kept'])})"
                 for m in mg["merges"]]
        lines.append(f"| {task} | {_pct(row['base'])} | {_pct(row['fine_tune'])} | " + " | ".join(cells) + " |")
    tv = ", ".join(f"{n}: ‖Δ‖₂ = {r['global_l2']:.3f}" for n, r in mg["task_vectors"].items())
    return [*lines, "", f"Task vectors (fine-tune − SmolLM2): {tv}."]


def _tasks_table(tk: dict) -> list[str]:
    lines = ["| task | direction | items | source base | source + LoRA | source gain (z) | target base | "
             "target + own LoRA | target + moved | moved − base | kept | recovered |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, t in tk["tasks"].items():
        for direction, d in t["directions"].items():
            a, g = d["accuracy"], d["source_gain"]
            conditions = (f"| {task} | {direction} | {d['items']} | {_pct(a['source base'])} | "
                          f"{_pct(a['source + LoRA'])} | {100 * g['difference']:+.1f} ({g['z']:.1f}) | "
                          f"{_pct(a['target base'])} | {_pct(a['target + own LoRA'])} | ")
            if "failed" in d:  # the move gave no adapter: the four other conditions still stand
                lines.append(conditions + f"{d['failed']} | | | |")
            else:
                m = d["moved_gain"]
                lines.append(conditions + f"{_pct(a['target + moved LoRA'])} | "
                             f"{100 * m['difference']:+.1f} ± {100 * m['stderr']:.1f} | "
                             f"{_frac(d['kept'])} | {_frac(d['recovered'])} |")
            for variant, label in VARIANTS.items():
                v = d.get(variant)
                if v is None:
                    continue
                if "failed" in v:
                    lines.append(f"| {task} | {direction}, {label} | | | | | | | {v['failed']} | | | |")
                    continue
                if variant == "synthesized":
                    label += f" ({v['inputs']['synthesis']['kept']} inputs)"
                if v.get("vs_main") is not None:   # the control: what the LoRA carried beyond its base
                    w = v["vs_main"]
                    label += f" (main move − this: {100 * w['difference']:+.1f} ± {100 * w['stderr']:.1f})"
                a, m = v["accuracy"], v["moved_gain"]
                lines.append(f"| {task} | {direction}, {label} | {d['items']} | | | | | | "
                             f"{_pct(a['target + moved LoRA'])} | {100 * m['difference']:+.1f} ± {100 * m['stderr']:.1f} | "
                             f"{_frac(v['kept'])} | {_frac(v['recovered'])} |")
    return lines


def markdown(results: dict) -> str:
    """The results as markdown tables, one section per part that ran."""
    out = ["# paw bench real", ""]
    if "eval" in results:
        out += ["## Multiple-choice accuracy (%, ± stderr)", "", *_eval_table(results["eval"]), ""]
    if "tokenizers" in results:
        cov = results["tokenizers"]["alignment_coverage"]
        out += ["## Tokenizers", "", "Gemma-3 tokens mapped to SmolLM2 tokens: "
                + ", ".join(f"{k} {v:,}" for k, v in cov.items()), ""]
    if "transfer" in results:
        out += ["## LoRA transfer SmolLM2 → Gemma-3", "", *_transfer_table(results["transfer"]), ""]
        if "reworded" in results["transfer"]:  # runs before the reworded questions lack it
            out += ["### Asked in other words", "", *_reworded_table(results["transfer"]), ""]
    if "merge" in results:
        out += ["## Task vectors and merges on SmolLM2", "", *_merge_table(results["merge"]), ""]
    if "tasks" in results:
        out += ["## Real task LoRAs moved by distill (%, ± stderr; fractions ± bootstrap stderr)", "",
                *_tasks_table(results["tasks"]), ""]
    secs = results.get("seconds", {})
    out += ["Wall time: " + ", ".join(f"{k} {format_duration(v)}" for k, v in secs.items())
            + f"; load average before/after {results['machine']['load_before'][0]:.1f}/"
              f"{results['machine']['load_after'][0]:.1f} on {results['machine']['cpus']} CPUs.", ""]
    return "\n".join(out)


def plot(results: dict):
    """Accuracy per evaluation set (both models, published figures as markers) and transfer accuracy.

    A bar shows the metric of the published figure beside it (hatched where that is ``acc_norm``), so
    marker and bar compare like with like; one panel per part that ran.
    """
    from matplotlib.figure import Figure

    panels = [p for p in ("eval", "transfer") if p in results]
    fig = Figure(figsize=(11 if len(panels) == 2 else 6.5, 4))
    if not panels:
        fig.text(0.5, 0.5, "no eval or transfer part in this run", ha="center")
        return fig
    axes = dict(zip(panels, fig.subplots(1, len(panels), squeeze=False,
                                         gridspec_kw={"width_ratios": [3, 2][:len(panels)]})[0], strict=True))
    if "eval" in axes:
        ax = axes["eval"]
        per_model = results["eval"]["results"]
        sets = [s for s in EVAL_SETS if all(s in per for per in per_model.values())]
        for k, (model, per_set) in enumerate(per_model.items()):
            pub = results["eval"]["published"].get(model, {})
            norm = [pub.get(s, {}).get("metric") == "acc_norm" for s in sets]
            xs = [i + (k - 0.5) * 0.38 for i in range(len(sets))]
            key = [("accuracy_norm", "stderr_norm") if n else ("accuracy", "stderr") for n in norm]
            bars = ax.bar(xs, [100 * per_set[s][a] for s, (a, _) in zip(sets, key, strict=True)], 0.36,
                          yerr=[100 * per_set[s][e] for s, (_, e) in zip(sets, key, strict=True)],
                          label=_NAMES[model], color=f"C{k}")
            for bar, n in zip(bars, norm, strict=True):
                bar.set_hatch("//" if n else "")
            px = [x for x, s in zip(xs, sets, strict=True) if s in pub]
            ax.scatter(px, [pub[s]["value"] for s in sets if s in pub], marker="_", s=300, color="black",
                       zorder=3, label="published (unquantized)" if k == 0 else None)
        ax.set_xticks(range(len(sets)), sets, rotation=20)
        ax.set_ylabel("accuracy % (hatched: acc_norm, as published)")
        ax.legend(fontsize=8)
    if "transfer" in axes:
        ax = axes["transfer"]
        found = {n: r for n, r in results["transfer"]["rows"].items() if r.get("accuracy")}
        order = [n for n in ("base", "random") if n in found] + \
                [n for n in found if n not in ("base", "random", "direct")] + (["direct"] if "direct" in found else [])
        refs = {"base", "random", "direct"}
        ax.bar(range(len(order)), [100 * found[n]["accuracy"]["mean"] for n in order],
               yerr=[100 * found[n]["accuracy"]["stderr"] for n in order],
               color=["tab:gray" if n in refs else "tab:green" for n in order])
        ax.set_xticks(range(len(order)), order, rotation=30)
        ax.set_ylabel("accuracy % (grey: references)")
        ax.set_title(f"SmolLM2 facts LoRA moved to Gemma-3-270M ({results['transfer']['items']} items)", fontsize=9)
    fig.tight_layout()
    return fig


_ROLE_COLOURS = {"target": "tab:gray", "source": "tab:brown", "main": "tab:green", "variant": "tab:blue"}


def tasks_figure(panels: list[dict]):
    """Accuracy of every condition of the real-task moves, one panel per task and direction.

    ``panels``: ``[{"title": str, "rows": [{"label", "mean", "stderr", "role"}, ...]}, ...]``, accuracy
    and stderr in percent; ``role`` is ``target`` (the target's base and own LoRA: grey), ``source`` (the
    teacher: brown), ``main`` (the default move: green) or ``variant`` (blue). A dashed line marks the
    target's base (the first ``target`` row), so a move left of it made the target worse.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    cols = 2 if len(panels) > 1 else 1
    rows = max(1, -(-len(panels) // cols))
    tallest = max((len(p["rows"]) for p in panels), default=1)
    fig = Figure(figsize=(6.5 * cols, (0.9 + 0.32 * tallest) * rows + 0.3))
    if not panels:
        fig.text(0.5, 0.5, "no real-task scores", ha="center")
        return fig
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, panel in zip(axes, panels, strict=False):
        found = panel["rows"][::-1]   # top to bottom as listed
        ys = range(len(found))
        ax.barh(ys, [r["mean"] for r in found], xerr=[r["stderr"] for r in found], height=0.7,
                color=[_ROLE_COLOURS[r["role"]] for r in found], capsize=2)
        for y, r in zip(ys, found, strict=True):
            ax.text(r["mean"] + r["stderr"] + 0.4, y, f"{r['mean']:.1f}", va="center", fontsize=7)
        ax.set_yticks(list(ys), [r["label"] for r in found], fontsize=8)
        base = next((r["mean"] for r in panel["rows"] if r["role"] == "target"), None)
        if base is not None:
            ax.axvline(base, ls="--", lw=0.8, color="black")
        lo = min(r["mean"] - r["stderr"] for r in found)
        hi = max(r["mean"] + r["stderr"] for r in found)
        ax.set_xlim(max(0.0, lo - 5), min(100.0, hi + 5))
        ax.set_title(panel["title"], fontsize=9)
        ax.set_xlabel("accuracy % (± stderr; dashed: the target's base)", fontsize=8)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def task_panels(tk: dict) -> list[dict]:
    """:func:`tasks_figure`'s panels from the tasks part of the results (``results["tasks"]``)."""
    panels = []
    for task, t in tk["tasks"].items():
        for direction, d in t["directions"].items():
            a = d["accuracy"]
            wanted = [("target base", "target"), ("target + own LoRA", "target"), ("source + LoRA", "source")]
            found = [(f"{k} (the teacher)" if role == "source" else k, role, a[k]) for k, role in wanted]
            if "failed" not in d:
                found.append(("moved", "main", a["target + moved LoRA"]))
            for variant, label in VARIANTS.items():
                v = d.get(variant)
                if v is not None and "failed" not in v:
                    found.append((f"moved: {label}", "variant", v["accuracy"]["target + moved LoRA"]))
            panels.append({"title": f"{task}: {direction} ({d['items']:,} test items)",
                           "rows": [{"label": label, "role": role, "mean": 100 * acc["mean"],
                                     "stderr": 100 * acc["stderr"]} for label, role, acc in found]})
    return panels


def write_real(output: str | Path, results: dict, *, overwrite: bool = False, command: str = "") -> Path:
    """Write ``results.json``, ``results.md``, ``real.png`` (and ``tasks.png``) into ``output`` atomically."""
    with atomic_dir(output, overwrite=overwrite) as tmp:
        write_json(tmp / "results.json", {"paw_version": __version__, "command": command, **results})
        (tmp / "results.md").write_text(markdown(results), encoding="utf-8")
        save_figure(plot(results), tmp / "real.png")
        if "tasks" in results:
            save_figure(tasks_figure(task_panels(results["tasks"])), tmp / "tasks.png")
    return Path(output)


def real_to_folder(opts, output: str | Path, *, workdir: str | Path | None = None, overwrite: bool = False,
                   command: str = "") -> dict:
    """:func:`paw.bench.real.run_real` into ``output`` (what ``paw bench real`` runs); returns the results."""
    check_output(output, overwrite=overwrite)
    opts.check()
    with tempfile.TemporaryDirectory(prefix="paw-bench-real-") as tmp:
        results = run_real(opts, work_folder(workdir) if workdir else tmp)
    write_real(output, results, overwrite=overwrite, command=command)
    return results
