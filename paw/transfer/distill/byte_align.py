"""Where two tokenizations of one continuation agree: positions at which both models have read the same bytes.

Distillation across tokenizers cannot compare next-token distributions position by position: the
teacher and the student cut the text differently. But wherever both cuts fall on the same byte
(after " likes the colour", say), both models have read exactly the same text and predict what
comes next; over the tokens both vocabularies hold (same canonical bytes, ``paw align-vocab``'s
``exact`` pairs) their two distributions can be matched. That is the byte-aligned part of
cross-tokenizer distillation (in the spirit of Boizard et al.'s universal logit distillation, 2024):
it carries the teacher's ranking of every next word it shares with the student, not only its greedy
choice, which is all that sequence-level training on the teacher's text keeps.

Pure functions over token byte strings (:attr:`paw.io.tokenizer_info.TokenizerInfo.vocab`).
"""

from __future__ import annotations

from collections.abc import Sequence


def continuation_cuts(ids: Sequence[int], n_cont: int, vocab: Sequence[bytes | None]) -> tuple[bytes, dict[int, int]]:
    """``(continuation bytes, {bytes of it read: position})`` for one encoded sequence.

    ``ids`` holds context + continuation, the last ``n_cont`` being the continuation. Position ``p``
    (its logits predict token ``p + 1``) counts when token ``p + 1`` is a continuation token; it has
    read that many bytes of the continuation. Tokens without bytes (special tokens) read nothing, so
    of several positions at one cut the last one, right before the next real token, is kept.

    >>> continuation_cuts([7, 0, 1, 2], 2, [b" a", b"b", b" c", b"", b"", b"", b"", b"<"])
    (b'b c', {0: 1, 1: 2})
    """
    n = len(ids)
    cont = ids[n - n_cont:]
    pieces = [vocab[i] if 0 <= i < len(vocab) and vocab[i] is not None else b"" for i in cont]
    cuts: dict[int, int] = {}
    read = 0
    for j, piece in enumerate(pieces):
        cuts[read] = n - n_cont + j - 1
        read += len(piece)
    return b"".join(pieces), cuts


def aligned_positions(student: tuple[bytes, dict[int, int]], teacher: tuple[bytes, dict[int, int]]
                      ) -> list[tuple[int, int]]:
    """``(student position, teacher position)`` at the cuts both share, in text order; none when the
    two continuations are not the same bytes (a normaliser changed the text: nothing lines up then).

    >>> aligned_positions((b"ab c", {0: 4, 2: 5, 4: 6}), (b"ab c", {0: 6, 1: 7, 2: 8}))
    [(4, 6), (5, 8)]
    """
    if student[0] != teacher[0]:
        return []
    return [(student[1][cut], teacher[1][cut]) for cut in sorted(student[1].keys() & teacher[1].keys())]


def spread(values: Sequence[float], pieces_from: Sequence[bytes], pieces_to: Sequence[bytes]) -> list[float] | None:
    """Per-token ``values`` of one tokenization moved onto another of the same bytes, by byte overlap.

    Each ``from`` token's value is shared among the ``to`` tokens its bytes overlap, in proportion
    to the overlap (the total is kept); a token without bytes (a special token) gives its value to
    the ``to`` token that starts where it stands. None when the two do not spell the same bytes.

    >>> spread([2.0, 4.0], [b"ab", b"cd"], [b"a", b"bc", b"d"])
    [1.0, 3.0, 2.0]
    """
    if b"".join(pieces_from) != b"".join(pieces_to) or not pieces_to:
        return None
    ends, total = [], 0
    for piece in pieces_to:
        total += len(piece)
        ends.append(total)
    out = [0.0] * len(pieces_to)
    start = 0
    for value, piece in zip(values, pieces_from, strict=True):
        stop = start + len(piece)
        k = next((i for i, e in enumerate(ends) if e > start), len(ends) - 1)
        if stop == start:
            out[k] += value
        while start < stop:
            begin = ends[k - 1] if k else 0
            share = min(stop, ends[k]) - max(start, begin)
            out[k] += value * share / len(piece)
            start = min(stop, ends[k])
            k += 1
    return out
