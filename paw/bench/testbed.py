"""The base under test and what every benchmark does to it: score items, merge adapter deltas in, train a LoRA.

``paw bench transfer`` (:mod:`paw.bench.quality`), its distill rows (:mod:`paw.bench.distill`) and
``paw bench real`` (:mod:`paw.bench.real.run`) all hold a model as a :class:`Base`, score it item by item
(:func:`score_items`), merge an adapter into it for the length of a block (:func:`applied`) and train
LoRAs on it with one recipe (:func:`train_adapter`); what became of a transfer is
:mod:`paw.bench.outcomes`' to say. This module sits under all of them and imports none of them.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.evaluate.encode import encode_pair, max_length_of, pad_id_of
from paw.evaluate.mc import _argmax, score_encoded
from paw.evaluate.train import train_lora
from paw.io.adapter import LoraAdapter, lora_config_dict
from paw.io.hub import quiet_transformers
from paw.io.lm import load_lm

LINEAR = arch.GENERIC.linear_names  # every projection: q, k, v, o, gate, up, down


@dataclass
class Base:
    """One base model under test, its tokenizer and its folder (for ``transfer_lora``)."""

    name: str
    model: Any
    tokenizer: Any
    folder: Path
    info: dict = field(default_factory=dict)
    vocab_map: Any = None


def load_model(folder: Path, device: str):
    """``(model, tokenizer)`` of a model folder in float32 on ``device``, transformers' load messages quiet."""
    quiet_transformers()
    return load_lm(folder, device=device, dtype="float32")


def load_base(folder: Path, device: str) -> Base:
    """The model folder ``folder`` as a :class:`Base` named by the folder (:func:`load_model`)."""
    model, tokenizer = load_model(folder, device)
    return Base(folder.name, model, tokenizer, folder)


# ------------------------------------------------------------------------------------ scoring

def score_items(model, tokenizer, items, *, batch_size: int = 64, progress: bool = False) -> list[int]:
    """1/0 per item: is the highest-log-likelihood choice the answer? (:func:`paw.evaluate.mc.evaluate`'s rule)."""
    lls = choice_lls(model, tokenizer, items, batch_size=batch_size, progress=progress)
    return picked_right(lls, items)


def choice_lls(model, tokenizer, items, *, batch_size: int = 64, progress: bool = False) -> list[list[float]]:
    """The summed log-likelihood of every choice of every item, item by item (what :func:`score_items` picks from)."""
    encoded, spans = [], []
    for item in items:
        spans.append((len(encoded), len(item.choices)))
        encoded.extend(encode_pair(tokenizer, c, x, max_length=max_length_of(model)) for c, x in item.pairs())
    scores = score_encoded(model, encoded, pad_id=pad_id_of(tokenizer), batch_size=batch_size,
                           device=next(model.parameters()).device, progress=progress)
    return [[s for s, _ in scores[a:a + k]] for a, k in spans]


def picked_right(lls: list[list[float]], items) -> list[int]:
    """1/0 per item: the first highest of its choices' scores is its answer."""
    return [int(_argmax(row) == item.answer) for row, item in zip(lls, items, strict=True)]


# ------------------------------------------------------------------------------------ adapter deltas

def adapter_deltas(adapter) -> dict[str, Any]:
    """``{base weight name: ΔW}`` of a :class:`paw.io.adapter.LoraAdapter` (its factors, merged)."""
    return {m.base_key: m.delta() for m in adapter.modules().values()}


def merged_copy(model, adapter):
    """A copy of ``model`` with ``adapter`` merged into its weights (``W + ΔW``, in the weights' dtype); ``model``
    is left as it was."""
    import torch

    merged = copy.deepcopy(model)
    params = dict(merged.named_parameters())
    with torch.no_grad():
        for name, delta in adapter_deltas(adapter).items():
            params[name].add_(delta.to(params[name].device, params[name].dtype))
    return merged


@contextmanager
def applied(model, deltas: dict[str, Any]):
    """``model`` with ``W += ΔW`` for each delta inside the block, restored exactly afterwards."""
    import torch

    params = dict(model.named_parameters())
    missing = [k for k in deltas if k not in params]
    if missing:
        raise PawError(f"the adapter names {missing[0]!r}, which the base model does not have")
    saved = {k: params[k].detach().clone() for k in deltas}
    with torch.no_grad():
        for k, d in deltas.items():
            params[k].add_(d.to(params[k].device, params[k].dtype))
    try:
        yield model
    finally:
        with torch.no_grad():
            for k, w in saved.items():
                params[k].copy_(w)


def without_adapter(model, adapter):
    """A context factory in which ``model``, holding ``adapter`` merged in place (:func:`applied`), runs
    without it: what distillation's teacher needs for its excess (``LM.adapter_off``)."""
    minus = {k: -d for k, d in adapter_deltas(adapter).items()}
    return lambda: applied(model, minus)


def random_deltas(norms: dict[str, float], model, *, rank: int, seed: int) -> dict[str, Any]:
    """Random rank-``rank`` ΔW for every adapted linear module of ``model``, with ``||ΔW||_F`` from ``norms``.

    ``norms`` is keyed by source weight name; a target module absent from the source (other depth)
    gets the mean norm of its module type (``q_proj``, ...).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    by_type: dict[str, list[float]] = {}
    for name, value in norms.items():
        by_type.setdefault(name.split(".")[-2], []).append(value)
    out = {}
    for name, p in model.named_parameters():
        kind = name.split(".")[-2] if name.endswith(".weight") else ""
        if kind not in by_type or p.ndim != 2:
            continue
        target = norms.get(name, sum(by_type[kind]) / len(by_type[kind]))
        delta = torch.randn(p.shape[0], rank, generator=gen) @ torch.randn(rank, p.shape[1], generator=gen)
        out[name] = delta * (target / float(delta.norm()))
    return out


# ------------------------------------------------------------------------------------ LoRA

def train_adapter(base: Base, items, opts, seed: int, *, gradient_checkpointing: bool = False, progress: bool = False,
                  checkpoints=None):
    """A LoRA trained on ``items`` on top of ``base``; returns ``(LoraAdapter, its first and last loss)``.

    ``opts`` gives the recipe: ``lora_rank``, ``lora_alpha``, ``lora_steps``, ``lora_batch`` and
    ``lora_lr`` (a :class:`paw.bench.options.BenchOptions`, or ``paw.bench.real.tasks.Recipe``).
    ``checkpoints``: a :class:`paw.train_state.Checkpoints` (the real-task bench resumes an hour-long LoRA with it).
    """
    from peft import get_peft_model_state_dict

    peft_model, metrics = train_lora(copy.deepcopy(base.model), base.tokenizer, items, rank=opts.lora_rank,
                                     alpha=opts.lora_alpha, target_modules=LINEAR, steps=opts.lora_steps,
                                     batch_size=opts.lora_batch, lr=opts.lora_lr, seed=seed, device=None,
                                     eval_items=None, tracker=None, progress=progress,
                                     gradient_checkpointing=gradient_checkpointing, checkpoints=checkpoints)
    tensors = {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    config = lora_config_dict(r=opts.lora_rank, alpha=opts.lora_alpha, target_modules=LINEAR,
                              base_model=str(base.folder))
    return LoraAdapter(config=config, tensors=tensors), {
        "train_loss_start": metrics["train_loss_start"], "train_loss_end": metrics["train_loss_end"]}
