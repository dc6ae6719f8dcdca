"""Turn (context, continuation) text pairs into token ids and padded batches.

Shared by evaluation (score every choice) and LoRA training (learn the right one), so that the
tokens a model is trained on are exactly the tokens it is scored on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paw.errors import PawError


@dataclass(frozen=True)
class Encoded:
    """``ids`` of context + continuation; the last ``n_cont`` of them are the continuation."""

    ids: tuple[int, ...]
    n_cont: int


def _prefix(tokenizer) -> list[int]:
    """BOS when the tokenizer has one (Llama, Gemma, the zoo), else EOS as a start-of-text marker (GPT-2,
    Qwen): every continuation then has a token to be predicted from, even after an empty context."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return [int(token_id)]
    return []


def own_start(tokenizer) -> list[int]:
    """The special tokens the tokenizer itself puts before any text: ``[BOS]`` for Llama and Gemma,
    nothing for GPT-2, Qwen or SmolLM2 (what ``tokenizer.encode`` adds in front, as lm-eval and
    ``transformers`` pipelines see it)."""
    bare = tokenizer.encode("a", add_special_tokens=False)
    full = tokenizer.encode("a")
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return [int(t) for t in full[:i]]
    return []


START = ("bos", "tokenizer", "own")  # how a sequence starts: see encode_pair


def encode_pair(tokenizer, context: str, continuation: str, *, max_length: int | None = None,
                start: str = "bos") -> Encoded:
    """Tokenise ``context + continuation`` and find where the continuation starts.

    The lm-evaluation-harness recipe: trailing spaces move from the context to the continuation
    (``"Answer: " + "4"`` is scored as ``"Answer:" + " 4"``), the whole text is tokenised once, and
    the continuation is what follows the context's own tokens. Over-long sequences lose tokens on
    the left. ``start`` says what comes first:

    - ``"tokenizer"`` (what ``paw eval`` and ``train-lora`` use): exactly lm-eval's ``HFLM``: the
      tokenizer's own special tokens (BOS for Llama and Gemma, nothing for GPT-2, Qwen or SmolLM2),
      all trailing whitespace moves, the continuation is ``whole[len(context):]`` (or, where a token
      spanning the boundary leaves that empty, the continuation tokenised alone); an empty context
      becomes BOS (else EOS), or the continuation's first token when it already is that token;
    - ``"bos"``: BOS (else EOS) always first and the special tokens of the tokenizer left out, only
      trailing spaces move, and when the context's tokens are not a prefix of the whole the two
      halves are tokenised apart;
    - ``"own"`` (what distillation uses): the tokenizer's own leading special tokens
      (:func:`own_start`) as with ``"tokenizer"``, so a distilled adapter is trained on the sequences
      ``paw eval``, lm-eval and ``transformers`` will feed it, and the halves split as with ``"bos"``,
      so a continuation's tokens are exactly its own bytes (byte-aligned distillation needs that); an
      empty context with no leading token gets BOS (else EOS) to predict from.

    >>> enc = encode_pair(tok, "2 + 2 =", " 4", start="tokenizer")  # doctest: +SKIP
    >>> tok.decode(enc.ids[-enc.n_cont:])  # doctest: +SKIP
    ' 4'
    """
    if start not in START:
        raise PawError(f"start {start!r}: expected one of {', '.join(START)}")
    stripped = context.rstrip() if start == "tokenizer" else context.rstrip(" ")
    continuation = context[len(stripped):] + continuation
    if not continuation:
        raise PawError(f"empty answer choice after context {context[-40:]!r}")
    if start == "tokenizer":
        ids, n_cont = _as_lm_eval(tokenizer, stripped, continuation)
    else:
        prefix = own_start(tokenizer) if start == "own" else []
        if not prefix and (start == "bos" or not stripped):
            prefix = _prefix(tokenizer)
        ids, n_cont = _with_bos(tokenizer, stripped, continuation, prefix)
    if not n_cont:
        raise PawError(f"answer choice {continuation!r} encodes to no tokens")
    if max_length is not None and len(ids) > max_length:
        ids = ids[-max_length:]
    return Encoded(tuple(int(i) for i in ids), min(n_cont, len(ids) - 1))


