"""Distillation rows of the transfer benchmark: ``distill[inputs]``, ``distill[synth]``, ``distill[generic]``.

For every target, task and seed the source LoRA is distilled onto the target
(:func:`paw.transfer.distill.distill_lora`) with the recipe of the benchmark's own LoRAs (batch,
learning rate; ``opts.distill_budget`` steps, three times the LoRA's by default) and three input
budgets, none with a label:

- ``inputs``: the prompts of the source LoRA's training set, answers dropped (a pool apart from the
  held-out items; for the memorisation task ``facts`` the questions coincide with the held-out
  questions, which ask the same facts against new distractors);
- ``synth``: 5 of those prompts as seeds; the teacher writes as many inputs as ``inputs`` has,
  kept by the likelihood-ratio filter (:mod:`paw.transfer.distill_data`);
- ``generic``: the embedded sample text, no task data.

Its table puts the **kept fraction** ``(transfer - target base) / (source + LoRA - source base)``
(:func:`paw.bench.stats.kept`, on every row of the benchmark) first: a perfect imitation of the
teacher cannot beat the teacher, so 1 is what distillation aims at, whatever the target's own LoRA
gets. The recovered fraction and the CPU seconds of each transfer stand beside it.
"""

from __future__ import annotations

import random
import time
from typing import Any

from paw.errors import PawError

KINDS = ("inputs", "synth", "generic")
N_SEEDS = 5
N_EVAL = 32   # held-out items on which the report's teacher-student agreement is measured


def condition(kind: str) -> str:
    return f"distill[{kind}]"


def conditions(kinds) -> list[str]:
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise PawError(f"unknown distill input budget {unknown[0]!r}; choose from {', '.join(KINDS)}")
    return [condition(k) for k in kinds]


def _side(base, model=None):
    """``base`` as a distillation side; ``model`` replaces its model (the teacher: a copy with the LoRA merged)."""
    from paw.io.checkpoint import open_checkpoint
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import LM

    return LM(base.model if model is None else model, base.tokenizer, base.name,
              checkpoint=open_checkpoint(base.folder), tokenizer_info=open_tokenizer(base.folder))


def inputs_for(kind: str, task, seed: int) -> dict[str, Any]:
    """``distill_lora`` keyword arguments of one input budget (training prompts never carry their answer)."""
    from paw.transfer.distill_data import Prompt, prompts_from

    prompts = prompts_from([Prompt(item.question) for item in task.train])  # unique questions, no answers
    if kind == "inputs":
        return {"prompts": prompts}
    if kind == "synth":
        seeds = random.Random(f"distill-seeds-{seed}").sample(prompts, N_SEEDS)
        return {"synthesize": len(prompts), "seed_examples": seeds, "discriminator": True}
    return {"prompts": "generic"}


def run(out: dict, base, source, adapter, task, opts, seed: int, score, device) -> None:
    """Distill ``adapter`` onto ``base`` for every kind in ``opts.distill``; fill ``out`` like a transfer method.

    ``score(model, tokenizer, items)`` gives 0/1 per held-out item; CPU seconds of each distillation
    (process time, so other jobs on the machine do not count) go into its summary.
    """
    import copy

    import torch

    from paw.bench.quality import adapter_deltas, applied
    from paw.bench.results import TransferStatus
    from paw.transfer.distill import distill_lora

    student, teacher = _side(base), _side(source, copy.deepcopy(source.model))
    params = dict(teacher.model.named_parameters())
    with torch.no_grad():
        for name, delta in adapter_deltas(adapter).items():
            params[name].add_(delta.to(params[name].device, params[name].dtype))
    for kind in opts.distill:
        name = condition(kind)
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            moved, report = distill_lora(adapter, teacher, student, **inputs_for(kind, task, seed),
                                         steps=opts.distill_budget, batch_size=opts.lora_batch, lr=opts.lora_lr,
                                         eval_prompts=task.test[:N_EVAL], seed=seed, device=device,
                                         target_name=base.name, progress=False)
        except PawError as err:  # e.g. the teacher wrote no usable input from the seeds
            out["status"][name], out["summaries"][name] = TransferStatus.NOT_APPLICABLE.value, {}
            out["reasons"][name] = str(err)[:160]
            continue
        d = report["distill"]
        out["status"][name] = TransferStatus.OK.value
        out["summaries"][name] = {
            "cpu_seconds": round(time.process_time() - cpu, 2), "wall_seconds": round(time.perf_counter() - wall, 2),
            "inputs": d["inputs"]["train"], "losses": d["losses"], "init": d["init"]["how"],
            "loss_start": d["loss_start"], "loss_end": d["loss_end"], "loss_tail_drop": d["loss_tail_drop"],
            "agreement": d["agreement"]["after"],
            "agreement_before": d["agreement"]["before"],
            **({"synthesis": d["inputs"]["synthesis"]} if "synthesis" in d["inputs"] else {})}
        with applied(base.model, adapter_deltas(moved)):
            out["outcomes"][name] = score(base.model, base.tokenizer, task.test)


# ------------------------------------------------------------------------------------ tables

def add_cpu_seconds(rows: list[dict], raw: dict) -> list[dict]:
    """Put the mean CPU seconds per transfer on every distill row (the kept fraction is every row's)."""
    for row in rows:
        if not row["condition"].startswith("distill[") or "accuracy" not in row:
            continue
        per_seed = raw[row["task"]][row["target"]]
        cpu = [(per_seed[s]["summaries"].get(row["condition"]) or {}).get("cpu_seconds") for s in sorted(per_seed)]
        row["cpu_seconds"] = sum(cpu) / len(cpu) if cpu and all(c is not None for c in cpu) else None
    return rows


def markdown(results: dict) -> str:
    """Per task: accuracy, kept and recovered fractions (± stderr) and CPU seconds of every distill row.

    Rows that did not run are one line per input budget and reason, not a row per target; columns
    without a number are left out (:func:`paw.bench.report.table`).
    """
    from paw.bench.report import table

    rows = [r for r in results["rows"] if r["condition"].startswith("distill[")]
    if not rows:
        return ""
    lines = []
    for task in dict.fromkeys(r["task"] for r in rows):
        here = [r for r in rows if r["task"] == task]
        cells = {(r["target"], _kind(r)): [f"{100 * r['accuracy']['mean']:.1f} ± {100 * r['accuracy']['stderr']:.1f}",
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
                not_run.setdefault((_kind(r), why), []).append(r["target"])
        targets = list(dict.fromkeys(r["target"] for r in here))
        for (kind, why), names in not_run.items():
            who = "every target" if names == targets else ", ".join(names)
            lines.append(f"Not run, inputs `{kind}` on {who}: {why}.")
        lines.append("")
    return "\n".join(lines) + "\n"


def _kind(row: dict) -> str:
    return row["condition"][len("distill["):-1]


def _cpu(row: dict) -> str:
    cpu = row.get("cpu_seconds")
    return "–" if cpu is None else f"{cpu:.1f}" if cpu < 10 else f"{cpu:.0f}"


def _fraction(f: dict | None) -> str:
    if not f or f.get("value") is None:
        return "–"
    if f.get("ceiling_ok") is False:
        return "†"
    return f"{f['value']:.2f}" + (f" ± {f['stderr']:.2f}" if f.get("stderr") is not None else "")
