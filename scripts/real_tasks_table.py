"""Every move of `paw bench real --parts tasks` that a work folder holds, as one markdown table from its score files.

    python scripts/real_tasks_table.py WORK [--tasks arc-easy piqa] [--n-boot 1000] [--plot moves.png]

WORK is the bench's work folder (its ``tasks/TASK`` folders) or a folder of task folders, such as
``docs/benchmarks/real-tasks-2026-11-27``.

For each task and direction (SmolLM2-135M-Instruct <-> Gemma-3-270M), one row per move whose score file is
there: the main move (``score-T-moved-from-S``) and the variants (``score-T-moved-KEY-from-S``: base-teacher,
focus, synth, shift, and proxy: the target base with the source's shift added per choice, no training), each with its accuracy, its gain over the target's base (paired), the kept and recovered
fractions (cluster-bootstrap stderr), and the move minus the main move, paired on the items. Where a score file
names the adapter it scored (``adapter``), the source LoRA column gives the first 8 hex digits of its digest
(score files from before digests: "first machine's"), so rows from a LoRA trained again are never read as the
first machine's; a move whose own score file predates a LoRA trained again is marked. A move's score file
written since 2026-11-28 names the LoRA it was moved from (``source_lora``); the column then gives that one, and
says so where the source's own score file scored another copy. Nothing is run: the table
is what the files say. ``--plot`` draws the same accuracies, one panel per task and direction, with the target's
base and own LoRA and the teacher (the source with its LoRA) beside the moves. Where the synthesized cell ran,
a second table says what ``--discriminator`` kept of its inputs and of as many real ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from paw.bench.real.report import tasks_figure
from paw.bench.stats import accuracy, kept, paired_difference, recovered
from paw.io.json_file import read_json_if_exists
from paw.io.reports import save_figure

MODELS = ("smollm2-135m-instruct", "gemma-3-270m")
MOVES = {"": "main", "base-teacher-": "control: source base as teacher", "focus-": "token focus",
         "synth-": "synthesized inputs", "shift-": "shift target", "proxy-": "proxy-tuning (no training)"}
SHORT = {"smollm2-135m-instruct": "SmolLM2", "gemma-3-270m": "Gemma-3"}
TASKS = {"arc-easy": "ARC-Easy", "piqa": "PIQA", "boolq": "BoolQ"}


def _scores(folder: Path, key: str) -> tuple[list[int], str, str] | None:
    """``(outcomes, adapter digest, source LoRA digest)`` of a score file (digests cut to 8 hex digits, "" where
    the file names none), or None."""
    found = read_json_if_exists(folder / (f"{key}.json" if key.startswith("discriminator-") else f"score-{key}.json"))
    return None if found is None else (found["correct"], found.get("adapter", "")[:8], found.get("source_lora", "")[:8])


def _source_lora(scored: str, moved_digest: str, moved_from: str) -> str:
    """The source LoRA column: the LoRA the move names (``source_lora``), else the one the source's score file
    scored, with a warning wherever the two files may speak of different copies of the LoRA."""
    if moved_from:
        if moved_from == scored:
            return moved_from
        return moved_from + (f" (the source's score file scored another copy, {scored})" if scored
                             else " (the source's score is the first machine's LoRA's)")
    if scored and not moved_digest:
        return scored + " (the move's score predates it: an earlier LoRA's move)"
    return scored or "first machine's"


def rows(folder: Path, task: str, source: str, target: str, *, n_boot: int) -> list[str]:
    """The table rows of one direction (none where a base or LoRA score is missing)."""
    need = {k: _scores(folder, k) for k in (f"{source}-base", f"{source}-lora", f"{target}-base", f"{target}-lora")}
    if any(v is None for v in need.values()):
        return []
    sb, sl, tb, tl = (found[0] for found in need.values())
    main = _scores(folder, f"{target}-moved-from-{source}")
    out = []
    for key, what in MOVES.items():
        found = _scores(folder, f"{target}-moved-{key}from-{source}")
        if found is None:
            continue
        moved, digest, moved_from = found
        acc, gain = accuracy([moved]), paired_difference(moved, tb)
        k = kept([moved], [tb], [sl], [sb], n_boot=n_boot)
        r = recovered([moved], [tb], [tl], n_boot=n_boot)
        vs = "" if main is None or not key else _pm(paired_difference(moved, main[0]), "difference", 100)
        lora = _source_lora(need[f"{source}-lora"][1], digest, moved_from)
        out.append(f"| {task} | {source} -> {target} | {what} | {lora} | "
                   f"{100 * acc['mean']:.1f} ± {100 * acc['stderr']:.1f} | {_pm(gain, 'difference', 100)} | "
                   f"{_pm(k, 'value')} | {_pm(r, 'value')} | {vs} |")
    return out


def panel(folder: Path, task: str, source: str, target: str) -> dict | None:
    """The figure panel of one direction: the target's base and own LoRA, the teacher, then each move found."""
    s, t = SHORT.get(source, source), SHORT.get(target, target)
    wanted = [(f"{target}-base", f"{t} base", "target"), (f"{target}-lora", f"{t} + own LoRA (labels)", "target"),
              (f"{source}-lora", f"{s} + LoRA (the teacher)", "source")]
    wanted += [(f"{target}-moved-{key}from-{source}", f"moved: {what}", "main" if not key else "variant")
               for key, what in MOVES.items()]
    found = [(label, role, _scores(folder, key)) for key, label, role in wanted]
    if found[0][2] is None or not any(role in ("main", "variant") and got for _, role, got in found):
        return None
    out = []
    for label, role, got in found:
        if got is not None:
            acc = accuracy([got[0]])
            out.append({"label": label, "mean": 100 * acc["mean"], "stderr": 100 * acc["stderr"], "role": role})
    items = len(found[0][2][0])
    return {"title": f"{TASKS.get(task, task)}: {s} -> {t} ({items:,} test items)", "rows": out}