def _as_lm_eval(tokenizer, context: str, continuation: str) -> tuple[list[int], int]:
    """lm-eval ``HFLM.loglikelihood`` / ``_encode_pair`` for a causal model (``add_bos_token`` unset)."""
    if not context:
        cont = tokenizer.encode(continuation, add_special_tokens=False)
        prefix = _prefix(tokenizer)
        if not prefix:
            raise PawError("the tokenizer has neither BOS nor EOS and the context is empty: nothing to score from")
        if cont and cont[0] == prefix[0]:
            return cont, len(cont) - 1
        return prefix + cont, len(cont)
    ctx = tokenizer.encode(context)
    whole = tokenizer.encode(context + continuation)
    cont = whole[len(ctx):]  # even when ctx is not a prefix of whole, as lm-eval does
    if not cont:  # a token spans the boundary and swallows the whole answer: lm-eval would score
        # nothing (log-likelihood 0 for every such choice); score the answer's own tokens instead
        cont = tokenizer.encode(continuation, add_special_tokens=False)
    return ctx + cont, len(cont)


def _with_bos(tokenizer, context: str, continuation: str, prefix: list[int]) -> tuple[list[int], int]:
    ctx = tokenizer.encode(context, add_special_tokens=False) if context else []
    whole = tokenizer.encode(context + continuation, add_special_tokens=False)
    if whole[: len(ctx)] == ctx and len(whole) > len(ctx):
        cont = whole[len(ctx):]
    else:
        cont = tokenizer.encode(continuation, add_special_tokens=False)
    if not prefix and not ctx:
        raise PawError("the tokenizer has neither BOS nor EOS and the context is empty: nothing to score from")
    return prefix + ctx + cont, len(cont)


@dataclass
class Batch:
    """Padded model inputs (B, T) for sequences ``ids[:-1]`` predicting ``ids[1:]``.

    ``target_mask`` (B, T) is True where the target token belongs to the continuation.
    """

    input_ids: object
    attention_mask: object
    position_ids: object
    targets: object
    target_mask: object


def make_batch(encoded: Sequence[Encoded], *, pad_id: int, padding_side: str = "right") -> Batch:
    """Pad a list of encodings on ``padding_side`` into one batch (tensors on CPU).

    Positions count real tokens only (``cumsum(mask) - 1``), so a left-padded row sees the same
    position ids as the unpadded sequence: results agree for both padding sides.
    """
    import torch

    if padding_side not in ("left", "right"):
        raise PawError(f"padding side {padding_side!r}: expected 'left' or 'right'")
    length = max(len(e.ids) for e in encoded) - 1
    shape = (len(encoded), length)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    targets = torch.full(shape, pad_id, dtype=torch.long)
    mask = torch.zeros(shape, dtype=torch.long)
    target_mask = torch.zeros(shape, dtype=torch.bool)
    for row, enc in enumerate(encoded):
        n = len(enc.ids) - 1
        start = length - n if padding_side == "left" else 0
        ids = torch.tensor(enc.ids, dtype=torch.long)
        input_ids[row, start:start + n] = ids[:-1]
        targets[row, start:start + n] = ids[1:]
        mask[row, start:start + n] = 1
        target_mask[row, start + n - enc.n_cont:start + n] = True
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return Batch(input_ids, mask, position_ids, targets, target_mask)


def pad_id_of(tokenizer) -> int:
    """The pad id, falling back to EOS, then 0 (padded positions are masked out anyway)."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    return 0


def max_length_of(model) -> int | None:
    """The longest sequence the model's position embeddings allow (``None`` when unknown)."""
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None
