"""Rank tables (tiktoken, PAW BPE) -> a ``tokenizers`` byte-level BPE, so transformers can load them.

A rank table lists token bytes by merge priority but not the merges themselves. The merge that
creates a token is recovered by running BPE on its bytes with every rank below its own allowed:
the last two parts left are the pair (the conversion transformers' ``TikTokenConverter`` uses).
``b'hello'`` with ranks ``{h,e,l,o,he,ll,hell,...}`` -> ``(b'hell', b'o')``.
"""

from __future__ import annotations

from paw.io.tokenizer import byte_decoder


def _bpe_parts(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        best, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best, best_rank = i, r
        if best < 0:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def recover_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list, in rank order, that rebuilds every multi-byte token of ``ranks``."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) > 1:
            parts = _bpe_parts(ranks, token, rank)
            if len(parts) == 2:
                merges.append((parts[0], parts[1]))
    return merges


def ranks_to_tokenizer(ranks: dict[bytes, int], pattern: str, specials: dict[str, int] | None = None):
    """A ``tokenizers.Tokenizer`` (byte-level BPE, ``ignore_merges`` like tiktoken) equal to the rank table."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    enc = {b: c for c, b in byte_decoder().items()}

    def show(b: bytes) -> str:
        return "".join(enc[x] for x in b)

    vocab = {show(b): r for b, r in ranks.items()}
    merges = [(show(a), show(b)) for a, b in recover_merges(ranks)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    from paw.bpe.patterns import to_oniguruma

    tok.pre_tokenizer = pre_tokenizers.Sequence([  # Oniguruma has no possessive repeats: spell them atomic
        pre_tokenizers.Split(Regex(to_oniguruma(pattern)), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    for content, _ in sorted((specials or {}).items(), key=lambda kv: kv[1]):
        tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
    return tok
