"""One forward pass over a padded batch: logits only where targets are, their log-likelihoods, and batches
halved when they do not fit.

Shared by the two ways :func:`paw.evaluate.mc.score_encoded` runs a batch: whole sequences, one row each,
and choices from a context's cached keys and values (:mod:`paw.evaluate.shared`); LoRA training and
distillation call :func:`forward_logits` too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from paw.errors import PawError


def continuation_logprobs(logits, targets, target_mask):
    """Sum of target log-probabilities over masked positions, per row.

    ``logits`` (B, T, V), ``targets`` (B, T) token ids, ``target_mask`` (B, T) bool ->
    ``(sum_logprob (B,), n_tokens (B,))``. Computed in float32 whatever the model's dtype.
    """
    import torch

    logprobs = torch.log_softmax(logits.float(), dim=-1)
    picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    picked = torch.where(target_mask, picked, torch.zeros_like(picked))
    return picked.sum(-1), target_mask.sum(-1)


def forward_logits(model, batch, device, **extra):
    """``(logits (B, K, V), skip)``: logits of the last K = T - skip positions, those holding targets.

    With left padding every continuation sits at the end of its row, so only the longest
    continuation's K positions go through the LM head (``logits_to_keep``), which saves memory
    with 150k-token vocabularies; with right padding nearly all T positions do. A batch without any
    target keeps one position, the fewest the head can be asked for (``logits_to_keep=0`` means all).
    ``extra`` goes to the model as it is (a KV cache, ``use_cache``: :mod:`paw.evaluate.shared`).
    """
    skip = first_target_column(batch)
    keep = batch.target_mask.shape[1] - skip
    inputs = dict(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                  position_ids=batch.position_ids.to(device), **extra)
    with _contiguous_head_input(model):
        try:
            logits = model(**inputs, logits_to_keep=keep).logits
        except TypeError:  # models without logits_to_keep
            logits = model(**inputs).logits
    if logits.shape[1] != keep:
        logits = logits[:, -keep:]
    return logits, skip


def first_target_column(batch) -> int:
    """The first column that holds a target in any row (the last column when none does)."""
    columns = batch.target_mask.any(0).nonzero()
    return int(columns[0]) if len(columns) else batch.target_mask.shape[1] - 1


@contextlib.contextmanager
def _contiguous_head_input(model):
    """The LM head reads a contiguous copy of its input while the block runs.

    ``logits_to_keep`` hands the head a strided view, ``hidden[:, -K:]``. On CPU (torch 2.13) a
    linear map of a strided (B, K, H) input is not folded into one matrix product: the (V, H) weight
    is expanded to (B, H, V) and copied, B x V x H x dtype bytes held during the head's forward and
    again in its backward: 2 GiB at batch 4 for Llama-3.2-1B's 128,256 x 2,048 head in bf16, where
    the logits themselves take 0.1 GiB. The contiguous copy of the input is B x K x H.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        yield
        return
    handle = head.register_forward_pre_hook(lambda _module, args: tuple(a.contiguous() for a in args))
    try:
        yield
    finally:
        handle.remove()


def score_batch(model, batch, device, **extra):
    """``(sums (B,), counts (B,))`` of one batch; a NaN/Inf log-likelihood is refused. ``extra``: as
    :func:`forward_logits`."""
    logits, skip = forward_logits(model, batch, device, **extra)
    sums, counts = continuation_logprobs(logits, batch.targets[:, skip:].to(device),
                                         batch.target_mask[:, skip:].to(device))
    del logits
    refuse_non_finite(sums)
    return sums, counts