def discriminator_row(folder: Path, task: str, source: str, target: str) -> str | None:
    """What ``--discriminator`` said of the synthesized cell's inputs and of real ones (the bench's
    ``discriminator-synthesized-S-to-T`` and ``discriminator-real-S`` files: 1 kept, 0 dropped), or None."""
    written = _scores(folder, f"discriminator-synthesized-{source}-to-{target}")
    real = _scores(folder, f"discriminator-real-{source}")
    if written is None or real is None:
        return None
    a, b = accuracy([written[0]]), accuracy([real[0]])
    diff = {"difference": a["mean"] - b["mean"], "stderr": (a["stderr"] ** 2 + b["stderr"] ** 2) ** 0.5}
    return (f"| {task} | {source} -> {target} | {sum(written[0])}/{len(written[0])} = "
            f"{100 * a['mean']:.0f} ± {100 * a['stderr']:.0f}% | {sum(real[0])}/{len(real[0])} = "
            f"{100 * b['mean']:.0f} ± {100 * b['stderr']:.0f}% | {_pm(diff, 'difference', 100)} |")


def _pm(d: dict, key: str, scale: float = 1.0) -> str:
    if d.get(key) is None:
        return "n/a"
    digits = 1 if scale == 100 else 2
    sign = "+" if scale == 100 and d[key] >= 0 else ""
    value = f"{sign}{scale * d[key]:.{digits}f}"
    return value if d.get("stderr") is None else f"{value} ± {scale * d['stderr']:.{digits}f}"   # None: no bootstrap


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work", type=Path)
    p.add_argument("--tasks", nargs="*", default=["arc-easy", "piqa"])
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--plot", type=Path, help="also draw the accuracies into this figure (png, pdf or svg)")
    args = p.parse_args()
    print("| task | direction | move | source LoRA | accuracy | gain over target base | kept | recovered "
          "| this − main, paired |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    tasks = args.work / "tasks" if (args.work / "tasks").is_dir() else args.work   # a bench work folder, or docs'
    panels = []
    for task in args.tasks:
        for s, t in (MODELS, MODELS[::-1]):
            for row in rows(tasks / task, task, s, t, n_boot=args.n_boot):
                print(row)
            found = panel(tasks / task, task, s, t)
            panels += [found] if found else []
    judged = [row for task in args.tasks for s, t in (MODELS, MODELS[::-1])
              if (row := discriminator_row(tasks / task, task, s, t)) is not None]
    if judged:
        print("\n`--discriminator` on the inputs (kept of a seeded sample; the synthesized move trains on all of them)\n")
        print("| task | direction | synthesized inputs kept | real inputs kept | synthesized − real |")
        print("|---|---|---:|---:|---:|")
        print("\n".join(judged))
    if args.plot:
        save_figure(tasks_figure(panels), args.plot)
        print(f"\nfigure: {args.plot}")


if __name__ == "__main__":
    main()
