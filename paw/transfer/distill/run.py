"""The distillation from folders and files to an output folder: what ``transfer_adapter(method='distill')`` runs.

:class:`~paw.transfer.distill.options.DistillOptions` has been checked by then; here every input is
read before any model is loaded (output free, each prompt file read once and refused whole if one
line is bad, at most five seed examples, both tokenizers readable, no NaN/Inf in the source
adapter), so bad input costs a second and leaves nothing behind. The output folder is written
atomically at the end, and a student that diverged (NaN/Inf factors) is refused with the advice to
lower ``--lr`` unless ``allow_nonfinite``.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from paw import fsdp
from paw.device import resolve_device
from paw.distributed import setup
from paw.errors import PawError
from paw.evaluate.formats import detect_format, items_from_records
from paw.io.adapter import WEIGHTS_NAME, read_adapter, refuse_nonfinite_adapter
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.distill_files import read_prompt_file, write_distill
from paw.io.finite import nonfinite_policy, refuse_nonfinite_tensor
from paw.io.lm import load_lm
from paw.io.manifest import describe_input
from paw.io.mcdata import parse_record
from paw.io.tokenizer import open_tokenizer
from paw.io.train_state import (
    STATE_NAME,
    check_work_dir,
    load_train_state,
    remove_train_state,
    save_train_state,
    work_dir,
)
from paw.memory import plan, plan_line, with_measured, worth_saying
from paw.progress import status
from paw.train import Recipe
from paw.train_state import Checkpoints
from paw.transfer.card import transfer_card
from paw.transfer.distill.lora import auto_steps, distill_lora
from paw.transfer.distill.options import GENERIC, DistillOptions
from paw.transfer.distill.plots import curve_figure
from paw.transfer.distill.scale import Scale
from paw.transfer.distill.synthesis import MAX_SEEDS
from paw.transfer.distill.train import LM

TEXT_KEYS = ("text", "prompt")


def distill_to_folder(adapter: str | Path, source_base: str | Path, target_base: str | Path, output: str | Path,
                      options: DistillOptions, *, device: str, command: str, overwrite: bool = False,
                      allow_nonfinite: bool = False, progress: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Distill ``adapter`` (trained on ``source_base``) onto ``target_base``, write ``output``; ``(report, inputs)``.

    A source adapter holding NaN/Inf is refused (it cannot teach, whatever ``allow_nonfinite``); a
    student that diverged is written only with ``allow_nonfinite`` (``nonfinite_written`` in the report).
    """
    o = options
    check_output(output, overwrite=overwrite)
    inputs = {"adapter": describe_input(adapter), "source_base": describe_input(source_base),
              "target_base": describe_input(target_base)}
    texts, seeds, held = GENERIC, None, None
    if o.prompts is not None and str(o.prompts) != GENERIC:
        texts = read_inputs(o.prompts)
        inputs["prompts"] = describe_input(o.prompts)
    if o.synthesize:
        seeds = read_inputs(o.seed_examples, what="seed examples file")
        if len(seeds) > MAX_SEEDS:
            raise PawError(f"{len(seeds)} seed examples: at most {MAX_SEEDS} are allowed (pass more as --prompts)",
                           path=o.seed_examples)
        inputs["seed_examples"] = describe_input(o.seed_examples)
    if o.eval_prompts is not None:
        held = read_inputs(o.eval_prompts, what="evaluation prompt file")
        inputs["eval_prompts"] = describe_input(o.eval_prompts)
    lora = read_adapter(adapter, dora="distillation starts the student from a weight-space transfer of A and B "
                                      "and does not carry the magnitude vector (lora_magnitude_vector)")
    refuse_nonfinite_adapter(lora, why="the source adapter cannot teach")
    ranks, dev = setup(resolve_device(device))
    infos = open_tokenizer(source_base), open_tokenizer(target_base)  # before any model is loaded
    predicted = _announce(source_base, target_base, lora, o, dev, ranks, n_inputs=len(texts) if texts != GENERIC else 256)
    teacher = _side(source_base, infos[0], dev, adapter=adapter, dtype=o.dtype)
    student = (_side(target_base, infos[1], None, dtype=fsdp.load_dtype(o.dtype, dev, open_checkpoint(target_base).config))
               if o.fsdp else _side(target_base, infos[1], dev, dtype=o.dtype))  # FSDP moves the shards to dev
    scale = _scale(output, o, ranks, inputs)
    moved, report = distill_lora(lora, teacher, student, prompts=texts if not o.synthesize else None,
                                 synthesize=o.synthesize, seed_examples=seeds, discriminator=o.discriminator,
                                 init=o.init, rank=o.rank, alpha=o.alpha, target_modules=o.target_modules,
                                 steps=o.max_steps, batch_size=o.batch_size, lr=o.lr, max_new_tokens=o.max_new_tokens,
                                 holdout=o.holdout, eval_prompts=held, byte_kl=o.byte_kl, next_words=o.next_words,
                                 token_focus=o.token_focus, target=o.target, shift_scale=o.shift_scale, seed=o.seed, device=dev, target_name=str(target_base), progress=progress,
                                 scale=scale, schedule=o.schedule, warmup=o.warmup, accumulation=o.accumulation,
                                 clip=o.clip)
    if not ranks.main:  # rank 0 alone writes
        return report, inputs
    report = {**report, "memory": with_measured(predicted, dev)}
    with nonfinite_policy(allow_nonfinite):
        report = _refuse_diverged(output, moved, report, o.lr)
        write_distill(output, moved, report, curve=curve_figure(report), command=command, inputs=inputs,
                      overwrite=overwrite, card=transfer_card(output, report, source_base=source_base,
                                                              target_base=target_base, command=command))
    remove_train_state(work_dir(output))  # the output is complete: nothing left to resume
    return report, inputs


