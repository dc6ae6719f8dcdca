"""``run_distill``: :func:`paw.transfer.distill.distill_lora` from folders and files to an output folder.

Every input is checked before any model is loaded (output free, one input source, a readable
non-empty prompt file, at most five seed examples, both tokenizers readable, no NaN/Inf in the
source adapter), so bad input costs a second and leaves nothing behind; the output folder is
written atomically at the end, and a student that diverged (NaN/Inf factors) is refused with the
advice to lower ``--lr`` unless ``allow_nonfinite``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from paw.errors import PawError
from paw.transfer.distill import GENERIC, LM, distill_lora
from paw.transfer.distill_data import MAX_SEEDS
from paw.transfer.run import TransferredAdapter

TEXT_KEYS = ("text", "prompt")


def run_distill(adapter: str | Path, source_base: str | Path, target_base: str | Path, output: str | Path, *,
                prompts: str | Path | None = None, synthesize: int = 0, seed_examples: str | Path | None = None,
                eval_prompts: str | Path | None = None, discriminator: bool = False, init: str = "auto",
                rank: int | None = None, alpha: float | None = None, target_modules: Sequence[str] | None = None,
                steps: int = 200, batch_size: int = 8, lr: float = 1e-4, max_new_tokens: int = 16,
                holdout: float = 0.1, byte_kl: bool = False, next_words: int = 0, seed: int = 0, device: str = "auto",
                command: str | None = None, overwrite: bool = False, allow_nonfinite: bool = False,
                progress: bool = True) -> TransferredAdapter:
    """Distill ``adapter`` (trained on ``source_base``) onto ``target_base`` and write ``output``.

    ``prompts``: a prompt file or ``'generic'``; or ``synthesize=N`` with ``seed_examples`` (a file of
    at most five inputs). See :func:`~paw.transfer.distill.distill_lora` for the knobs. A source
    adapter holding NaN/Inf is refused (it cannot teach, whatever ``allow_nonfinite``); a student
    that diverged is written only with ``allow_nonfinite`` (``nonfinite_written`` in the report).
    """
    from paw.device import resolve_device
    from paw.io.adapter import read_adapter, refuse_nonfinite_adapter
    from paw.io.atomic import check_output
    from paw.io.distill_files import write_distill
    from paw.io.finite import nonfinite_policy
    from paw.io.manifest import command_line, describe_input

    check_output(output, overwrite=overwrite)
    inputs = {"adapter": describe_input(adapter), "source_base": describe_input(source_base),
              "target_base": describe_input(target_base)}
    if prompts is None and not synthesize:
        raise PawError("--method distill needs inputs: --prompts FILE, --prompts generic, or "
                       "--synthesize N --seed-examples FILE")
    if prompts is not None and synthesize:
        raise PawError("give either --prompts or --synthesize, not both")
    if seed_examples is not None and not synthesize:
        raise PawError("--seed-examples is for --synthesize N")
    texts, seeds, held = GENERIC, None, None
    if prompts is not None and str(prompts) != GENERIC:
        texts = read_inputs(prompts)
        inputs["prompts"] = describe_input(prompts)
    if synthesize:
        if seed_examples is None:
            raise PawError("--synthesize needs --seed-examples FILE (at most 5 task inputs)")
        seeds = read_inputs(seed_examples, what="seed examples file")
        if len(seeds) > MAX_SEEDS:
            raise PawError(f"{len(seeds)} seed examples: at most {MAX_SEEDS} are allowed (pass more as --prompts)",
                           path=seed_examples)
        inputs["seed_examples"] = describe_input(seed_examples)
    if eval_prompts is not None:
        held = read_inputs(eval_prompts, what="evaluation prompt file")
        inputs["eval_prompts"] = describe_input(eval_prompts)
    from paw.io.tokenizer import open_tokenizer

    lora = read_adapter(adapter)
    refuse_nonfinite_adapter(lora, why="the source adapter cannot teach")
    dev = resolve_device(device)
    infos = open_tokenizer(source_base), open_tokenizer(target_base)  # before any model is loaded
    teacher, student = _side(source_base, infos[0], dev, adapter=adapter), _side(target_base, infos[1], dev)
    moved, report = distill_lora(lora, teacher, student, prompts=texts if not synthesize else None,
                                 synthesize=synthesize, seed_examples=seeds, discriminator=discriminator, init=init,
                                 rank=rank, alpha=alpha, target_modules=target_modules, steps=steps,
                                 batch_size=batch_size, lr=lr, max_new_tokens=max_new_tokens, holdout=holdout,
                                 eval_prompts=held, byte_kl=byte_kl, next_words=next_words, seed=seed, device=dev,
                                 target_name=str(target_base), progress=progress)
    with nonfinite_policy(allow_nonfinite):
        report = _refuse_diverged(output, moved, report, lr)
        write_distill(output, moved, report, command=command or command_line(), inputs=inputs, overwrite=overwrite)
    return TransferredAdapter(Path(output), report, inputs)


def _refuse_diverged(output: str | Path, moved, report: dict, lr: float) -> dict:
    """Refuse a student adapter with NaN/Inf factors (the training diverged) before anything is written,
    naming the tensor; where ``--allow-nonfinite`` lets it through, the report records it."""
    from paw.io.adapter import WEIGHTS_NAME
    from paw.io.finite import refuse_nonfinite_tensor

    counts: dict[str, int] = {}
    why = f"the distillation diverged (try a lower --lr than {lr:g})"
    for key, tensor in sorted(moved.tensors.items()):
        refuse_nonfinite_tensor(Path(output) / WEIGHTS_NAME, key, tensor, counts=counts, what=why)
    return {**report, "nonfinite_written": counts} if counts else report


def _side(base: str | Path, info, device, *, adapter: str | Path | None = None) -> LM:
    """A base folder (with ``adapter`` merged in, for the teacher) opened for distillation."""
    from paw.io.checkpoint import open_checkpoint
    from paw.io.lm import load_lm

    model, tokenizer = load_lm(base, adapter=adapter, device=device)
    if adapter is not None:
        model = model.merge_and_unload()  # the teacher only runs forward: merged weights are faster
    return LM(model.eval(), tokenizer, str(base), checkpoint=open_checkpoint(base), tokenizer_info=info)


def read_inputs(path: str | Path, *, what: str = "prompt file") -> list:
    """Inputs of a file: ``MCItem`` s of any layout ``paw eval`` reads (the answers are dropped later),
    ``str`` s of JSON records with a ``text``/``prompt`` field, or its plain lines."""
    from paw.evaluate.formats import detect_format, read_items
    from paw.io.distill_files import read_prompt_lines

    lines = read_prompt_lines(path, what=what)
    first = _json_object(lines[0])
    if first is None:
        return [line.strip() for line in lines]
    if detect_format(first) is not None:
        return read_items(path)
    texts = []
    for number, line in enumerate(lines, start=1):
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
