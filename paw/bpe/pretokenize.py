r"""Count unique pre-tokens of a corpus on every core: ``{b" the": 51234, b"ing": 20011, ...}``.

Training needs only these counts, never the running text. A long text is cut into chunks for the
worker processes only where every built-in pattern is sure to end a piece anyway, so the counts are
exactly those of splitting each whole text: right after a ``\n`` that has a non-space character on
both sides (``"x)\nfoo"`` -> ``"x)\n" | "foo"``). No built-in rule lets a piece run from a newline
into a non-space character, and because the character before the newline is not a space, the
whitespace rules with a look-ahead (``\s+(?!\S)``, ``\s++$``) cut the chunk's end the same way
they cut the whole text. Custom patterns are not cut; their texts go to the processes whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from paw.bpe.parallel import map_chunks
from paw.bpe.patterns import compile_pattern
from paw.bytelevel.patterns import PATTERNS

_CHUNK_CHARS = 1 << 20


def cut_text(text: str, pattern: str | None, *, size: int = _CHUNK_CHARS) -> list[str]:
    """Cut ``text`` into pieces of about ``size`` characters at safe points (see module doc).

    ``"".join(cut_text(t, p)) == t`` always; a text without safe points stays whole.
    """
    if pattern is None or pattern not in PATTERNS.values() or len(text) <= size:
        return [text]
    chunks, start = [], 0
    while len(text) - start > size:
        cut = _safe_cut(text, start + size)
        chunks.append(text[start:cut])
        start = cut
    if start < len(text):
        chunks.append(text[start:])
    return chunks


def _safe_cut(text: str, pos: int) -> int:
    """The first safe cut at or after ``pos`` (or the end of the text)."""
    while (j := text.find("\n", pos)) >= 0:
        if 0 < j < len(text) - 1 and not text[j - 1].isspace() and not text[j + 1].isspace():
            return j + 1
        pos = j + 1
    return len(text)


def _count_worker(pattern: str | None, texts: list[str]) -> Counter:
    counts: Counter = Counter()
    if pattern is None:
        counts.update(t for t in texts if t)
    else:
        split = compile_pattern(pattern).findall
        for text in texts:
            counts.update(split(text))
    return counts


def count_pretokens(texts: Sequence[str], pattern: str | None, *, processes: int | None = None) -> dict[bytes, int]:
    """Occurrences of every piece of every text, keyed by the piece's UTF-8 bytes.

    ``count_pretokens(["hi hi"], PATTERNS["gpt2"]) == {b"hi": 1, b" hi": 1}``. With
    ``pattern=None`` each text is one piece.
    """
    chunks = [c for text in texts for c in cut_text(text, pattern)]
    total: Counter = Counter()
    for part in map_chunks(_count_worker, chunks, state=pattern, processes=processes, chunks_per_process=2):
        total.update(part)
    return {piece.encode("utf-8", errors="surrogatepass"): n for piece, n in total.items()}
