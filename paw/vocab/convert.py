"""Rank tables (tiktoken, PAW BPE) -> a ``tokenizers`` byte-level BPE, so transformers can load them.

A rank table lists token bytes by merge priority but not the merges themselves. The merge that
creates a token is recovered by running BPE on its bytes with every rank below its own allowed:
the last two parts left are the pair (the conversion transformers' ``TikTokenConverter`` uses).
``b'hello'`` with ranks ``{h,e,l,o,he,ll,hell,...}`` -> ``(b'hell', b'o')``.
"""

from __future__ import annotations

from paw.bpe.ranks import merges_from_ranks
from paw.io.tokenizer import byte_decoder


def ranks_to_tokenizer(ranks: dict[bytes, int], pattern: str, specials: dict[str, int] | None = None):
    """A ``tokenizers.Tokenizer`` (byte-level BPE, ``ignore_merges`` like tiktoken) equal to the rank table."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    enc = {b: c for c, b in byte_decoder().items()}

    def show(b: bytes) -> str:
        return "".join(enc[x] for x in b)

    vocab = {show(b): r for b, r in ranks.items()}
    merges = [(show(a), show(b)) for a, b in merges_from_ranks(ranks)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    from paw.bpe.patterns import to_oniguruma

    tok.pre_tokenizer = pre_tokenizers.Sequence([  # Oniguruma has no possessive repeats: spell them atomic
        pre_tokenizers.Split(Regex(to_oniguruma(pattern)), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    for content, _ in sorted((specials or {}).items(), key=lambda kv: kv[1]):
        tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
    return tok
