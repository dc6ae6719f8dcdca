"""Heal a transplanted model: train only the embedding (and untied head) rows that were not copied.

After a transplant, the rows of tokens the source had exactly are the model's own; the others are
estimates (a decomposition's mean, an OMP fit, the mean row). ZeTT, TokAlign and FOCUS users follow
the map with a short training of those rows, everything else frozen. This module is that training
loop over a ``transformers`` causal LM already in memory; it never opens a path
(:mod:`paw.vocab.heal_pipeline` reads and writes).

The update is masked: a gradient hook zeroes the rows outside ``rows`` and Adam runs without weight
decay, so a row whose gradient is always zero has zero first and second moments and never moves
(``m = v = 0`` gives a step of ``0 / (sqrt(0) + eps) = 0``). The writer then copies only ``rows``
back, so every other value in the checkpoint keeps its bytes.

Bits per byte, the check before and after, is ``sum(-log2 p(token)) / bytes`` over held-out texts,
each text scored in windows of ``seq_len`` tokens after the tokenizer's BOS (where it has one; else
a window's first token is context only); it is comparable across tokenizers because it is
normalised by bytes, not tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from paw.errors import PawError
from paw.train import Recipe, run

KEEP = frozenset({"exact", "special"})  # mapping methods whose rows are the source's own: never trained


def rows_to_heal(entries: dict[int, tuple[str, list[int], list[float]]], target_size: int) -> list[int]:
    """Target ids whose row is an estimate: not ``exact``/``special`` in the map, or unmapped.

    ``{0: ('exact', ..), 1: ('decompose', ..)}`` with 3 ids -> ``[1, 2]``.
    """
    return [t for t in range(target_size) if t not in entries or entries[t][0] not in KEEP]


def token_stream(encoded: Sequence[Sequence[int]], *, unk_id: int | None, seq_len: int, where: str) -> list[int]:
    """All texts' ids end to end; refuses a corpus too short for one window or mostly unknown tokens."""
    stream = [i for ids in encoded for i in ids]
    unknown = sum(1 for i in stream if unk_id is not None and i == unk_id)
    if stream and unknown / len(stream) > 0.5:
        raise PawError(f"the tokenizer cannot encode this corpus: {unknown / len(stream):.0%} of its "
                       f"{len(stream):,} tokens are the unknown token", path=where)
    if len(stream) < seq_len + 1:
        raise PawError(f"the corpus gives {len(stream):,} tokens, fewer than one training window of "
                       f"{seq_len + 1} (lower --heal-seq-len or give more text)", path=where)
    return stream


def bits_per_byte(model, windows: Iterable[list[int]], token_bytes: Callable[[int], int], *,
                  prefix: Sequence[int] = (), device: Any = "cpu") -> float:
    """``sum(-log2 p(token | context)) / bytes of the scored tokens`` over ``windows``.

    With a ``prefix`` (the tokenizer's BOS: Gemma is lost without it) every token of a window is
    scored after it; without one, a window's first token is context only.
    """
    import torch
    from torch.nn import functional

    nll, nbytes = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for w in windows:
            ids = [*prefix, *w]
            if len(ids) < 2:
                continue
            logits = model(torch.tensor([ids], device=device)).logits[0, :-1].float()
            nll += float(functional.cross_entropy(logits, torch.tensor(ids[1:], device=device), reduction="sum"))
            nbytes += sum(token_bytes(i) for i in (w if prefix else w[1:]))
    model.train(was_training)
    if nbytes == 0:
        raise PawError("the held-out texts give no token to score")
    return nll / math.log(2) / nbytes


def windows(encoded: Sequence[Sequence[int]], seq_len: int) -> list[list[int]]:
    """Each text cut into consecutive windows of at most ``seq_len`` ids: ``[[1..5]], 2 -> [[1,2],[3,4],[5]]``."""
    return [list(ids[a:a + seq_len]) for ids in encoded for a in range(0, len(ids), seq_len)]


