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
    special = {"add_special_tokens": False} if starts_with_prefix(tokenizer, context) else {}
    ctx = tokenizer.encode(context, **special)
    whole = tokenizer.encode(context + continuation, **special)
    cont = whole[len(ctx):]  # even when ctx is not a prefix of whole, as lm-eval does
    if not cont:  # a token spans the boundary and swallows the whole answer: lm-eval would score
        # nothing (log-likelihood 0 for every such choice); score the answer's own tokens instead
        cont = tokenizer.encode(continuation, add_special_tokens=False)
    return ctx + cont, len(cont)


def starts_with_prefix(tokenizer, text: str) -> bool:
    """Whether ``text`` already starts with the text of BOS (else EOS), as a chat template often writes it
    (``{{ bos_token }}[INST]``): lm-eval's ``tok_encode`` then adds no special tokens, so BOS is not doubled."""
    prefix = _prefix(tokenizer)
    starts = tokenizer.decode(prefix) if prefix else ""
    return bool(starts) and text.startswith(starts)


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


def make_batch(encoded: Sequence[Encoded], *, pad_id: int, padding_side: str = "right",
               window: int | None = None) -> Batch:
    """Pad a list of encodings on ``padding_side`` into one batch (tensors on CPU).

    ``"left"`` puts every row's last token in the last column, so the continuations line up at the
    end, but keeps each row's *first* token in column 0 (:func:`left_columns`): a row that began with
    padding would have query positions that may attend to no key at all, and CUDA's SDPA kernels
    return NaN for such rows (transformers 5 no longer unmasks them), which then spreads through the
    whole row. Positions count real tokens only (``cumsum(mask) - 1``), so every layout gives each
    real token the attention and position ids of the unpadded sequence: results agree for both
    padding sides. One exception is handled here: a sliding-window layer counts distance in columns,
    so when the batch is wider than ``window`` (:func:`sliding_window_of`) the padding goes right.

    ``"right"`` leaves the padding unmasked (``attention_mask`` all ones): a causal row never looks
    to its right, so its real tokens see exactly their sequence, and a pad query always has keys,
    also inside a sliding window, where a masked right padding would leave it none.
    """
    import torch

    if padding_side not in ("left", "right"):
        raise PawError(f"padding side {padding_side!r}: expected 'left' or 'right'")
    length = max(len(e.ids) for e in encoded) - 1
    if window is not None and length > window:
        padding_side = "right"
    shape = (len(encoded), length)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    targets = torch.full(shape, pad_id, dtype=torch.long)
    mask = torch.zeros(shape, dtype=torch.long)
    target_mask = torch.zeros(shape, dtype=torch.bool)
    for row, enc in enumerate(encoded):
        n = len(enc.ids) - 1
        cols = left_columns(n, length) if padding_side == "left" else torch.arange(n)
        ids = torch.tensor(enc.ids, dtype=torch.long)
        input_ids[row, cols] = ids[:-1]
        targets[row, cols] = ids[1:]
        mask[row, cols] = 1
        target_mask[row, cols[n - enc.n_cont:]] = True
    if padding_side == "right":
        mask[:] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return Batch(input_ids, mask, position_ids, targets, target_mask)


def left_columns(n: int, width: int):
    """The columns of a left-padded row of ``n`` tokens in a batch ``width`` wide: the first token in
    column 0, the others in the last ``n - 1`` columns, so no query position attends to nothing.

    >>> left_columns(3, 5).tolist(), left_columns(4, 4).tolist()
    ([0, 3, 4], [0, 1, 2, 3])
    """
    import torch

    if n <= 0:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.arange(width - n + 1, width)])


def sliding_window_of(model) -> int | None:
    """The width of the model's sliding-window attention, ``None`` when no layer slides.

    Such a layer masks keys by their distance in *columns*, which padding inside a row would change
    (:func:`make_batch`).
    """
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or window <= 0 or getattr(config, "use_sliding_window", True) is False:
        return None
    kinds = getattr(config, "layer_types", None)
    if kinds is not None and not any("sliding" in str(k) for k in kinds):
        return None
    return window


def pad_id_of(tokenizer) -> int:
    """The pad id, falling back to EOS, then 0 (padded positions are masked out anyway)."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    return 0


def max_length_of(model) -> int | None:
    """The longest sequence the model's position embeddings allow (``None`` when unknown): the first of
    ``n_positions`` (GPT-2), ``max_position_embeddings`` and ``n_ctx`` in its (text) config, as lm-eval's
    ``resolve_max_length`` looks."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return int(value)
    return None
