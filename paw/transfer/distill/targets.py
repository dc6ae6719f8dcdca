"""The token KL's target, made once per input: the teacher's next-token distributions over its continuation
(and, under ``--target shift``, the student's base plus what the adapter moved in the teacher).

With a shared vocabulary the student learns the teacher's next-token distribution at every position of the
continuation (:func:`paw.transfer.distill.loss.token_kl`). That target depends on nothing the training changes:
the teacher is frozen, and under the shift target so are the two bases (the student's adapter is switched off).
So it is computed once per input before training (:func:`cache`) and read at every step and by the agreement
figures, instead of running the teacher (the shift target: the teacher, its base and the student's base) on
every batch again: at 4 passes over 48 inputs of a ~100M teacher that was a fifth of the distillation's CPU
time (``docs/benchmarks/distill-speed.md``).

What is kept is ``continuation tokens x student vocabulary`` float32 numbers per input, so the cache is made
only when all of them fit in :data:`CACHE_BYTES`; otherwise the passes run per batch, as before. The values are
those of the per-batch passes up to the batch the input was padded in (a few 1e-7 in float32).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from typing import Any

from paw.evaluate.encode import make_batch
from paw.evaluate.mc import forward_logits
from paw.transfer.distill import loss as distill_loss

CACHE_BYTES = 1 << 30   # at most this many bytes of cached targets (float32); more: the passes run per batch
BATCH = 16              # inputs per pass while the cache is made


def made_once(vocab, scale) -> bool:
    """Whether a run may make the targets once (:func:`cache`): a shared vocabulary (the token KL), and not
    several ranks splitting the steps (each would need every input's target)."""
    return bool(vocab.shared) and (scale is None or not scale.ranks.parallel)


def cache_bytes(tokens: int, width: int) -> int:
    """The cache's size for ``tokens`` continuation tokens of a ``width``-word student vocabulary (float32)."""
    return tokens * width * 4


def autocast(device):
    """bf16 autocast on CUDA, nothing on the CPU: how every distillation pass runs."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def token_target(peft_model, teacher_model, batch, vocab, device, shift=None) -> tuple[Any, Any]:
    """``(target (B, K, V) log-probabilities, moved)`` for the student's ``batch`` (``forward_logits``'s K
    columns): the teacher's distributions in the student's vocabulary, or under ``shift``
    (:class:`paw.transfer.distill.train.Shift`) the student's base plus the adapter's shift, with ``moved``
    (B, K) marking the positions where the adapter changed the teacher at all (None without ``shift``)."""
    import torch

    columns = vocab.columns
    teacher_batch = replace(batch, input_ids=columns.clamp(min=0)[batch.input_ids])

    def teacher_lp():
        return distill_loss.to_student_vocab(forward_logits(teacher_model, teacher_batch, device)[0], columns)

    with torch.no_grad(), autocast(device):
        target = teacher_lp()
        if not shift:
            return target, None
        with shift.teacher_off():
            base = teacher_lp()
        with shift.student_off():
            student_base = forward_logits(peft_model, batch, device)[0]
        moved = (target != base).any(-1)
        return distill_loss.shift_token_target(student_base, target, base, shift.scale), moved


def cache(examples: list, peft_model, teacher_model, vocab, device, shift=None, *, pad_id: int = 0,
          window: int | None = None, budget: int | None = None) -> dict:
    """Fill each example's ``token_target`` (K_i, V) and, under ``shift``, ``token_moved`` (K_i,), K_i its
    continuation tokens, in batches of :data:`BATCH` padded with ``pad_id`` to ``window`` (as the training's
    batches); ``budget``: at most this many bytes (default :data:`CACHE_BYTES`). Returns the
    report's note: ``{"cached": bool, "bytes": n}`` and, when nothing was cached, ``why``."""
    budget = CACHE_BYTES if budget is None else budget
    rows = [e for e in examples if e.sequence is not None]
    width = peft_model.get_input_embeddings().weight.shape[0]
    size = cache_bytes(sum(e.sequence.n_cont for e in rows), width)
    if not vocab.shared or not rows:
        return {"cached": False, "bytes": 0, "why": "no token KL"}
    if size > budget:
        return {"cached": False, "bytes": size, "why": f"over {budget} bytes: the teacher runs per batch"}
    was_training = peft_model.training
    peft_model.eval()
    try:
        for start in range(0, len(rows), BATCH):
            chunk = rows[start:start + BATCH]
            batch = make_batch([e.sequence for e in chunk], pad_id=pad_id, padding_side="left", window=window)
            target, moved = token_target(peft_model, teacher_model, batch, vocab, device, shift)
            mask = batch.target_mask[:, batch.target_mask.shape[1] - target.shape[1]:].to(target.device)
            for r, e in enumerate(chunk):
                e.token_target = target[r][mask[r]].float().clone()
                e.token_moved = moved[r][mask[r]].clone() if moved is not None else None
    finally:
        peft_model.train(was_training)
    return {"cached": True, "bytes": size}


def cached(examples: list, mask, device) -> tuple[Any, Any] | None:
    """``(target (B, K, V), moved or None)`` laid out at ``mask``'s (B, K) positions from the examples' cached
    rows (left-padded rows hold their continuations in order), or None when an example has none cached."""
    import torch

    if not examples or any(getattr(e, "token_target", None) is None for e in examples):
        return None
    if [e.token_target.shape[0] for e in examples] != mask.sum(1).tolist():
        return None   # laid out otherwise than when cached: the passes run
    width = examples[0].token_target.shape[-1]   # outside the continuations: uniform (no position there is read)
    target = torch.full((*mask.shape, width), -math.log(width), dtype=torch.float32, device=device)
    target[mask] = torch.cat([e.token_target for e in examples]).to(device)
    moved = None
    if examples[0].token_moved is not None:
        moved = torch.zeros(mask.shape, dtype=torch.bool, device=device)
        moved[mask] = torch.cat([e.token_moved for e in examples]).to(device)
    return target, moved
