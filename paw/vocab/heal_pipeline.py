"""``paw heal-transplant`` (and ``paw transplant-tokenizer --heal-steps``) from files to files.

Reads a transplanted model folder (its ``paw_vocab_map.json`` says which rows are estimates), trains
those rows on a corpus with :func:`paw.vocab.heal.heal_rows`, and writes a new folder in which only
those rows differ; every other tensor keeps its bytes. ``paw_heal.json`` holds the curve and the
bits per byte before and after, ``heal_curve.png`` draws it::

    from paw.vocab.heal_pipeline import heal_transplant
    from paw.vocab.options import HealOptions
    result = heal_transplant(HealOptions(model="./smollm2-gemma-tok", corpus=("text.txt",), output="./healed"))
    result.record["bpb"]  # {'before': 1.91, 'after': 1.42, 'original': 1.05}
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw import __version__, arch
from paw.device import resolve_device
from paw.errors import PawError
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.json_file import read_json_if_exists
from paw.io.lm import load_lm
from paw.io.manifest import describe_input, records_call
from paw.io.reports import json_safe
from paw.io.tokenizer import open_tokenizer, read_corpus
from paw.io.vocab_map import mapping_to_json, read_vocab_map
from paw.io.writer import write_checkpoint
from paw.knobs import RunOptions, require
from paw.progress import track
from paw.vocab import heal
from paw.vocab.cards import heal_card
from paw.vocab.options import HealOptions
from paw.vocab.roles import role_id
from paw.vocab.transplant import embedding_names, vocab_rows

PathLike = str | Path


@dataclass(frozen=True)
class Healed:
    """What ``heal_transplant`` wrote; ``record`` is ``paw_heal.json``. ``seconds`` (the training's wall
    time) stays out of the record, so a seeded rerun writes the same bytes."""

    output: Path
    record: dict[str, Any]
    seconds: float = 0.0


@records_call
def heal_transplant(options: HealOptions, run: RunOptions = RunOptions(), *, command: str | None = None,
                    model_input: dict[str, Any] | None = None) -> Healed:
    """Train the non-exact embedding/head rows of the transplanted ``options.model``; write ``options.output``.

    ``model_input``: what ``paw_heal.json`` records as the model input instead of ``model``'s path, for a
    ``model`` in a temporary folder that will be gone (``transplant-tokenizer --heal-steps``).
    """
    require(options, "model", "corpus", "output")
    options.check()
    output, overwrite = options.output, run.overwrite
    check_output(output, overwrite=overwrite)
    model = Path(options.model)
    ckpt = open_checkpoint(model)
    mapping = read_vocab_map(_map_file(model))
    rows = vocab_rows(ckpt.config or {})
    names = embedding_names({n: ckpt.shape(n) for n in ckpt}, rows)
    heal_ids = heal.rows_to_heal(mapping.entries, mapping.target_size)
    if not heal_ids:
        raise PawError("every row was copied exactly in the transplant: nothing to heal", path=model)
    tok = open_tokenizer(model)
    texts = read_corpus(options.corpus)
    train, held = _split(texts, options)
    where = ", ".join(map(str, options.corpus))
    stream = heal.token_stream(tok.encode_batch(train), unk_id=tok.unk_id, seq_len=options.seq_len, where=where)
    eval_windows = heal.windows(tok.encode_batch(held[:options.eval_texts]), options.seq_len)
    dev = resolve_device(run.device)
    lm, _ = load_lm(model, device=dev, dtype="float32")
    width = lambda i: len(tok.token_bytes(i))  # noqa: E731
    bos = bos_prefix(tok)
    plan = options.plan()
    start = time.monotonic()
    curve = heal.heal_rows(lm, heal_ids, stream, plan, prefix=bos, device=dev,
                           evaluate=lambda: heal.bits_per_byte(lm, eval_windows, width, prefix=bos, device=dev),
                           track=lambda it: track(it, "healing", total=plan.steps, unit="steps"))
    seconds = time.monotonic() - start
    original = _original_bpb(options, held, dev) if options.original else None
    record = {"paw_version": __version__, "command": command,
              "inputs": {"model": model_input or describe_input(model), "corpus": [describe_input(c) for c in options.corpus],
                         "eval_corpus": [describe_input(c) for c in options.eval_corpus or ()]
                         or "every 10th corpus text"},
              "rows_trained": len(heal_ids), "tensors_trained": names, "steps": plan.steps, "lr": plan.lr,
              "batch": plan.batch, "seq_len": plan.seq_len, "warmup": plan.warmup, "seed": plan.seed,
              **options.changes(), "device": str(dev), "train_tokens": len(stream), "eval_texts": min(len(held), options.eval_texts),
              "bpb": {"before": curve[0]["bpb"], "after": curve[-1]["bpb"], "original": original},
              "curve": curve}
    new = _healed_matrices(lm, names)
    extra = _side_files(model, mapping, json_safe(record))
    figure = heal.curve_figure(curve, original_bpb=original, title=f"heal: {len(heal_ids):,} rows, {plan.steps} steps")
    write_checkpoint(output, _patched(ckpt, names, new, heal_ids), copy_from=model, overwrite=overwrite,
                     extra_files=extra, figures={"heal_curve.png": figure},
                     card=heal_card(output, f"`{model}`" if model_input is None else "of this run", record,
                                    base=_transplanted_from(extra), command=command))
    return Healed(Path(output), record, seconds)


def _transplanted_from(extra: dict[str, Any]) -> str | None:
    """The model the healed transplant was made from, as its ``paw_transplant.json`` names it."""
    model = (extra.get("paw_transplant.json") or {}).get("inputs", {}).get("model")
    return model.get("path") if isinstance(model, dict) else None


def _map_file(model: Path) -> Path:
    path = model / "paw_vocab_map.json"
    if not path.is_file():
        raise PawError("no paw_vocab_map.json: heal trains the rows a PAW transplant did not copy exactly, "
                       "so it needs a folder written by paw transplant-tokenizer", path=model)
    return path


def _split(texts: list[str], options: HealOptions) -> tuple[list[str], list[str]]:
    if options.eval_corpus:
        return texts, read_corpus(options.eval_corpus)
    held = texts[::10]
    train = [t for i, t in enumerate(texts) if i % 10]
    if not held or not train:
        raise PawError("the corpus needs at least two texts (every 10th is held out for the check), or pass "
                       "an eval corpus", path=", ".join(map(str, options.corpus)))
    return train, held


def _original_bpb(options: HealOptions, held: list[str], dev) -> float:
    tok = open_tokenizer(options.original)
    lm, _ = load_lm(options.original, device=dev, dtype="float32")
    wins = heal.windows(tok.encode_batch(held[:options.eval_texts]), options.seq_len)
    return heal.bits_per_byte(lm, wins, lambda i: len(tok.token_bytes(i)), prefix=bos_prefix(tok), device=dev)


def bos_prefix(tok) -> list[int]:
    """``[bos id]`` for a tokenizer with a BOS token, else ``[]``: the context every scored window starts from."""
    i = role_id(tok, "bos")
    return [] if i is None else [i]


def _healed_matrices(lm, names: list[str]) -> dict[str, Any]:
    """Checkpoint name -> the trained matrix (input embedding, or the untied head), on the CPU."""
    mats = heal.trainable_matrices(lm)
    head = mats[1] if len(mats) > 1 else mats[0]
    return {n: (head if arch.is_head(n) else mats[0]).detach().cpu() for n in names}


def _patched(ckpt, names: list[str], new: dict[str, Any], heal_ids: list[int]):
    """Stream the checkpoint with only ``heal_ids`` rows of the vocabulary tensors replaced."""
    import torch

    ids = torch.tensor(heal_ids, dtype=torch.long)
    for name in ckpt:
        t = ckpt[name]
        if name in names:
            t = t.clone()
            t[ids] = new[name][ids].to(t.dtype)
        yield name, t


def _side_files(model: Path, mapping, record: dict[str, Any]) -> dict[str, Any]:
    extra = {"paw_vocab_map.json": mapping_to_json(mapping), "paw_heal.json": record}
    for name in ("paw_transplant.json", "paw_vocab_map_head.json"):
        data = read_json_if_exists(model / name)
        if data is not None:
            extra[name] = data
    return extra
