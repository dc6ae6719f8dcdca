"""Does a device score the real models as the CPU does? ``paw bench real --check-device scores,distill``.

The first lines of a GPU lease's log, before any bench (``scripts/gpu_real_tasks.sh`` runs both):

- ``scores``: on 2026-11-26 (an H200, transformers 5.17.0) Gemma-3-270M with the same LoRA scored 54.5% on
  PIQA's 1,000 test items under ``--device cuda`` and 65.4% on the CPU. For the first :data:`SCORE_ITEMS`
  PIQA test items and each model this gives the accuracy and the largest log-likelihood difference
  against the CPU of: the device at batch 8 with the memory-efficient SDPA kernel allowed (PAW's guard,
  :func:`paw.device.guard_cuda_attention`, bypassed: the suspect, pytorch issue 191937, for one
  key/value head), batch 1 (no padding), batch 8 as PAW runs it (guarded), only the math kernel, eager
  attention; and the loss of one plain sentence (:data:`SENTENCE`). On a sound device the CPU rows read
  Gemma-3 0.625 / 2.3884 and SmolLM2 0.575 / 1.7143 (docs/benchmarks/gpu.md).
- ``distill``: on 2026-11-27 the scores check found CUDA and the device's CPU in agreement, yet the
  ARC-Easy base-teacher distillation that ran next recorded Gemma-3's choice log-likelihoods as -77.6,
  -98.1, -99.3, -97.4 for the first four pairs where this machine gives -10.5, -18.7, -27.0, -21.6: the
  device's Gemma-3 tokenizer was broken, and the scores check compared the device with itself. This runs
  the whole path, the bench's :func:`~paw.bench.real.tasks.run_variant` with a tiny recipe
  (:data:`DISTILL_ITEMS` label-free inputs, 1 step, as many test items) in a scratch cache holding only
  the task's cached LoRAs (linked, never written; without both, one-step LoRAs stand in), on the CPU and
  on the device, and gives the teacher's recorded choice scores beside the same pairs scored directly;
  on a sound device its CPU row reads -10.49, -18.71, -27.04, -21.61.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from paw.bench.real.cache import Cache
from paw.bench.real.options import GEMMA, SMOL, RealCheck, RealOptions
from paw.bench.real.task_sets import load_task
from paw.bench.real.tasks import RECIPE, label_free_inputs, run_variant, work_folder
from paw.bench.testbed import choice_lls, load_base, load_model, picked_right
from paw.evaluate.encode import encode_pair, max_length_of, pad_id_of
from paw.evaluate.mc import score_encoded
from paw.io.json_file import read_json
from paw.transfer.distill.lora import _visited
from paw.transfer.distill.prompts import START

SCORE_TASK, SCORE_ITEMS = "piqa", 40
SENTENCE = "The capital of France is Paris. The capital of Germany is Berlin."
# (label, on the device (else the CPU), batch size, attention: as PAW runs it, unguarded, math kernel only, eager)
SETTINGS = (("cpu, batch 8", False, 8, "sdpa"), ("{device}, batch 8, unguarded", True, 8, "unguarded"),
            ("{device}, batch 1", True, 1, "sdpa"), ("{device}, batch 8", True, 8, "sdpa"),
            ("{device}, batch 8, math sdpa", True, 8, "math"), ("{device}, batch 8, eager", True, 8, "eager"))
DISTILL_TASK, TEACHER, STUDENT = "arc-easy", GEMMA, SMOL
DISTILL_ITEMS = 8   # label-free inputs and test items of the distill check's one-step recipe


@dataclass(frozen=True)
class ScoreRow:
    label: str
    scores: list[float]     # every choice's log-likelihood, item by item
    accuracy: float
    sentence_loss: float


@dataclass(frozen=True)
class DistillRow:
    device: str
    recorded: list[float]   # the teacher's choice scores as the distillation recorded them
    direct: list[float]     # the same pairs scored directly


@dataclass(frozen=True)
class DeviceCheck:
    """What :func:`check_device` found: per model its :class:`ScoreRow` s, and the :class:`DistillRow` s."""

    scores: dict[str, list[ScoreRow]]
    distill: list[DistillRow]

    def lines(self) -> list[str]:
        """The check as a lease's log shows it: every row beside the CPU's."""
        out = []
        for model, rows in self.scores.items():
            out.append(f"== {model}")
            for row in rows:
                out.append(f"{row.label:28s} accuracy {row.accuracy:.3f}   max |dLL| vs cpu "
                           f"{_gap(row.scores, rows[0].scores):9.4f}   sentence loss {row.sentence_loss:.4f}")
        if self.distill:
            out.append("== distill path (ARC-Easy, Gemma-3 base teacher)")
            ref = next((r.direct for r in self.distill if r.device == "cpu"), None)
            for r in self.distill:
                worst = "" if ref is None else (f"   max |dLL| vs cpu direct: recorded {_gap(r.recorded, ref):.4f}, "
                                                f"direct {_gap(r.direct, ref):.4f}")
                out.append(f"{r.device:5s} recorded {[round(v, 2) for v in r.recorded[:4]]}  "
                           f"direct {[round(v, 2) for v in r.direct[:4]]}{worst}")
        return out


def _gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def check_device(opts: RealOptions, check: RealCheck, *, workdir: str | Path | None = None) -> DeviceCheck:
    """The checks of ``check.check_device`` of ``opts.device`` against the CPU on both real models of
    ``opts.models`` (on the CPU alone where ``opts.device`` is the CPU). ``workdir``: the bench's work folder,
    whose ``tasks/arc-easy`` LoRAs the distill check uses where both are there."""
    opts.check()
    check.check()
    models = Path(opts.models)
    scores = {name: score_rows(models / name, opts.data, opts.device)
              for name in (GEMMA, SMOL) if "scores" in check.check_device}
    devices = list(dict.fromkeys(("cpu", opts.device)))
    distill = ([teacher_scores(models, opts.data, workdir, device) for device in devices]
               if "distill" in check.check_device else [])
    return DeviceCheck(scores, distill)


def score_rows(folder: Path, data: str | Path, device: str, *, items: int = SCORE_ITEMS) -> list[ScoreRow]:
    """The first ``items`` PIQA test items scored on the CPU and in each setting of :data:`SETTINGS` on
    ``device`` (none of those where it is the CPU)."""
    _, test = load_task(data, SCORE_TASK, 0)
    test = test[:items]
    rows = []
    for label, on_device, batch, attention in SETTINGS:
        if on_device and device == "cpu":
            continue
        where = device if on_device else "cpu"
        model, tokenizer = load_model(folder, where)
        if attention == "eager":
            model.config._attn_implementation = "eager"
        with _attention(attention):
            lls = choice_lls(model, tokenizer, test, batch_size=batch)
        right = picked_right(lls, test)
        rows.append(ScoreRow(label.format(device=device), [s for row in lls for s in row], sum(right) / len(right),
                             _sentence_loss(model, tokenizer, where)))
        del model
    return rows


def _sentence_loss(model, tokenizer, device: str) -> float:
    import torch

    ids = tokenizer(SENTENCE, return_tensors="pt").input_ids.to(device)
    with torch.no_grad():
        return model(ids, labels=ids).loss.item()


@contextlib.contextmanager
def _attention(kind: str):
    """``math``: the math SDPA kernel only; ``unguarded``: the memory-efficient kernel allowed whatever the model,
    as it was before :func:`paw.device.guard_cuda_attention` (the row that shows whether the guard matters);
    torch's switch and PAW's guard restored afterwards."""
    import torch

    from paw.evaluate import mc

    if kind == "math":
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            yield
        return
    if kind != "unguarded":
        yield
        return
    guard, enabled = mc.guard_cuda_attention, torch.backends.cuda.mem_efficient_sdp_enabled()
    mc.guard_cuda_attention = lambda model: False
    torch.backends.cuda.enable_mem_efficient_sdp(True)
    try:
        yield
    finally:
        mc.guard_cuda_attention = guard
        torch.backends.cuda.enable_mem_efficient_sdp(enabled)


def teacher_scores(models: Path, data: str | Path, workdir: str | Path | None, device: str) -> DistillRow:
    """The scores the base-teacher distillation recorded on ``device``, and the same pairs scored directly."""
    with tempfile.TemporaryDirectory(prefix="paw-check-distill-") as tmp:
        scratch = Cache(Path(tmp))
        cached = [n for n in (TEACHER, STUDENT) if workdir is not None
                  and (Path(workdir) / "tasks" / DISTILL_TASK / f"lora-{n}.meta.json").is_file()]
        for name in cached:   # a finished LoRA only: the run reads it and writes nothing there
            for f in (f"lora-{name}", f"lora-{name}.meta.json"):
                (scratch.folder / f).symlink_to((Path(workdir) / "tasks" / DISTILL_TASK / f).resolve())
        sides = {name: load_base(models / name, device) for name in (TEACHER, STUDENT)}
        train, test = load_task(data, DISTILL_TASK, 0)
        # without both cached LoRAs (a new machine), one-step ones stand in: the base-teacher control's teacher
        # leaves the LoRA out and its student starts fresh, so only the LoRA's shape reaches this path
        # (one LoRA cached and the other not would train the missing one for the whole recipe: on 2026-11-28 that
        # ran past the check's four minutes on the device's CPU and stopped the lease's call)
        stand_in = {} if len(cached) == 2 else {"lora_steps": 1}
        recipe = replace(RECIPE, train_inputs=DISTILL_ITEMS, distill_steps=1, **stand_in)
        run_variant(sides[TEACHER], sides[STUDENT], train, test[:DISTILL_ITEMS], scratch, "base-teacher",
                    recipe=recipe, seed=0, device=device)
        work = work_folder(scratch, f"distilled-base-teacher-{TEACHER}-to-{STUDENT}")
        recorded = read_json(work / "teacher-choice-scores.json")["values"]
        teacher = sides[TEACHER]
        inputs = _visited(label_free_inputs(train, recipe, 0), recipe.distill_steps, recipe.lora_batch, 0)
        encoded = [encode_pair(teacher.tokenizer, c, x, max_length=max_length_of(teacher.model), start=START)
                   for p in inputs for c, x in p.pairs]
        direct = [ll for ll, _ in score_encoded(teacher.model, encoded, pad_id=pad_id_of(teacher.tokenizer),
                                                device=device, progress=False)]
        return DistillRow(device, recorded, direct)
