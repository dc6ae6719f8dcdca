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
from pathlib import Path
from typing import Any

from paw.device import resolve_device
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
from paw.transfer.distill.data import MAX_SEEDS
from paw.transfer.distill.lora import distill_lora
from paw.transfer.distill.options import GENERIC, DistillOptions
from paw.transfer.distill.plots import curve_figure
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
    lora = read_adapter(adapter)
    refuse_nonfinite_adapter(lora, why="the source adapter cannot teach")
    dev = resolve_device(device)
    infos = open_tokenizer(source_base), open_tokenizer(target_base)  # before any model is loaded
    teacher, student = _side(source_base, infos[0], dev, adapter=adapter), _side(target_base, infos[1], dev)
    moved, report = distill_lora(lora, teacher, student, prompts=texts if not o.synthesize else None,
                                 synthesize=o.synthesize, seed_examples=seeds, discriminator=o.discriminator,
                                 init=o.init, rank=o.rank, alpha=o.alpha, target_modules=o.target_modules,
                                 steps=o.max_steps, batch_size=o.batch_size, lr=o.lr, max_new_tokens=o.max_new_tokens,
                                 holdout=o.holdout, eval_prompts=held, byte_kl=o.byte_kl, next_words=o.next_words,
                                 seed=o.seed, device=dev, target_name=str(target_base), progress=progress)
    with nonfinite_policy(allow_nonfinite):
        report = _refuse_diverged(output, moved, report, o.lr)
        write_distill(output, moved, report, curve=curve_figure(report), command=command, inputs=inputs,
                      overwrite=overwrite)
    return report, inputs


def _refuse_diverged(output: str | Path, moved, report: dict, lr: float) -> dict:
    """Refuse a student adapter with NaN/Inf factors (the training diverged) before anything is written,
    naming the tensor; where ``--allow-nonfinite`` lets it through, the report records it."""
    counts: dict[str, int] = {}
    why = f"the distillation diverged (try a lower --lr than {lr:g})"
    for key, tensor in sorted(moved.tensors.items()):
        refuse_nonfinite_tensor(Path(output) / WEIGHTS_NAME, key, tensor, counts=counts, what=why)
    return {**report, "nonfinite_written": counts} if counts else report


def _side(base: str | Path, info, device, *, adapter: str | Path | None = None) -> LM:
    """A base folder (with ``adapter`` merged in, for the teacher) opened for distillation."""
    model, tokenizer = load_lm(base, adapter=adapter, device=device)
    if adapter is not None:
        model = model.merge_and_unload()  # the teacher only runs forward: merged weights are faster
    return LM(model.eval(), tokenizer, str(base), checkpoint=open_checkpoint(base), tokenizer_info=info)


def read_inputs(path: str | Path, *, what: str = "prompt file") -> list:
    """Inputs of a file, read once: ``MCItem`` s of any layout ``paw eval`` reads, with or without
    their answers (answers are dropped later), ``str`` s of JSON records with a ``text``/``prompt`` field, or its plain lines."""
    lines = read_prompt_file(path, what=what)
    first = _json_object(lines[0][1])
    if first is None:
        return [text.strip() for _, text in lines]
    if detect_format(first, labels=False) is not None:  # answers are dropped anyway: a file without them is fine
        return items_from_records(((n, parse_record(text, Path(path), n)) for n, text in lines), path, labels=False)
    texts = []
    for number, (_, line) in enumerate(lines, start=1):
        record = _json_object(line) or {}
        key = next((k for k in TEXT_KEYS if isinstance(record.get(k), str)), None)
        if key is None:
            raise PawError(f"line {number}: neither a multiple-choice item nor a record with a "
                           f"{' or '.join(repr(k) for k in TEXT_KEYS)} field", path=path)
        texts.append(record[key])
    return texts


def _json_object(line: str) -> dict | None:
    if not line.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
