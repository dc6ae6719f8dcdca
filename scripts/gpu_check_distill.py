"""Does distillation's teacher score choices on the device as it does on the CPU? Run before any lease's bench.

On 2026-11-27 (an H200, transformers 5.17.0) ``scripts/gpu_check_scores.py`` found CUDA and the device's CPU
in agreement, yet the ARC-Easy base-teacher distillation that ran next had recorded Gemma-3's choice
log-likelihoods as -77.6, -98.1, -99.3, -97.4 for the first four pairs where this machine, through the same
bench code, gives -10.5, -18.7, -27.0, -21.6. The cause was not CUDA but the device's Gemma-3 tokenizer
(transformers 5.17 had written it to cut text into characters; docs/benchmarks/gpu.md, fourth lease): the
scoring check compared the device with itself. This runs the whole path, the bench's ``run_variant`` with a
tiny recipe (8 label-free inputs, 1 step, 8 test items), in a scratch cache holding only the task's cached
LoRAs, once per device given, and prints the teacher's first choice scores beside the same pairs scored
directly (``score_encoded``); on a sound device its CPU row reads -10.49, -18.71, -27.04, -21.61, as here.

    python scripts/gpu_check_distill.py MODELS DATA WORK [DEVICE ...]   (default devices: cpu cuda)

MODELS holds gemma-3-270m and smollm2-135m-instruct; WORK is the bench's work folder (its
``tasks/arc-easy/lora-*`` adapters are linked, never written; where it has none, one-step LoRAs stand in).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from paw.bench.real import tasks as real_tasks
from paw.bench.testbed import Base
from paw.bench.testbed import load_model as _load
from paw.evaluate.encode import encode_pair, max_length_of, pad_id_of
from paw.evaluate.mc import score_encoded
from paw.transfer.distill.lora import _visited
from paw.transfer.distill.train import START

TEACHER, STUDENT = "gemma-3-270m", "smollm2-135m-instruct"


def teacher_scores(models: Path, data: str, work: Path, device: str) -> tuple[list[float], list[float]]:
    """(the scores the distillation recorded, the same pairs scored directly) on ``device``."""
    cached = work / "tasks" / "arc-easy"
    scratch = Path(tempfile.mkdtemp(prefix="paw-check-distill-"))
    try:
        for f in cached.glob("lora-*"):
            (scratch / f.name).symlink_to(f.resolve())
        sides = {}
        for name in (TEACHER, STUDENT):
            lm, tok = _load(models / name, device)
            sides[name] = Base(name, lm, tok, models / name)
        train, test = real_tasks.load_task(data, "arc-easy", 0)
        # without both cached LoRAs (a new machine), one-step ones stand in: the base-teacher control's teacher
        # leaves the LoRA out and its student starts fresh, so only the LoRA's shape reaches this path
        # (one LoRA cached and the other not would train the missing one for the whole recipe: on 2026-11-28 that
        # ran past the check's four minutes on the device's CPU and stopped the lease's call)
        cached_both = all((scratch / f"lora-{n}.meta.json").is_file() for n in (TEACHER, STUDENT))
        stand_in = {} if cached_both else {"lora_steps": 1}
        recipe = replace(real_tasks.RECIPE, train_inputs=8, distill_steps=1, **stand_in)
        real_tasks.run_variant(sides[TEACHER], sides[STUDENT], train, test[:8], real_tasks.Cache(scratch), "base-teacher",
                               recipe=recipe, seed=0, device=device)
        recorded = json.loads((scratch / f"distilled-base-teacher-{TEACHER}-to-{STUDENT}-work"
                               / "teacher-choice-scores.json").read_text())["values"]
        teacher = sides[TEACHER]
        inputs = _visited(real_tasks.label_free_inputs(train, recipe, 0), recipe.distill_steps, recipe.lora_batch, 0)
        enc = [encode_pair(teacher.tokenizer, c, x, max_length=max_length_of(teacher.model), start=START)
               for p in inputs for c, x in p.pairs]
        direct = [ll for ll, _ in score_encoded(teacher.model, enc, pad_id=pad_id_of(teacher.tokenizer), device=device,
                                                progress=False)]
        return recorded, direct
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    models, data, work = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    devices = sys.argv[4:] or ["cpu", "cuda"]
    rows = {d: teacher_scores(models, data, work, d) for d in devices}
    ref = rows["cpu"][1] if "cpu" in rows else None
    for device, (recorded, direct) in rows.items():
        worst = ""
        if ref is not None:
            gap = {name: max(abs(a - b) for a, b in zip(v, ref, strict=True)) for name, v in
                   (("recorded", recorded), ("direct", direct))}
            worst = f"   max |dLL| vs cpu direct: recorded {gap['recorded']:.4f}, direct {gap['direct']:.4f}"
        print(f"{device:5s} recorded {[round(v, 2) for v in recorded[:4]]}  direct {[round(v, 2) for v in direct[:4]]}{worst}",
              flush=True)


if __name__ == "__main__":
    main()