@dataclass(frozen=True)
class HealPlan:
    """Training knobs, already checked (:class:`paw.vocab.options.HealOptions`)."""

    steps: int
    lr: float
    batch: int
    seq_len: int
    eval_every: int
    warmup: int
    seed: int
    schedule: str = "warmup"         # paw.train.Recipe's: constant, warmup or cosine
    accumulation: int = 1            # micro-batches of ``batch`` windows per optimiser step
    clip: float | None = 1.0         # gradient-norm clip (None: off)

    def recipe(self) -> Recipe:
        """The optimiser steps of this plan for :func:`paw.train.run`."""
        return Recipe(steps=self.steps, lr=self.lr, schedule=self.schedule, warmup=self.warmup,
                      accumulation=self.accumulation, clip=self.clip, seed=self.seed).check()


def trainable_matrices(model) -> list[Any]:
    """The input embedding and, when untied, the output head: the only tensors heal changes."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    mats = [emb]
    if head is not None and head.weight is not emb and head.weight.data_ptr() != emb.data_ptr():
        mats.append(head.weight)
    return mats


def heal_rows(model, rows: Sequence[int], stream: Sequence[int], plan: HealPlan, *,
              evaluate: Callable[[], float], prefix: Sequence[int] = (), device: Any = "cpu",
              track: Callable[[Iterable[int]], Iterable[int]] = iter) -> list[dict[str, float]]:
    """Train ``rows`` of the embedding (and untied head) for ``plan.steps`` steps; return the curve.

    Each step draws ``plan.batch`` random windows of ``plan.seq_len`` ids from ``stream`` (times
    ``plan.accumulation`` micro-batches), puts ``prefix`` (the BOS, as at scoring) before each, and
    minimises next-token cross-entropy; Adam (no weight decay) on :func:`paw.train.run`, by default with a
    linear warm-up over ``plan.warmup`` steps and the gradient norm clipped to 1. ``evaluate()`` (bits per
    byte on held-out text) runs at step 0, every ``plan.eval_every`` steps and at the end. The curve is a
    list of ``{'step', 'train_loss', 'bpb'}`` (``train_loss`` is the mean since the previous point). A NaN
    or infinite loss stops the run naming the step.
    """
    import torch

    for p in model.parameters():
        p.requires_grad_(False)
    mats = trainable_matrices(model)
    mask = torch.zeros(mats[0].shape[0], 1, device=device, dtype=mats[0].dtype)
    mask[torch.tensor(list(rows), dtype=torch.long, device=device)] = 1.0
    for m in mats:
        m.requires_grad_(True)
        m.register_hook(lambda g: g * mask)
    opt = torch.optim.Adam(mats, lr=plan.lr, weight_decay=0.0)
    data = torch.tensor(list(stream), dtype=torch.long)
    head = torch.tensor(list(prefix), dtype=torch.long)
    gen = torch.Generator().manual_seed(plan.seed)
    curve = [{"step": 0, "train_loss": float("nan"), "bpb": evaluate()}]
    losses: list[float] = []

    def batch_at(step: int):
        starts = torch.randint(0, len(data) - plan.seq_len, (plan.batch * plan.accumulation,), generator=gen)
        return torch.stack([torch.cat([head, data[s:s + plan.seq_len]]) for s in starts.tolist()]).to(device)

    def check(step: int) -> None:
        if step % plan.eval_every == 0 or step == plan.steps:
            since = losses[len(losses) - (step - curve[-1]["step"]):]
            curve.append({"step": step, "train_loss": sum(since) / len(since), "bpb": evaluate()})

    model.train()
    # transformers shifts the labels: position i predicts xb[i + 1]
    run(plan.recipe(), mats, opt, lambda xb: model(xb, labels=xb).loss, batch_at, losses=losses, after=check,
        progress=track, hint="lower --heal-lr")
    model.eval()
    for m in mats:
        m.requires_grad_(False)
    return curve


def curve_figure(curve: list[dict[str, float]], *, original_bpb: float | None, title: str):
    """Held-out bits per byte against heal steps, with the original model's level when known."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.6))
    ax = fig.add_subplot()
    ax.plot([p["step"] for p in curve], [p["bpb"] for p in curve], marker="o", color="#4c72b0",
            label="transplanted, healing")
    if original_bpb is not None:
        ax.axhline(original_bpb, color="#55a868", linestyle="--", label="original model, own tokenizer")
    ax.set_xlabel("heal steps")
    ax.set_ylabel("held-out bits per byte")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
