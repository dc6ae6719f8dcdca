"""What every byte-level BPE file is read into, and the checks all three readers make.

:class:`BpeFile` is a rank table in tiktoken's sense (``{token_bytes: rank}``), whichever spelling
it came from: a PAW ``.model`` (:mod:`paw.io.bpe_paw_model`), a tiktoken rank file
(:mod:`paw.io.bpe_tiktoken`) or a byte-level BPE ``tokenizer.json`` (:mod:`paw.io.bpe_tokenizer_json`).
:func:`paw.io.bpe_files.read_bpe` opens any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from paw.errors import PawError

MAX_TOKEN_ID = 2**32 - 1  # tiktoken's ranks and tokenizers' ids are u32


@dataclass
class BpeFile:
    """A byte-level BPE as tiktoken sees it.

    ``mergeable_ranks``: ``{b"!": 0, ..., b" the": 279, ...}``; ``pattern``: pre-tokenization regex
    or ``None``; ``special_tokens``: ``{"<|endoftext|>": 100257}``; ``kind``: ``'paw'``,
    ``'tiktoken'`` or ``'hf'``; ``merges``: the learned merge list when the file has one.
    """

    mergeable_ranks: dict[bytes, int]
    pattern: str | None
    special_tokens: dict[str, int]
    kind: str
    merges: list[tuple[bytes, bytes]] | None = field(default=None, repr=False)


def natural_number(text: str, limit: int = MAX_TOKEN_ID) -> int | None:
    """``int(text)`` for ASCII digits naming ``0..limit``, else ``None`` (no sign, no ``'²'``, no 5000 digits)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(limit)) or int(text) > limit:
        return None
    return int(text)


def check_specials(path: Path, ranks: dict[bytes, int], specials: dict[str, int]) -> None:
    """Special ids are distinct 32-bit ids that no ordinary token holds."""
    owner = {rank: token for token, rank in ranks.items()}
    seen: dict[int, str] = {}
    for content, tid in specials.items():
        if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid <= MAX_TOKEN_ID:
            raise PawError(f"special token {content!r} has id {tid!r}, not an integer in 0..{MAX_TOKEN_ID}",
                           path=path)
        if tid in owner:
            raise PawError(f"special token {content!r} has id {tid}, which the ordinary token "
                           f"{owner[tid]!r} already holds", path=path)
        if tid in seen:
            raise PawError(f"special tokens {seen[tid]!r} and {content!r} share id {tid}", path=path)
        seen[tid] = content