def _announce(source_base, target_base, lora, o: DistillOptions, device, ranks, *, n_inputs: int) -> dict | None:
    """Predict peak memory per device from the two configs and say it before any model is loaded (the time is
    predicted once both are loaded, at a rate measured on the student: :mod:`paw.transfer.distill.cost`)."""
    predicted = plan(open_checkpoint(target_base).config or {}, teacher_config=open_checkpoint(source_base).config or {},
                     lora_rank=o.rank or lora.r, target_modules=o.target_modules or sorted({m.rsplit(".", 1)[-1]
                                                                                             for m in lora.modules()}),
                     batch_size=o.batch_size, steps=o.max_steps or auto_steps(o.synthesize or n_inputs, o.batch_size),
                     max_new_tokens=o.max_new_tokens,
                     n_inputs=min(o.synthesize or n_inputs, o.batch_size * (o.max_steps or n_inputs)),
                     device_type=device.type, world=ranks.world, dtype=o.dtype,
                     teacher_per_step=True, offload_teacher=o.offload_teacher,
                     gradient_checkpointing=o.gradient_checkpointing, fsdp=o.fsdp, timed=False)
    if worth_saying(predicted):
        status(f"distill: {plan_line(predicted)}")
    return predicted


def _scale(output, o: DistillOptions, ranks, inputs: dict) -> Scale:
    """Ranks, the work folder beside ``output`` and its checkpoints (rank 0 writes them, every rank resumes)."""
    work = work_dir(output)
    if o.save_every or o.resume:
        check_work_dir(work, flag="--save-every" if o.save_every else "--resume")
    settings = {k: getattr(o, k) for k in ("max_steps", "batch_size", "lr", "seed", "init", "rank", "alpha",
                                           "max_new_tokens", "holdout", "byte_kl", "next_words", "synthesize",
                                           "token_focus", "target", "shift_scale")}
    settings.update(Recipe(steps=o.max_steps or 1, lr=o.lr, schedule=o.schedule, warmup=o.warmup,
                           accumulation=o.accumulation, clip=o.clip or None).changes())  # as before, when unset
    settings["inputs"] = {k: v for k, v in inputs.items()}
    checkpoints = Checkpoints(o.save_every, save=partial(save_train_state, work) if ranks.main else None,
                              state=load_train_state(work) if o.resume else None, settings=settings,
                              where=str(work / STATE_NAME))
    return Scale(ranks=ranks, work=work, checkpoints=checkpoints, offload_teacher=o.offload_teacher,
                 gradient_checkpointing=o.gradient_checkpointing, fsdp=o.fsdp)


def _refuse_diverged(output: str | Path, moved, report: dict, lr: float) -> dict:
    """Refuse a student adapter with NaN/Inf factors (the training diverged) before anything is written,
    naming the tensor; where ``--allow-nonfinite`` lets it through, the report records it."""
    counts: dict[str, int] = {}
    at = report.get("distill", {}).get("diverged_at_step")
    when = f" at step {at}" if at else ""
    why = f"the distillation diverged{when} (try a lower --lr than {lr:g})"
    for key, tensor in sorted(moved.tensors.items()):
        refuse_nonfinite_tensor(Path(output) / WEIGHTS_NAME, key, tensor, counts=counts, what=why)
    return {**report, "nonfinite_written": counts} if counts else report


def _side(base: str | Path, info, device, *, adapter: str | Path | None = None, dtype: str = "auto") -> LM:
    """A base folder (with ``adapter`` on it, for the teacher) opened for distillation.

    The teacher's adapter stays a PEFT layer, unmerged: the excess (what the adapter changed, per
    token; :func:`paw.transfer.distill.train.add_excess`) compares the teacher with and without it.
    """
    model, tokenizer = load_lm(base, adapter=adapter, device=device, dtype=dtype)
    return LM(model.eval(), tokenizer, str(base), checkpoint=open_checkpoint(base), tokenizer_info=info)


def read_inputs(path: str | Path, *, what: str = "prompt file") -> list:
    """Inputs of a file, read once: ``MCItem`` s of any layout ``paw eval`` reads, with or without
    their answers (answers are dropped later), ``str`` s of JSON records with a ``text``/``prompt`` field, or its plain lines."""
    lines = read_prompt_file(path, what=what)
    first = _json_object(lines[0][1], path, lines[0][0])
    if first is None:
        return [text.strip() for _, text in lines]
    if detect_format(first, labels=False) is not None:  # answers are dropped anyway: a file without them is fine
        return items_from_records(((n, parse_record(text, Path(path), n)) for n, text in lines), path, labels=False)
    texts = []
    for number, line in lines:
        record = _json_object(line, path, number) or {}
        key = next((k for k in TEXT_KEYS if isinstance(record.get(k), str)), None)
        if key is None:
            raise PawError(f"line {number}: neither a multiple-choice item nor a record with a "
                           f"{' or '.join(repr(k) for k in TEXT_KEYS)} field", path=path)
        texts.append(record[key])
    return texts


def _json_object(line: str, path, number: int) -> dict | None:
    """The JSON object on a line, or None (plain text); JSON too deep for the parser names the line."""
    if not line.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    except RecursionError:
        raise PawError(f"line {number}: JSON nested too deeply to be a prompt record", path=path) from None
    return value if isinstance(value, dict) else None
