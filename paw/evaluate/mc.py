"""Multiple-choice evaluation by log-likelihood (the lm-evaluation-harness way).

Every choice ``j`` of an item is scored by ``LL_j = sum_t log p(c_t | context, c_<t)`` over its
continuation tokens. Reported, over ``n`` items:

- ``accuracy``: ``argmax_j LL_j`` is the answer;
- ``accuracy_norm``: ``argmax_j LL_j / len(choice_j in characters)`` is the answer, exactly
  lm-eval's ``acc_norm``: the length of the choice text *without* the space that joins it to the
  question (:meth:`MCItem.norm_lengths`; characters, not tokens, so that two models with different
  tokenizers are normalised alike);
- ``stderr`` / ``stderr_norm``: lm-eval's ``mean_stderr`` of the 0/1 outcomes, the sample standard
  deviation over ``sqrt(n)``, i.e. ``sqrt(p (1 - p) / (n - 1))`` (:func:`paw.evaluate.stats.mean_stderr`;
  ``None`` for one item, where lm-eval prints N/A);
- ``loss``: mean negative log-likelihood per token of the *correct* continuations, pooled over all
  their tokens (``sum NLL / sum tokens``), and ``perplexity = exp(loss)``, the test/loss and
  test/perplexity of LoRA fine-tuning runs;
- ``n`` items, ``n_tokens`` correct-answer tokens.

Sequences are tokenised as lm-eval's ``hf`` model does (:func:`~paw.evaluate.encode.encode_pair`
with ``start="tokenizer"``): the tokenizer's own special tokens, so BOS for Llama and Gemma and
none for GPT-2, Qwen or SmolLM2. ``scripts/parity_eval_lmeval.py`` checks the choices item by item.

The model runs under ``torch.no_grad`` in eval mode, on sequences sorted by length (longest first,
so an out-of-memory shows at once) and padded by PAW itself, whatever the tokenizer's own
``padding_side``: on the left by default, because every continuation then ends at the last
position and only the longest continuation's positions go through the LM head
(``logits_to_keep``), which matters with 150k-token vocabularies; each row's first token stays in
column 0, so that no query attends to nothing (CUDA's SDPA gives NaN for such a query, which then
spreads through the row: :func:`~paw.evaluate.encode.make_batch`). Position ids count real tokens
only, so left and right padding give the same numbers (tested, also under an SDPA that behaves as
CUDA's: ``tests/evaluate/test_padding.py``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

from paw.device import guard_cuda_attention
from paw.errors import PawError
from paw.evaluate.chat import ChatFormat, pairs_of
from paw.evaluate.encode import Encoded, encode_pair, make_batch, max_length_of, pad_id_of, sliding_window_of
from paw.evaluate.items import MCItem
from paw.evaluate.stats import mean_stderr
from paw.progress import track


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


def forward_logits(model, batch, device):
    """``(logits (B, K, V), skip)``: logits of the last K = T - skip positions, those holding targets.

    With left padding every continuation sits at the end of its row, so only the longest
    continuation's K positions go through the LM head (``logits_to_keep``), which saves memory
    with 150k-token vocabularies; with right padding nearly all T positions do.
    """
    length = batch.target_mask.shape[1]
    columns = batch.target_mask.any(0).nonzero()
    skip = int(columns[0]) if len(columns) else 0
    keep = length - skip
    inputs = dict(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                  position_ids=batch.position_ids.to(device))
    with _contiguous_head_input(model):
        try:
            logits = model(**inputs, logits_to_keep=keep).logits
        except TypeError:  # models without logits_to_keep
            logits = model(**inputs).logits
    if logits.shape[1] != keep:
        logits = logits[:, -keep:]
    return logits, skip


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


LOGITS_BUDGET = 1 << 30
"""Bytes of float32 logits (rows x kept positions x vocabulary x 4) one forward pass may hold: a batch
that would need more is halved until it fits (Gemma-3's 262k-token vocabulary on PIQA's longest
answers, up to 210 tokens, at the bench's batch of 64 asked for about 10 GiB of logits, twice over
with their log-softmax, and the process was killed on a 24 GiB machine)."""


def _logit_bytes(batch, vocab: int) -> int:
    columns = batch.target_mask.any(0).nonzero()
    keep = batch.target_mask.shape[1] - (int(columns[0]) if len(columns) else 0)
    return batch.target_mask.shape[0] * keep * vocab * 4


def _vocab_size(model) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(getattr(getattr(model, "config", None), "vocab_size", 0) or 0)


AUTO_BATCH = {"cuda": 64, "cpu": 8}
"""Where ``batch_size="auto"`` starts, by device type (other devices: the CPU's). A batch that runs out of
memory is halved, and so is every later one (lm-eval's ``--batch_size auto`` also starts at 64 and halves);
sequences go longest first, so the first batch is the largest. The CPU starts at the fixed default:
out of memory there is the kernel killing the process, not an error to halve on."""


def score_encoded(model, encoded: Sequence[Encoded], *, pad_id: int, batch_size: int | str = 8, device=None,
                  padding_side: str = "left", progress: bool = True,
                  description: str = "scoring choices") -> list[tuple[float, int]]:
    """``(sum log p(continuation), n_tokens)`` for each encoding, in input order (``device``: the
    model's own where not given; a batch whose logits would pass :data:`LOGITS_BUDGET` goes in halves;
    ``batch_size="auto"``: :data:`AUTO_BATCH`)."""
    import torch

    device = model_device(model) if device is None else device
    guard_cuda_attention(model)
    auto = batch_size == "auto"
    size = AUTO_BATCH.get(torch.device(device).type, AUTO_BATCH["cpu"]) if auto else int(batch_size)
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].ids))  # longest first: fewer pads
    starts = range(0, len(order), size)
    results: list[tuple[float, int]] = [(0.0, 0)] * len(encoded)
    window = sliding_window_of(model)
    vocab = _vocab_size(model)
    cap = size   # what fits: lowered when a batch runs out of memory under "auto"
    batches = track(starts, description, total=len(starts), unit="batches") if progress else starts
    with torch.no_grad():
        for start in batches:
            pending = [order[start:start + size]]
            while pending:
                index = pending.pop()
                if len(index) > cap:   # a smaller batch fitted since this one was queued
                    pending += [index[i:i + cap] for i in range(0, len(index), cap)][::-1]
                    continue
                batch = make_batch([encoded[i] for i in index], pad_id=pad_id, padding_side=padding_side,
                                   window=window)
                if len(index) > 1 and _logit_bytes(batch, vocab) > LOGITS_BUDGET:
                    half = len(index) // 2
                    pending += [index[half:], index[:half]]
                    continue
                try:
                    sums, counts = _score_batch(model, batch, device)
                except _out_of_memory() as err:
                    if not auto or len(index) == 1:
                        raise PawError(f"out of memory on {torch.device(device).type} with {len(index)} sequences "
                                       f"of up to {batch.input_ids.shape[1]} tokens; try a smaller --batch-size, "
                                       "or --batch-size auto") from err
                    cap = len(index) // 2
                    _free_memory(device)
                    pending += [index[cap:], index[:cap]]
                    continue
                for i, s, c in zip(index, sums.tolist(), counts.tolist(), strict=True):
                    results[i] = (float(s), int(c))
    return results


def _score_batch(model, batch, device):
    """``(sums (B,), counts (B,))`` of one batch; a NaN/Inf log-likelihood is refused."""
    import torch

    logits, skip = forward_logits(model, batch, device)
    sums, counts = continuation_logprobs(logits, batch.targets[:, skip:].to(device),
                                         batch.target_mask[:, skip:].to(device))
    del logits
    bad = int((~torch.isfinite(sums)).sum())
    if bad:  # a NaN compares as nothing: the first choice would win silently
        raise PawError(f"the model gave a NaN/Inf log-likelihood for {bad} of the {len(sums)} sequences "
                       f"of one batch on {sums.device.type}; try --dtype float32, or another "
                       "--device to compare")
    return sums, counts


def _out_of_memory() -> type[BaseException]:
    import torch

    return getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def _free_memory(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def model_device(model):
    return next(model.parameters()).device


def evaluate(model, tokenizer, items: Sequence[MCItem], *, batch_size: int | str = 8, device=None,
             progress: bool = True, padding_side: str | None = None, per_item: bool = False,
             max_length: int | None = None, chat: ChatFormat | None = None) -> dict:
    """Score ``items`` with ``model``; returns the metrics in the module docstring.

    ``per_item=True`` adds ``correct`` and ``correct_norm`` (0/1 per item, in order) and
    ``choice_logprobs`` (the summed log-likelihood of every choice), for paired tests between models.
    ``chat``: every context rendered with the model's chat template (:mod:`paw.evaluate.chat`).

    >>> evaluate(model, tok, [MCItem("2 + 2 =", (" 3", " 4"), 1)])  # doctest: +SKIP
    {'accuracy': 1.0, 'accuracy_norm': 1.0, 'stderr': 0.0, ..., 'n': 1}
    """
    scores = choice_scores(model, tokenizer, items, batch_size=batch_size, device=device, progress=progress,
                           padding_side=padding_side, max_length=max_length, chat=chat)
    return summarize(items, scores, per_item=per_item)


def choice_scores(model, tokenizer, items: Sequence[MCItem], *, batch_size: int | str = 8, device=None,
                  progress: bool = True, padding_side: str | None = None,
                  max_length: int | None = None, chat: ChatFormat | None = None) -> list[tuple[float, int]]:
    """``(sum log p(choice | question), n_tokens)`` of every choice of every item, item by item: what
    :func:`summarize` reads, and what proxy-tuning combines across models (:mod:`paw.evaluate.proxy`).
    A sequence longer than ``max_length`` (default: the model's) loses tokens on the left, as in lm-eval."""
    if not items:
        raise PawError("no items to evaluate")
    if device is not None:
        model.to(device)
    device = model_device(model)
    side = padding_side or "left"
    max_length = max_length or max_length_of(model)
    for k, item in enumerate(items):
        if not 0 <= item.answer < len(item.choices):
            raise PawError(f"item {item.id or k}: answer {item.answer} out of range for {len(item.choices)} choices")
    encoded = [encode_pair(tokenizer, context, continuation, max_length=max_length, start="tokenizer")
               for pairs in pairs_of(items, chat) for context, continuation in pairs]
    was_training = model.training
    model.eval()
    try:
        return score_encoded(model, encoded, pad_id=pad_id_of(tokenizer), batch_size=batch_size,
                             device=device, padding_side=side, progress=progress)
    finally:
        model.train(was_training)


def summarize(items: Sequence[MCItem], scores: Sequence[tuple[float, int]], *, per_item: bool = False) -> dict:
    """Metrics from per-choice ``(sum_logprob, n_tokens)`` laid out item by item, choice by choice."""
    hits, hits_norm, all_lls = [], [], []
    tokens, nll, cursor = 0, 0.0, 0
    for item in items:
        pairs = item.pairs()
        lls = [scores[cursor + j][0] for j in range(len(pairs))]
        norms = [ll / length for ll, length in zip(lls, item.norm_lengths(), strict=True)]
        hits.append(int(argmax_choice(lls) == item.answer))
        hits_norm.append(int(argmax_choice(norms) == item.answer))
        all_lls.append(lls)
        nll -= scores[cursor + item.answer][0]
        tokens += scores[cursor + item.answer][1]
        cursor += len(pairs)
    n = len(items)
    acc, acc_norm = sum(hits) / n, sum(hits_norm) / n
    loss = nll / max(tokens, 1)
    details = {"correct": hits, "correct_norm": hits_norm, "choice_logprobs": all_lls} if per_item else {}
    return {
        "accuracy": acc,
        "accuracy_norm": acc_norm,
        "stderr": mean_stderr(hits),
        "stderr_norm": mean_stderr(hits_norm),
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "n": n,
        "n_tokens": tokens,
        **details,
    }


def argmax_choice(values: Sequence[float]) -> int:
    """First index of the maximum (ties go to the earlier choice, deterministically).

    >>> argmax_choice([-2.0, -1.0, -1.0])
    1
    """
    return max(range(len(values)), key=lambda j: (values[j], -j))


_argmax = argmax_choice  # kept for callers written before the public name
