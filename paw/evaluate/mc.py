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

The choices of one item share their context: where the model's family is one it is tested on, the
context runs once and each choice from its cached keys and values (:mod:`paw.evaluate.shared`; about a
third of the tokens on four-choice ARC-Easy), to the same log-likelihoods within float rounding
(``tests/evaluate/test_shared_context.py``); other families run every row whole, as above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paw.device import guard_cuda_attention
from paw.errors import PawError
from paw.evaluate import shared
from paw.evaluate.chat import ChatFormat, pairs_of
from paw.evaluate.encode import Encoded, encode_pair, make_batch, max_length_of, pad_id_of, sliding_window_of
from paw.evaluate.forward import (  # noqa: F401  (continuation_logprobs, forward_logits: importable from here)
    Batches,
    TooBig,
    continuation_logprobs,
    forward_logits,
    logits_fit,
    score_batch,
    vocab_size,
)
from paw.evaluate.items import MCItem
from paw.evaluate.stats import mean_stderr
from paw.progress import status, track

AUTO_BATCH = {"cuda": 64, "cpu": 8}
"""Where ``batch_size="auto"`` starts, by device type (other devices: the CPU's). A batch that runs out of
memory is halved, and so is every later one (lm-eval's ``--batch_size auto`` also starts at 64 and halves);
sequences go longest first, so the first batch is the largest. The CPU starts at the fixed default:
out of memory there is the kernel killing the process, not an error to halve on."""


def score_encoded(model, encoded: Sequence[Encoded], *, pad_id: int, batch_size: int | str = 8, device=None,
                  padding_side: str = "left", progress: bool = True, description: str = "scoring choices",
                  share_context: bool = True) -> list[tuple[float, int]]:
    """``(sum log p(continuation), n_tokens)`` for each encoding, in input order (``device``: the
    model's own where not given; a batch whose logits would pass :data:`~paw.evaluate.forward.LOGITS_BUDGET`
    goes in halves; ``batch_size="auto"``: :data:`AUTO_BATCH`).

    Encodings with the same context (the choices of one item) run that context once and each choice from
    its cached keys and values (:mod:`paw.evaluate.shared`), where the model's family is one that path is
    tested on; the rest, and all of them with ``share_context=False``, run whole, one row each. Both ways
    give the same log-likelihoods to float rounding (``tests/evaluate/test_shared_context.py``)."""
    import torch

    device = model_device(model) if device is None else device
    guard_cuda_attention(model)
    auto = batch_size == "auto"
    size = AUTO_BATCH.get(torch.device(device).type, AUTO_BATCH["cpu"]) if auto else int(batch_size)
    batches = Batches(size, auto=auto, device=device)
    results: list[tuple[float, int]] = [(0.0, 0)] * len(encoded)
    groups, alone = shared.plan(encoded) if share_context else ([], list(range(len(encoded))))
    if groups and (refusal := shared.refusal(model)) is not None:
        status(f"{description}: each choice with its whole context, the context not shared ({refusal})")
        groups, alone = [], list(range(len(encoded)))
    with torch.no_grad():
        if groups:
            try:
                shared.score_groups(model, encoded, groups, pad_id=pad_id, batches=batches, results=results,
                                    progress=progress, description=description)
            except shared.Unshareable as why:   # found on the first batch, before any score is kept
                status(f"{description}: each choice with its whole context, the context not shared ({why})")
                alone = list(range(len(encoded)))
        if alone:
            _score_whole(model, encoded, alone, pad_id=pad_id, batches=batches, padding_side=padding_side,
                         results=results, progress=progress, description=description)
    return results


def _score_whole(model, encoded: Sequence[Encoded], index: Sequence[int], *, pad_id: int, batches: Batches,
                 padding_side: str, results: list, progress: bool, description: str) -> None:
    """``results[i]`` for each ``i`` of ``index``: ``encoded[i]`` run whole, one row each, longest first."""
    order = sorted(index, key=lambda i: -len(encoded[i].ids))  # longest first: fewer pads
    window = sliding_window_of(model)
    vocab = vocab_size(model)

    def step(part: list[int]) -> None:
        batch = make_batch([encoded[i] for i in part], pad_id=pad_id, padding_side=padding_side, window=window)
        if not logits_fit(batch, vocab):
            raise TooBig
        sums, counts = score_batch(model, batch, batches.device)
        for i, s, c in zip(part, sums.tolist(), counts.tolist(), strict=True):
            results[i] = (float(s), int(c))

    size = batches.size   # the slices stay this wide; Batches.run splits them when its size goes down
    starts = range(0, len(order), size)
    for start in track(starts, description, total=len(starts), unit="batches") if progress else starts:
        batches.run(order[start:start + size], step, tokens=lambda part: max(len(encoded[i].ids) for i in part) - 1)


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