def score_targets(model, batch, device, **extra):
    """As :func:`score_batch`, with the LM head run on the N target positions alone, (1, N, H), instead of
    every kept one, (B, K, H): padded rows cost no head work (a pre-hook on the head picks the rows; what
    the model does after its head must act per position, as the softcapping of Gemma-2 and 3 does). The
    log-probabilities are a log-softmax, as everywhere else: ``logit - logsumexp(logits)`` came out lower by
    about 2e-5 a token on SmolLM2's 49k vocabulary (torch 2.13, CPU), 1e-3 on a 50-token PIQA answer."""
    import torch

    skip = first_target_column(batch)
    keep = batch.target_mask.shape[1] - skip
    mask = batch.target_mask[:, skip:].to(device)

    def pick(_module, args):
        hidden = args[0] if args[0].shape[1] == keep else args[0][:, -keep:]   # a model without logits_to_keep
        return (hidden[mask].unsqueeze(0), *args[1:])

    inputs = dict(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                  position_ids=batch.position_ids.to(device), **extra)
    handle = model.get_output_embeddings().register_forward_pre_hook(pick)
    try:
        try:
            logits = model(**inputs, logits_to_keep=keep).logits
        except TypeError:
            logits = model(**inputs).logits
    finally:
        handle.remove()
    targets = batch.targets[:, skip:].to(device)[mask]
    if logits.shape[:2] != (1, len(targets)):
        raise PawError(f"the LM head gave logits of shape {tuple(logits.shape)} for {len(targets)} target positions")
    picked = torch.log_softmax(logits[0].float(), -1).gather(-1, targets[:, None])[:, 0]
    sums = torch.zeros(len(mask), dtype=torch.float32, device=picked.device)
    sums.index_add_(0, mask.nonzero()[:, 0], picked)
    refuse_non_finite(sums)
    return sums, mask.sum(-1)


def refuse_non_finite(sums) -> None:
    """A NaN compares as nothing: the first choice would win silently, so it stops the run instead."""
    import torch

    bad = int((~torch.isfinite(sums)).sum())
    if bad:
        raise PawError(f"the model gave a NaN/Inf log-likelihood for {bad} of the {len(sums)} sequences "
                       f"of one batch on {sums.device.type}; try --dtype float32, or another "
                       "--device to compare")


LOGITS_BUDGET = 1 << 30
"""Bytes of float32 logits (rows x kept positions x vocabulary x 4) one forward pass may hold: a batch
that would need more is halved until it fits (Gemma-3's 262k-token vocabulary on PIQA's longest
answers, up to 210 tokens, at the bench's batch of 64 asked for about 10 GiB of logits, twice over
with their log-softmax, and the process was killed on a 24 GiB machine)."""


def logits_fit(batch, vocab: int, *, targets_only: bool = False) -> bool:
    """Whether ``batch``'s kept logits (``targets_only``: its target positions' alone, :func:`score_targets`)
    stay within :data:`LOGITS_BUDGET` (a batch of one always fits)."""
    kept = int(batch.target_mask.sum()) if targets_only else \
        len(batch.target_mask) * (batch.target_mask.shape[1] - first_target_column(batch))
    return len(batch.target_mask) == 1 or kept * vocab * 4 <= LOGITS_BUDGET


def vocab_size(model) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(getattr(getattr(model, "config", None), "vocab_size", 0) or 0)


class TooBig(Exception):
    """Raised by a batch step whose logits would pass :data:`LOGITS_BUDGET`: :meth:`Batches.run` halves it."""


class Batches:
    """Runs rows through a step in batches of at most ``size``, halving what does not fit: a batch whose step
    raises :class:`TooBig`, and under ``auto`` one that runs out of device memory, after which every later
    batch is at most half as large too (``size`` goes down: sequences go longest first, so what failed once
    fails again)."""

    def __init__(self, size: int, *, auto: bool, device) -> None:
        self.size, self.auto, self.device = size, auto, device

    def run(self, index: list[int], step: Callable[[list[int]], None], *,
            tokens: Callable[[list[int]], int]) -> None:
        """``step(part)`` for consecutive parts of ``index``; ``tokens(part)``, the longest row in tokens, goes
        in the out-of-memory message."""
        import torch

        pending = [index]
        while pending:
            part = pending.pop()
            if len(part) > self.size:   # a smaller batch fitted since this one was queued
                pending += [part[i:i + self.size] for i in range(0, len(part), self.size)][::-1]
                continue
            try:
                step(part)
            except TooBig:
                half = len(part) // 2
                pending += [part[half:], part[:half]]
            except _out_of_memory() as err:
                if not self.auto or len(part) == 1:
                    raise PawError(f"out of memory on {torch.device(self.device).type} with {len(part)} sequences "
                                   f"of up to {tokens(part)} tokens; try a smaller --batch-size, "
                                   "or --batch-size auto") from err
                self.size = len(part) // 2
                _free_memory(self.device)
                pending += [part[self.size:], part[:self.size]]


def _out_of_memory() -> type[BaseException]:
    import torch

    return getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def _free_memory(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
