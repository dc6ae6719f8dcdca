"""Rank tables and merge lists: two spellings of one byte-level BPE.

tiktoken stores a BPE as ``mergeable_ranks``: ``{token_bytes: rank}``, rank 0..255 for single bytes
and one rank per learned token in the order it was learned. Hugging Face and minbpe store the list
of merges ``[(left, right), ...]``. A merge list gives ranks (the token made by merge ``i`` comes
next), and ranks give merges: the merge that makes token ``t`` is the last step of encoding ``t``
with only the ranks below ``rank(t)``.
"""

from __future__ import annotations


def bpe_parts(piece: bytes, ranks: dict[bytes, int], *, max_rank: int | None = None) -> list[bytes]:
    """tiktoken's merge rule on one piece: merge the adjacent pair whose join has the lowest rank,
    leftmost first, until no join is a token (of rank below ``max_rank``).

    ``bpe_parts(b"abc", {b"a": 0, b"b": 1, b"c": 2, b"bc": 3, b"abc": 4}, max_rank=4) == [b"a", b"bc"]``
    """
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, best_rank = -1, None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (max_rank is None or rank < max_rank) and (best_rank is None or rank < best_rank):
                best, best_rank = i, rank
        if best < 0:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """One merge per multi-byte token, in rank order (tokens BPE cannot build are skipped)."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = bpe_parts(token, ranks, max_rank=rank)
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


def ranks_from_merges(merges: list[tuple[bytes, bytes]], byte_order: tuple[int, ...]) -> dict[bytes, int]:
    """Ranks 0..255 for ``byte_order``, then one new rank per merge that makes a new token.

    ``ranks_from_merges([(b"a", b"b")], order)[b"ab"] == 256``. A merge whose result is already a
    token (Hugging Face's trainer can learn ``(a, bc)`` after ``(ab, c)``) adds no rank.
    """
    ranks = {bytes([b]): i for i, b in enumerate(byte_order)}
    for left, right in merges:
        ranks.setdefault(left + right, len(ranks))
    return ranks


def all_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split ``(l, r)`` of every token with both halves tokens, ordered by the token's rank and
    then by the halves' ranks: the merge list that makes Hugging Face's BPE encode exactly like
    tiktoken (the same list ``transformers``' TikTokenConverter writes)."""
    merges = []
    for token in sorted(ranks, key=ranks.__getitem__):
        local = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        local.sort(key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))
        merges.extend(local)
    return merges
