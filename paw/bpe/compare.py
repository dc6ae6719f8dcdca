"""How well does a tokenizer compress a text? Tokens, bytes per token, tokens per word.

Bytes per token is the usual compression figure (higher is better, and it does not depend on how
a language writes words). Tokens per word answers "how many tokens does a word cost": words are
runs of letters, digits and marks, except that every Han, kana or Hangul character counts as one
word, because Chinese and Japanese do not put spaces between words (so for Chinese the figure reads
"tokens per character").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

_WORD = r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]|[\p{L}\p{N}\p{M}]+"


@dataclass
class Compression:
    """``tokens`` for ``n_bytes`` UTF-8 bytes and ``words`` words of one text."""

    tokens: int
    n_bytes: int
    chars: int
    words: int

    @property
    def bytes_per_token(self) -> float:
        return self.n_bytes / self.tokens if self.tokens else 0.0

    @property
    def tokens_per_word(self) -> float:
        return self.tokens / self.words if self.words else 0.0

    def row(self) -> dict:
        return {**asdict(self), "bytes_per_token": round(self.bytes_per_token, 4),
                "tokens_per_word": round(self.tokens_per_word, 4)}


def count_words(text: str) -> int:
    """``count_words("Hello, 世界 42") == 4`` (Hello, 世, 界, 42)."""
    import regex

    return sum(1 for _ in regex.finditer(_WORD, text))


def compression(ids: list[int], text: str) -> Compression:
    return Compression(len(ids), len(text.encode("utf-8")), len(text), count_words(text))
