"""What :func:`paw.io.tokenizer.open_tokenizer` returns: one tokenizer seen through canonical bytes.

The module doc of :mod:`paw.io.tokenizer` explains the canonical form; this module only holds the
two types and their encoding methods, so both readers (rank tables, ``tokenizer.json``) build the
same object.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.bpe_tokenizer_json import tokenizer_json_doc

RANK_KINDS = ("tiktoken", "paw-bpe")  # kinds encoded by a tiktoken Encoding built from a rank table


@dataclass(frozen=True)
class SpecialToken:
    """A token outside the regular vocabulary: ``special`` (control) or an added text token.

    ``declared_role`` is the role ``tokenizer_config.json`` gives it (``bos_token: '<s>'``), or None;
    :func:`paw.vocab.roles.role_of` adds the roles known names imply.
    """

    id: int
    content: str
    special: bool
    declared_role: str | None = None


@dataclass
class TokenizerInfo:
    """One tokenizer, seen through canonical bytes.

    ``vocab[i]`` is the canonical bytes of id ``i`` for regular tokens and non-special added
    tokens, ``None`` for special tokens and unused ids. ``size`` is the id space (max id + 1),
    ``embedding_rows`` the model's embedding rows when a ``config.json`` sits beside the tokenizer.
    """

    spec: str
    kind: str  # 'byte-level' | 'sentencepiece' | 'wordpiece' | 'tiktoken' | 'paw-bpe' | 'other'
    vocab: list[bytes | None]
    specials: dict[int, SpecialToken]
    embedding_rows: int | None = None
    folder: Path | None = None  # where the tokenizer files live (copied by transplant)
    byte_fallback_ids: frozenset[int] = frozenset()
    unk_id: int | None = None
    backend: Any = field(default=None, repr=False)  # tokenizers.Tokenizer or tiktoken.Encoding
    config: dict | None = field(default=None, repr=False)  # the model config.json, when at hand
    pattern: str | None = None  # pre-tokenizer regex of a rank table (None: the whole text is one piece)
    # builds :attr:`fast` on first use (byte-level tokenizer.json only)
    make_fast: Callable[[], Any] | None = field(default=None, repr=False)

    # ----- sizes and lookups -------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def added_ids(self) -> list[int]:
        return sorted(i for i, s in self.specials.items() if not s.special)

    @property
    def special_ids(self) -> list[int]:
        return sorted(i for i, s in self.specials.items() if s.special)

    @property
    def regular_ids(self) -> list[int]:
        """Ids of the model vocabulary proper (not added, not special)."""
        return [i for i, b in enumerate(self.vocab) if b is not None and i not in self.specials]

    def token_bytes(self, token_id: int) -> bytes:
        """Canonical bytes of a regular/added token, the UTF-8 content of a special token."""
        if not 0 <= token_id < len(self.vocab):
            raise PawError(f"token id {token_id} outside the vocabulary (size {len(self.vocab)})", path=self.spec)
        b = self.vocab[token_id]
        if b is None:
            s = self.specials.get(token_id)
            return s.content.encode("utf-8") if s else b""
        return b

    @functools.cached_property
    def bytes_to_id(self) -> dict[bytes, int]:
        """Canonical bytes -> id; on duplicates a regular token beats a byte-fallback one, then lower id."""
        out: dict[bytes, int] = {}
        order = sorted(range(len(self.vocab)), key=lambda i: (i not in self.byte_fallback_ids, -i))
        for i in order:
            b = self.vocab[i]
            if b is not None:
                out[b] = i
        return out

    # ----- encoding -----------------------------------------------------------------------------
    @functools.cached_property
    def fast(self) -> Any:
        """A tiktoken encoder giving the same ids as ``backend`` (2-3x faster), or None.

        Built, and checked against ``backend``, on first use rather than when the tokenizer is
        opened: comparing vocabularies never pays for it.
        """
        return self.make_fast() if self.make_fast is not None else None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added BOS/EOS.

        Special-token strings written in the text (``<|endoftext|>``) are encoded as plain text by
        rank files and the tiktoken path, and as the special token by the ``tokenizers`` path.
        """
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self.kind in RANK_KINDS:
            return self.backend.encode_ordinary_batch(list(texts), num_threads=2)
        if self.fast is not None:
            return self.fast.encode_ordinary_batch(list(texts), num_threads=2)
        return [e.ids for e in self._hf_encode(list(texts))]

    def encode_with_ends(self, texts: Sequence[str]) -> tuple[list[list[int]], list[list[int]]]:
        """Ids and each token's end offset in **characters** of the text (for boundary agreement).

        Byte-level tokens that split a character end where that character ends, so boundaries are
        compared at character granularity for every tokenizer kind.
        """
        texts = list(texts)
        if self.kind in RANK_KINDS or self.fast is not None:
            ids = self.encode_batch(texts)
            return ids, [_char_ends(t, [len(self.vocab[i] or b"") for i in row]) for t, row in zip(texts, ids, strict=True)]
        encs = self._hf_encode(texts)
        return [e.ids for e in encs], [[o[1] for o in e.offsets] for e in encs]

    def _hf_encode(self, texts: list[str]) -> list:
        """``tokenizers``' encodings of ``texts``; what it cannot encode is one line naming the tokenizer
        and the first text it fails on (a Unigram model without ``unk_id`` raises on any character it
        has no piece for)."""
        try:
            return self.backend.encode_batch(texts, add_special_tokens=False)
        except Exception as err:  # tokenizers raises a bare Exception
            for text in texts:
                try:
                    self.backend.encode(text, add_special_tokens=False)
                except Exception:  # noqa: BLE001 (the same failure, to name the text)
                    shown = text if len(text) <= 60 else text[:57] + "..."
                    break
            else:
                shown = "?"
            said = (str(err).splitlines() or [type(err).__name__])[0][:200]
            raise PawError(f"the tokenizer cannot encode the text {shown!r} ({said}); give it a model with an "
                           "unknown token (unk_id) or text it covers", path=self.spec) from None

    def tokenizer_json(self) -> str:
        """The tokenizer as ``tokenizer.json`` text (rank tables are converted to byte-level BPE)."""
        if self.kind in RANK_KINDS:
            ranks = {b: i for i, b in enumerate(self.vocab) if b is not None and i not in self.specials}
            specials = {s.content: i for i, s in self.specials.items()}
            return json.dumps(tokenizer_json_doc(ranks, self.pattern, specials, path=self.spec), ensure_ascii=False)
        return self.backend.to_str()


def _char_ends(text: str, byte_lens: list[int]) -> list[int]:
    """Byte end offsets of tokens -> character end offsets (ceil to the next character end)."""
    import numpy as np

    ends = np.cumsum(byte_lens, dtype=np.int64)
    if text.isascii():
        return ends.tolist()
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    widths = 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)
    char_end_bytes = np.cumsum(widths)
    return (np.searchsorted(char_end_bytes, ends, side="left") + 1).tolist()
