"""Encode and decode with a byte-level BPE, following tiktoken's rules exactly.

Rules (tiktoken ``src/lib.rs``, ``_educational.py``):

1. Special tokens: text is refused if it contains a special token that is not allowed; allowed
   ones are cut out and emitted as their ids; the text between them is encoded ordinarily.
2. The pattern cuts ordinary text into pieces (``"Hello world"`` -> ``["Hello", " world"]``).
3. A piece whose UTF-8 bytes are a token is that one token.
4. Otherwise start from single bytes and repeatedly join the adjacent pair whose join has the
   lowest rank (leftmost on ties) until no join is a token.

Speed in plain Python comes from three things: pieces repeat (Zipf), so a dict from piece to ids
answers most of them without any BPE (the dict's ``__missing__`` runs rule 3/4 once per new piece);
the per-piece loop runs inside ``map`` and ``chain``; long pieces (runs of spaces, long numbers
without a digit limit) use a heap over a linked list, O(n log n) instead of O(n^2).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Sequence
from itertools import chain, repeat
from typing import Literal

from paw.bpe.parallel import map_processes
from paw.bpe.patterns import compile_pattern
from paw.bpe.pretokenize import cut_text
from paw.errors import PawError

_SHORT = 48  # pieces up to this many bytes use the simple O(n^2) scan, longer ones the heap


def bpe_ranks(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """Rule 4 on one piece -> token ids: ``bpe_ranks(b"hello", cl100k) == [15339]``.

    ``joins[i]`` is the rank of ``parts[i] + parts[i + 1]``; after a merge only the two joins
    beside it change, and ``min``/``index`` scan the list in C (tiktoken's ``_byte_pair_merge``).
    """
    if len(piece) > _SHORT:
        return _bpe_heap(piece, ranks)
    get = ranks.get
    parts = list(map(_BYTES.__getitem__, piece))
    joins = list(map(get, map(bytes.__add__, parts, parts[1:]), repeat(_NONE)))
    while joins:
        best = min(joins)
        if best == _NONE:
            break
        i = joins.index(best)  # leftmost of the lowest rank
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
        del joins[i]
        if i < len(joins):
            joins[i] = get(parts[i] + parts[i + 1], _NONE)
        if i > 0:
            joins[i - 1] = get(parts[i - 1] + parts[i], _NONE)
    return [ranks[p] for p in parts]


_BYTES = [bytes([b]) for b in range(256)]
_NONE = float("inf")  # "this join is not a token"


def _bpe_heap(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """Rule 4 with a heap of ``(rank, start, end)`` candidate joins over a linked list of parts.

    A part is named by its start offset; ``nxt[s]`` is where the part starting at ``s`` ends. An
    entry is stale when its left part was absorbed or its right part has grown since it was pushed.
    """
    n = len(piece)
    nxt, prv, alive = list(range(1, n + 1)), list(range(-1, n - 1)), [True] * n
    heap = [(r, i, i + 2) for i in range(n - 1) if (r := ranks.get(piece[i:i + 2])) is not None]
    heapq.heapify(heap)
    while heap:
        _, s, e = heapq.heappop(heap)
        m = nxt[s]
        if not alive[s] or m >= n or nxt[m] != e:
            continue
        alive[m] = False
        nxt[s] = e
        if e < n:
            prv[e] = s
            if (r := ranks.get(piece[s:nxt[e]])) is not None:
                heapq.heappush(heap, (r, s, nxt[e]))
        if (p := prv[s]) >= 0 and (r := ranks.get(piece[p:e])) is not None:
            heapq.heappush(heap, (r, p, e))
    out, s = [], 0
    while s < n:
        out.append(ranks[piece[s:nxt[s]]])
        s = nxt[s]
    return out


class _PieceCache(dict):
    """``cache[piece] -> tuple of ids``, filled on first sight by rules 3 and 4."""

    def __init__(self, ranks: dict[bytes, int], limit: int):
        super().__init__()
        self.ranks, self.limit = ranks, limit

    def __missing__(self, piece: str) -> tuple[int, ...]:
        data = piece.encode("utf-8", errors="surrogatepass")
        rank = self.ranks.get(data)
        ids = (rank,) if rank is not None else tuple(bpe_ranks(data, self.ranks))
        if len(self) >= self.limit:
            self.clear()  # bounded memory on endless streams; the common pieces come straight back
        self[piece] = ids
        return ids


class BpeEncoder:
    """A byte-level BPE: ``BpeEncoder(ranks, pattern, special_tokens).encode("hi")``.

    ``ranks``: ``{token_bytes: id}`` (tiktoken's ``mergeable_ranks``); ``pattern``: regex or
    ``None`` (whole text is one piece); ``special_tokens``: ``{"<|endoftext|>": 100257}``.
    """

    def __init__(self, ranks: dict[bytes, int], pattern: str | None, special_tokens: dict[str, int] | None = None,
                 *, cache_size: int = 1 << 20):
        self.ranks, self.pattern = ranks, pattern
        self.special_tokens = dict(special_tokens or {})
        self._decoder = {i: t for t, i in ranks.items()}
        self._decoder.update({i: s.encode("utf-8") for s, i in self.special_tokens.items()})
        self._split = compile_pattern(pattern).findall if pattern else (lambda text: [text] if text else [])
        self._cache = _PieceCache(ranks, cache_size)

    @property
    def n_vocab(self) -> int:
        return max(self._decoder, default=-1) + 1

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text`` with special tokens treated as plain text."""
        return list(chain.from_iterable(map(self._cache.__getitem__, self._split(text))))

    def encode(self, text: str, *, allowed_special: Literal["all"] | Collection[str] = frozenset(),
               disallowed_special: Literal["all"] | Collection[str] = "all") -> list[int]:
        """Like ``tiktoken.Encoding.encode``: a disallowed special token in ``text`` is an error;
        allowed ones become their ids. ``encode("a<|endoftext|>", allowed_special="all")``."""
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        disallowed = set(self.special_tokens) - allowed if disallowed_special == "all" else set(disallowed_special)
        if disallowed and (found := _special_regex(disallowed).search(text)):
            raise PawError(f"text contains the special token {found.group()!r}, which is not allowed "
                           "(allow it with --allowed-special / allowed_special=)")
        if not allowed:
            return self.encode_ordinary(text)
        ids, start = [], 0
        for match in _special_regex(allowed).finditer(text):
            ids += self.encode_ordinary(text[start:match.start()])
            ids.append(self.special_tokens[match.group()])
            start = match.end()
        return ids + self.encode_ordinary(text[start:])

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        try:
            return b"".join(self._decoder[i] for i in ids)
        except KeyError as exc:
            raise PawError(f"token id {exc.args[0]} is not in this vocabulary (size {self.n_vocab})") from None

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Ids -> text; a sequence that cuts a UTF-8 character shows U+FFFD (``errors='replace'``)."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def token_bytes(self, token_id: int) -> bytes:
        return self.decode_bytes([token_id])

    def encode_batch(self, texts: Sequence[str], *, processes: int | None = None, **encode_kwargs) -> list[list[int]]:
        """``encode`` each text, spread over ``processes`` worker processes (default: every core)."""
        return map_processes(_encode_worker, texts, state=(self, encode_kwargs), processes=processes)


    def encode_large(self, text: str, *, processes: int | None = None, chunk_chars: int = 1 << 20,
                     **encode_kwargs) -> list[int]:
        """``encode`` one long text on every core: cut it where no piece can cross
        (:func:`paw.bpe.pretokenize.cut_text`), encode the chunks in parallel, join the ids.
        The ids are exactly those of ``encode(text)``."""
        if any("\n" in t for t in self.special_tokens):  # such a token could straddle a cut
            return self.encode(text, **encode_kwargs)
        chunks = cut_text(text, self.pattern, size=chunk_chars)
        if len(chunks) == 1 or processes == 1:
            return self.encode(text, **encode_kwargs)
        return [i for ids in self.encode_batch(chunks, processes=processes, **encode_kwargs) for i in ids]


def _encode_worker(state, texts: list[str]) -> list[list[int]]:
    encoder, kwargs = state
    return [encoder.encode(t, **kwargs) for t in texts]


_SPECIAL_CACHE: dict[frozenset, object] = {}


def _special_regex(tokens: Collection[str]):
    """One alternation of the escaped tokens, longest first (``<|a|>x`` before ``<|a|>``)."""
    import regex

    key = frozenset(tokens)
    if key not in _SPECIAL_CACHE:
        _SPECIAL_CACHE[key] = regex.compile("|".join(regex.escape(t) for t in sorted(key, key=lambda t: (-len(t), t))))
    return _SPECIAL_CACHE[key]
