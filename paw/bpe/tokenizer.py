"""Train a whole tokenizer from texts: pre-token counts, merges, special tokens after them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from paw.bpe.encoder import BpeEncoder
from paw.bpe.pretokenize import count_pretokens
from paw.bpe.train import train_bpe
from paw.errors import PawError


@dataclass
class TrainedBpe:
    """What ``paw bpe train`` writes: ranks (bytes then learned tokens), the merges that made them,
    the pattern and the special tokens (ids right after the last learned token, as in cl100k)."""

    mergeable_ranks: dict[bytes, int]
    merges: list[tuple[bytes, bytes]]
    pattern: str | None
    special_tokens: dict[str, int]
    merge_counts: list[int]

    def encoder(self) -> BpeEncoder:
        return BpeEncoder(self.mergeable_ranks, self.pattern, self.special_tokens)


MAX_VOCAB = 2**31 - 1  # ids are int32 in tiktoken and u32 in Hugging Face tokenizers


def check_vocab_size(vocab_size: int, special_tokens: Sequence[str]) -> None:
    """Refuse a size that cannot hold the 256 bytes and the special tokens."""
    n = len(set(special_tokens))
    if vocab_size > MAX_VOCAB:
        raise PawError(f"--vocab-size {vocab_size} is above {MAX_VOCAB:,}: token ids are 32-bit in every "
                       "tokenizer library")
    if vocab_size < 256 + n:
        raise PawError(f"--vocab-size {vocab_size} is too small: a byte-level BPE needs 256 byte tokens "
                       f"+ {n} special tokens = {256 + n} at least")


def train_tokenizer(texts: Sequence[str], vocab_size: int, *, pattern: str | None,
                    special_tokens: Sequence[str] = (), min_frequency: int = 0, processes: int | None = None,
                    track: Callable[[Iterable[int], int], Iterable[int]] | None = None) -> TrainedBpe:
    """Learn a byte-level BPE of ``vocab_size`` ids in all (256 bytes + merges + special tokens).

    ``pattern`` is a regex (see :mod:`paw.bpe.patterns`); special tokens never take part in
    training, like Hugging Face's ``BpeTrainer``, which counts them in the vocabulary size too.
    """
    specials = list(dict.fromkeys(special_tokens))
    check_vocab_size(vocab_size, specials)
    counts = count_pretokens(texts, pattern, processes=processes)
    if not counts:
        raise PawError("the corpus is empty (no text to learn from)")
    result = train_bpe(counts, vocab_size - len(specials), min_frequency=min_frequency, track=track)
    n = len(result.ranks)
    return TrainedBpe(result.ranks, result.merges, pattern, {t: n + i for i, t in enumerate(specials)},
                      result.counts)
