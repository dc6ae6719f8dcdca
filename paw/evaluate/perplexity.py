"""Perplexity of a model on documents, by rolling log-likelihood (lm-eval's ``loglikelihood_rolling``).

A document's tokens ``t_1 .. t_N`` are cut into windows of at most ``L`` (the model's context length)
predicted tokens, the first predicted from the prefix token (BOS, else EOS) and every later one from
the token before it, so that each token is predicted exactly once and the windows do not overlap
(lm-eval's ``get_rolling_token_windows(context_len=1)`` then ``make_disjoint_window``); only the last,
shorter window sees more context: the ``L + 1 - n`` tokens before its ``n`` predicted ones. With
``N = 5`` and ``L = 2``::

    [P] -> t1 t2        [t2] -> t3 t4        [t3 t4] -> t5

The document's log-likelihood is the sum over its windows, and over all documents (lm-eval's
wikitext task):

- ``word_perplexity = exp(-sum LL / sum words)``, words counted as ``len(re.split(r"\\s+", doc))``;
- ``byte_perplexity = exp(-sum LL / sum UTF-8 bytes)``;
- ``bits_per_byte = -sum LL / sum bytes / ln 2``;
- ``token_perplexity = exp(-sum LL / sum tokens)`` (tokenizer-dependent, so not comparable across
  tokenizers, which the first three are).

A document is tokenised as lm-eval's ``HFLM.tok_encode`` does: ``tokenizer.encode(text)`` with the
tokenizer's own special tokens (a Llama tokenizer's BOS, which is then scored after the prefix token,
as lm-eval scores it), none when the text already starts with the prefix token's text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from paw.errors import PawError
from paw.evaluate.encode import Encoded, max_length_of, pad_id_of
from paw.evaluate.mc import model_device, score_encoded

DEFAULT_MAX_LENGTH = 2048          # lm-eval's, when neither the config nor the tokenizer says
TOKENIZER_INFINITY = 1000000000000000019884624838656   # transformers' "model_max_length unset"


def rolling_windows(tokens: Sequence[int], *, prefix: int, max_length: int) -> list[Encoded]:
    """The windows that predict every token of ``tokens`` once: ``Encoded(context + predicted, n_predicted)``.

    >>> [(w.ids, w.n_cont) for w in rolling_windows([11, 12, 13, 14, 15], prefix=0, max_length=2)]
    [((0, 11, 12), 2), ((12, 13, 14), 2), ((13, 14, 15), 1)]
    """
    if max_length < 1:
        raise PawError(f"--max-length {max_length}: a window must hold at least one token")
    tokens = list(tokens)
    if not tokens:
        return []
    first = min(max_length, len(tokens))
    windows = [Encoded(tuple([prefix] + tokens[:first]), first)]
    predicted = first
    while predicted < len(tokens):
        n = min(len(tokens) - predicted, max_length)
        end = predicted + n
        context = tokens[end - max_length - 1:end - n]    # one token, or more for a short last window
        windows.append(Encoded(tuple(context + tokens[end - n:end]), n))
        predicted = end
    return windows


def context_length(model, tokenizer) -> int:
    """The window length lm-eval's ``HFLM.max_length`` finds: the config's ``n_positions``,
    ``max_position_embeddings`` or ``n_ctx``, else the tokenizer's ``model_max_length``, else 2048."""
    found = max_length_of(model)
    if found is not None:
        return found
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < TOKENIZER_INFINITY:
        return limit
    return DEFAULT_MAX_LENGTH


def prefix_token(tokenizer) -> int:
    """BOS, else EOS: what the first token of a document is predicted from (lm-eval's ``prefix_token_id``)."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise PawError("the tokenizer has neither BOS nor EOS: nothing to predict a document's first token from")


def document_tokens(tokenizer, text: str, prefix: int) -> list[int]:
    """``tokenizer.encode(text)`` as lm-eval's ``tok_encode``: without special tokens when the text already
    starts with the prefix token's text."""
    starts = tokenizer.decode([prefix])
    if starts and text.startswith(starts):
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(text))


def score_documents(model, tokenizer, documents: Sequence[str], *, max_length: int | None = None,
                    batch_size: int | str = 8, progress: bool = True) -> list[dict]:
    """Per document: ``loglikelihood`` (sum over its tokens), ``tokens``, ``words``, ``bytes``, ``windows``.

    ``max_length``: the window length, :func:`context_length` when not given.
    """
    length = max_length or context_length(model, tokenizer)
    prefix = prefix_token(tokenizer)
    windows, owner, rows = [], [], []
    for k, text in enumerate(documents):
        ids = document_tokens(tokenizer, text, prefix)
        mine = rolling_windows(ids, prefix=prefix, max_length=length)
        windows += mine
        owner += [k] * len(mine)
        rows.append({"index": k, "loglikelihood": 0.0, "tokens": len(ids), "words": count_words(text),
                     "bytes": len(text.encode("utf-8")), "windows": len(mine)})
    was_training = model.training
    model.eval()
    try:
        scores = score_encoded(model, windows, pad_id=pad_id_of(tokenizer), batch_size=batch_size,
                               device=model_device(model), progress=progress, description="scoring windows")
    finally:
        model.train(was_training)
    for k, (logprob, _) in zip(owner, scores, strict=True):
        rows[k]["loglikelihood"] += logprob
    return rows


def count_words(text: str) -> int:
    """lm-eval's ``count_words``: ``len(re.split(r"\\s+", text))`` (a trailing newline counts one more).

    >>> count_words("two words"), count_words("two words\\n")
    (2, 3)
    """
    return len(re.split(r"\s+", text))


def summarize(rows: Sequence[dict]) -> dict:
    """The metrics of the module docstring from :func:`score_documents`'s rows."""
    ll = math.fsum(r["loglikelihood"] for r in rows)
    words, n_bytes, tokens = (sum(r[k] for r in rows) for k in ("words", "bytes", "tokens"))
    return {
        "word_perplexity": _exp(-ll / words),
        "byte_perplexity": _exp(-ll / n_bytes),
        "bits_per_byte": -ll / n_bytes / math.log(2),
        "token_perplexity": _exp(-ll / tokens),
        "loglikelihood": ll,
        "n_documents": len(rows), "n_words": words, "n_bytes": n_bytes, "n_tokens": tokens,
        "n_windows": sum(r["windows"] for r in rows),
    }


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))
