"""Distillation rows of the transfer benchmark, one per input budget (their names: :data:`paw.bench.conditions.CONDITIONS`).

For every target, task and seed the source LoRA is distilled onto the target
(:func:`paw.transfer.distill.distill_lora`) with the recipe of the benchmark's own LoRAs (batch,
learning rate; ``opts.distill_budget`` steps, three times the LoRA's by default) and three input
budgets, none with a label:

- ``inputs``: the prompts of the source LoRA's training set, answers dropped (a pool apart from the
  held-out items; for the memorisation task ``facts`` the questions coincide with the held-out
  questions, which ask the same facts against new distractors);
- ``synth``: 5 of those prompts as seeds; the teacher writes as many inputs as ``inputs`` has,
  kept by the likelihood-ratio filter (:mod:`paw.transfer.distill.synthesis`);
- ``generic``: the embedded sample text, no task data.

Each budget also has a ``-shift`` row (``inputs-shift`` ...): the same inputs with distill's
``--target shift``, the student learning its own base plus what the adapter changed in the teacher
(docs/distill.md); the ``facts-known`` task's targets start stronger than the teacher, where the two differ most.

Its table (:mod:`paw.bench.distill_tables`) puts the **kept fraction** ``(transfer - target base) / (source + LoRA - source base)``
(:func:`paw.bench.stats.kept`, on every row of the benchmark) first: a perfect imitation of the
teacher cannot beat the teacher, so 1 is what distillation aims at, whatever the target's own LoRA
gets. The recovered fraction and the CPU seconds of each transfer stand beside it.
"""

from __future__ import annotations

import random
import time
from typing import Any

from paw.bench import SHIFT
from paw.bench.outcomes import TransferStatus
from paw.bench.testbed import adapter_deltas, applied, merged_copy, without_adapter
from paw.errors import PawError
from paw.io.checkpoint import open_checkpoint
from paw.io.tokenizer import open_tokenizer
from paw.transfer.distill import LM, distill_lora
from paw.transfer.distill.prompts import Prompt, prompts_from
from paw.transfer.summary import DistillSummary

N_SEEDS = 5
N_EVAL = 32   # held-out items on which the report's teacher-student agreement is measured


def _side(base, model=None):
    """``base`` as a distillation side; ``model`` replaces its model (the teacher: a copy with the LoRA merged)."""
    return LM(base.model if model is None else model, base.tokenizer, base.name,
              checkpoint=open_checkpoint(base.folder), tokenizer_info=open_tokenizer(base.folder))


def inputs_for(kind: str, task, seed: int) -> dict[str, Any]:
    """``distill_lora`` keyword arguments of one input budget (training prompts never carry their answer);
    a task's own ``inputs`` replace its training prompts. A ``-shift`` budget adds ``target='shift'``."""
    if kind.endswith(SHIFT):
        return {**inputs_for(kind.removesuffix(SHIFT), task, seed), "target": "shift"}
    questions = task.inputs if task.inputs is not None else [item.question for item in task.train]
    prompts = prompts_from([Prompt(q) for q in questions])  # unique questions, no answers
    if kind == "inputs":
        return {"prompts": prompts}
    if kind == "synth":
        seeds = random.Random(f"distill-seeds-{seed}").sample(prompts, N_SEEDS)
        return {"synthesize": len(prompts), "seed_examples": seeds, "discriminator": True}
    return {"prompts": "generic"}


def run(out: dict, base, source, adapter, task, opts, seed: int, score, device, *, names: dict[str, str]) -> None:
    """Distill ``adapter`` onto ``base`` for every input budget in ``names``; fill ``out`` like a transfer method.

    ``names`` maps an input budget (``inputs``) to its row's condition name, in the order to run;
    ``score(model, tokenizer, items)`` gives 0/1 per held-out item; CPU seconds of each distillation
    (process time, so other jobs on the machine do not count) go into its summary.
    """
    student, teacher = _side(base), _side(source, merged_copy(source.model, adapter))
    teacher.adapter_off = without_adapter(teacher.model, adapter)  # the teacher's excess: with minus without the LoRA
    for kind, name in names.items():
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            moved, report = distill_lora(adapter, teacher, student, **inputs_for(kind, task, seed),
                                         steps=opts.distill_budget, batch_size=opts.lora_batch,
                                         lr=opts.distill_rate,
                                         eval_prompts=task.test[:N_EVAL], token_focus=opts.distill_token_focus,
                                         seed=seed, device=device,
                                         target_name=base.name, progress=False)
        except PawError as err:  # e.g. the teacher wrote no usable input from the seeds
            out["status"][name], out["summaries"][name] = TransferStatus.NOT_APPLICABLE.value, {}
            out["reasons"][name] = str(err)[:160]
            continue
        d = DistillSummary.from_report(report)
        out["status"][name] = TransferStatus.OK.value
        out["summaries"][name] = {
            "cpu_seconds": round(time.process_time() - cpu, 2), "wall_seconds": round(time.perf_counter() - wall, 2),
            "inputs": d.train, "losses": d.losses, "init": d.init, "loss_start": d.loss_start,
            "loss_end": d.loss_end, "loss_tail_drop": d.loss_tail_drop, "agreement": d.agreement_after,
            "agreement_before": d.agreement_before, **({"synthesis": d.synthesis} if d.synthesis is not None else {})}
        with applied(base.model, adapter_deltas(moved)):
            out["outcomes"][name] = score(base.model, base.tokenizer, task.scored)  # with the reworded items
