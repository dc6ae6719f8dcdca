"""The steps of :func:`paw.transfer.distill.lora.distill_lora`: its loss per batch on PAW's one training loop
(:func:`paw.train.run`), when an automatic budget stops (:class:`Stop`), and the agreement figures.

The examples and the loss parts of one batch are :mod:`paw.transfer.distill.train`'s; this module puts them
through the optimiser steps and measures the student against the teacher before and after.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paw.evaluate.train import batches_in_order
from paw.progress import track
from paw.train import NonFiniteLoss, Recipe, run
from paw.train.loop import mean_loss
from paw.transfer.distill import loss as distill_loss
from paw.transfer.distill import scale as distill_scale
from paw.transfer.distill.train import (
    ALIGNED_KL,
    CHOICE,
    LOSSES,
    PAD_ID,
    TOKEN_KL,
    Shift,
    Vocab,
    _choice_loss,
    _excess_at,
    _sequence_losses,
)


@dataclass(frozen=True)
class Stop:
    """When a distillation with an automatic budget stops: every ``every`` steps the student's agreement
    with the teacher on ``probe`` is measured (:func:`probe_score`: on what the adapter changed); training
    stops once ``patience`` measurements in a row have not bettered the best before them by ``min_gain``,
    and not before ``min_steps`` (a slow start is not a plateau: at lr 1e-4 the demo's student sat at its
    starting agreement for 60 steps before it began to learn)."""

    probe: list
    every: int
    patience: int = 3
    min_gain: float = 0.005    # half a point of agreement
    min_steps: int = 100

    def done(self, history: list[float]) -> bool:
        """Whether the probe scores so far say stop.

        >>> Stop([], 10, min_steps=0).done([0.2, 0.8, 0.9, 0.902, 0.9, 0.89])
        True
        >>> Stop([], 10, min_steps=0).done([0.2, 0.5, 0.6, 0.7])
        False
        >>> Stop([], 10).done([0.2, 0.8, 0.9, 0.902, 0.9, 0.89])   # 60 steps: too early to tell
        False
        """
        if len(history) <= self.patience or len(history) * self.every < self.min_steps:
            return False
        return max(history[-self.patience:]) < max(history[:-self.patience]) + self.min_gain

    def earliest(self) -> int:
        """The first step at which :meth:`done` can say stop: ``patience + 1`` checks, and ``min_steps``.

        >>> Stop([], 10).earliest(), Stop([], 50).earliest()
        (100, 200)
        """
        return self.every * max(self.patience + 1, -(-self.min_steps // self.every))


def probe_score(peft_model, teacher_model, probe, vocab: Vocab, device, shift: Shift | None = None) -> float:
    """The stopping signal: the mean of the student's agreement with the teacher where the adapter changed
    it (``adapter_agreement``, top-1 weighed by the excess) and its choice agreement, whichever
    :func:`agreement` has (plain top-1 agreement when neither)."""
    a = agreement(peft_model, teacher_model, probe, vocab, device, shift=shift)
    values = [a[k] for k in ("adapter_agreement", "choice_agreement") if a[k] is not None]
    if not values:
        values = [a["top1_agreement"] or 0.0]
    return sum(values) / len(values)


def _excess_tensor(examples, mask, device):
    """(B, K) agreement weights at ``mask``: the excess where the LoRA raised the token, else 0; None
    when an example has no excess."""
    return _excess_at(examples, mask, device, lambda values: values.clamp(min=0.0))


def train(peft_model, teacher_model, examples, vocab: Vocab, *, steps, batch_size, lr, seed, device, progress,
          scale: distill_scale.Scale | None = None, extra: dict | None = None, focus: float = 0.0,
          stop: Stop | None = None, shift: Shift | None = None, schedule: str = "constant", warmup: int = 0,
          accumulation: int = 1, clip: float | None = None) -> dict:
    """The loss curve of at most ``steps`` AdamW steps of :func:`paw.train.run` (``schedule``, ``warmup``,
    ``accumulation`` micro-batches of ``batch_size``, gradient-norm ``clip``); under ``scale`` each rank
    trains its share of every batch and checkpoints (with ``extra`` beside the curve) let a killed run
    resume. ``focus`` > 0 keeps that fraction of each batch's continuation tokens, those the adapter
    changed most (TiTok's token selection); ``stop`` ends training early (the curve's ``probe`` holds its
    measurements); ``shift`` trains toward the student's base plus the adapter's shift (:class:`Shift`). A
    loss that is NaN or Inf ends it at once (the curve's ``diverged_at`` holds the step): the factors are
    lost by then, and :func:`paw.transfer.distill.run` refuses them. The last update can break the factors
    with no loss left to show it, so they are checked once after the loop too."""
    import torch

    recipe = Recipe(steps=steps, lr=lr, schedule=schedule, warmup=warmup, accumulation=accumulation,
                    clip=clip or None, seed=seed).check()
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    order = batches_in_order(len(examples), batch_size * accumulation, steps, seed)
    checkpoints = scale.checkpoints if scale is not None else None
    curve: dict[str, list[float]] = (checkpoints.extra("curve") if checkpoints else None) or \
        {"loss": [], **{k: [] for k in LOSSES}}
    step_parts: list[dict] = []   # each micro-batch's loss parts, until the step is recorded

    def step_loss(batch):
        chosen = [examples[i] for i in batch]
        parts = _batch_parts(peft_model, teacher_model, chosen, vocab, device, scale, focus, shift)
        step_parts.append(parts)
        return sum(parts.values()) if parts else None

    def record(losses) -> float:
        values = _mean_parts([distill_scale.reduce_parts(p, list(LOSSES), scale) for p in step_parts])
        step_parts.clear()
        for key in LOSSES:
            curve[key].append(values.get(key, math.nan))
        # a None loss: nothing in the batch to learn (shift 0)
        return mean_loss(losses) if scale is None or not scale.ranks.parallel else sum(values.values())

    def probe(done: int) -> bool:   # the same weights on every rank: the same decision
        if stop is None or done % stop.every:
            return False
        curve.setdefault("probe", []).append(probe_score(peft_model, teacher_model, stop.probe, vocab, device, shift))
        return stop.done(curve["probe"])

    peft_model.train()
    start = done = 0
    try:
        ran = run(recipe, params, optimizer, step_loss, order.__getitem__, checkpoints=checkpoints,
                  sync=lambda ps: distill_scale.sync(ps, scale), record=record, losses=curve["loss"],
                  skip=lambda batch: not any(examples[i].sequence is not None or examples[i].choices for i in batch),
                  after=probe, extra=lambda: {"curve": curve, **(extra or {})},
                  main=scale is None or scale.ranks.main, progress="distilling" if progress else None)
        start, done = ran.start, ran.done
    except NonFiniteLoss as err:  # the step just taken made the factors NaN: the rest is waste
        curve["diverged_at"] = [float(err.step)]
    if "diverged_at" not in curve and done > start and not distill_scale.all_finite(params, scale):
        curve["diverged_at"] = [float(done)]   # the last update broke the factors
    peft_model.eval()
    return {k: v for k, v in curve.items() if any(math.isfinite(x) for x in v)}


def _batch_parts(peft_model, teacher_model, chosen: list, vocab: Vocab, device, scale, focus, shift) -> dict:
    """``{loss name: this rank's weighted part}`` of the (micro-)batch ``chosen``; empty when it has nothing."""
    local = distill_scale.mine(chosen, scale)
    parts = {}
    with_seq, with_choices = distill_scale.work(local, chosen, scale)
    if with_seq and text_carries(vocab, shift):
        parts.update(_sequence_losses(peft_model, teacher_model, with_seq, vocab, PAD_ID, device, focus, shift)[0])
    if with_choices:
        choice = _choice_loss(peft_model, with_choices, PAD_ID, device, shift)[0]
        if choice is not None:
            parts[CHOICE] = choice
    return distill_scale.weigh(parts, local, chosen, scale)


def _mean_parts(values: list[dict[str, float]]) -> dict[str, float]:
    """One step's value of each loss part: the sum over its micro-batches over their number (as the loss is)."""
    if len(values) == 1:
        return values[0]
    keys = [k for k in LOSSES if any(k in v for v in values)]
    return {k: sum(v.get(k, 0.0) for v in values) / len(values) for k in keys}


def text_carries(vocab: Vocab, shift: Shift | None) -> bool:
    """Whether the teacher's continuations give a loss: always for the teacher target; for the shift target
    only where the two models' next-token distributions can be compared (a shared vocabulary, or shared
    cuts with ``--byte-kl``): across tokenizers the text itself is the teacher's, not the adapter's shift."""
    return shift is None or vocab.shared or vocab.aligned


def agreement(peft_model, teacher_model, examples, vocab: Vocab, device, *, progress: bool = False,
              shift: Shift | None = None) -> dict:
    """Teacher-student agreement on ``examples``: top-1 on the continuation tokens, KL, best choice.

    ``adapter_agreement`` is the top-1 agreement weighed by the teacher's excess (:func:`add_excess`):
    it counts the tokens the adapter taught, so a student that continues text as well as the teacher's
    base does, but has not learned what the adapter added, scores low on it (``top1_agreement`` can be
    high then). None when the examples carry no excess.

    ``kl`` is per continuation position with a shared vocabulary, per shared cut across tokenizers
    (``kl_positions`` counts those), None when nothing is matched. Under ``shift`` the choice figures and
    ``kl`` compare the student with the shift target it learns, not with the teacher.
    """
    import torch

    hits = positions = choice_hits = rows = kl_positions = 0
    kl_sum = choice_kl_sum = focus_hits = focus_total = 0.0
    was_training = peft_model.training
    peft_model.eval()
    with torch.no_grad():
        starts = range(0, len(examples), 16)
        for start in (track(starts, "measuring agreement", total=len(starts), unit="batches") if progress else starts):
            chunk = examples[start:start + 16]
            seqs = [e for e in chunk if e.sequence is not None]
            if seqs:
                parts, logits, targets, mask, n_aligned = _sequence_losses(peft_model, teacher_model, seqs, vocab,
                                                                           PAD_ID, device, shift=shift)
                h, n = distill_loss.top1_agreement(logits, targets, mask)
                hits, positions = hits + h, positions + n
                weights = _excess_tensor(seqs, mask, device)
                if weights is not None:
                    focus_hits += float((weights * (logits.argmax(-1) == targets)).sum())
                    focus_total += float(weights.sum())
                if TOKEN_KL in parts:
                    kl_sum, kl_positions = kl_sum + float(parts[TOKEN_KL]) * n, kl_positions + n
                elif ALIGNED_KL in parts:
                    kl_sum, kl_positions = kl_sum + float(parts[ALIGNED_KL]) * n_aligned, kl_positions + n_aligned
            with_choices = [e for e in chunk if e.choices]
            if with_choices:
                loss, s, t, v = _choice_loss(peft_model, with_choices, PAD_ID, device, shift)
                h, n = distill_loss.choice_agreement(s, t, v)
                loss = distill_loss.choice_kl(s, t, v) if shift else loss   # over every row, moved or not
                choice_hits, rows, choice_kl_sum = choice_hits + h, rows + n, choice_kl_sum + float(loss) * n
    peft_model.train(was_training)
    return {"prompts": len(examples), "positions": positions,
            "top1_agreement": _ratio(hits, positions), "kl": _ratio(kl_sum, kl_positions), "kl_positions": kl_positions,
            "adapter_agreement": round(focus_hits / focus_total, 6) if focus_total > 0 else None,
            "choice_items": rows, "choice_agreement": _ratio(choice_hits, rows), "choice_kl": _ratio(choice_kl_sum, rows)}


def _ratio(a: float, b: int) -> float | None:
    return round(a / b, 6) if b else None


