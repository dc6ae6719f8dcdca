"""Compare two tokenizers: vocabularies on canonical bytes, and how they encode a corpus.

Vocabulary overlap uses the token's bytes (see :mod:`paw.io.tokenizer`), so ``Ġthe`` (byte-level)
and ``▁the`` (SentencePiece) count as one common token. With ``S`` and ``T`` the sets of canonical
bytes of regular and added tokens::

    jaccard = |S ∩ T| / |S ∪ T|        overlap coefficient = |S ∩ T| / min(|S|, |T|)

Encoding statistics are exact counts over the corpus lines; boundary agreement is the Jaccard
index of the two sets of token end positions (in characters) over all lines:
``'hello world'`` as ``hel|lo| world`` and ``hello| world`` -> ends {3,5,11} and {5,11} -> 2/3.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from paw.io.tokenizer import TokenizerInfo
from paw.vocab.roles import ROLES, role_of

__all__ = ["vocab_diff", "special_table", "display_token", "encoding_rows", "summarize_rows", "token_counts",
           "id_difference"]


def display_token(b: bytes) -> str:
    """Readable form of canonical bytes: JSON string when valid UTF-8 (``" the"``), else ``b'\\xe5'``."""
    try:
        return json.dumps(b.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
        return repr(b)


def id_difference(source: TokenizerInfo, target: TokenizerInfo) -> str | None:
    """The first id that stands for another token in ``target`` than in ``source``, said in words; None
    when every id means the same (same canonical bytes, same special tokens).

    A weight copied from one model to the other reads ids, not text, so one differing id is enough:
    swapping ``" the"`` (id 100) and ``"ab"`` (id 101) gives ``'id 100 is " the" in the source, "ab"
    in the target'``.
    """
    for i in range(max(source.size, target.size)):
        a, b = _meaning(source, i), _meaning(target, i)
        if a != b:
            return f"id {i} is {a} in the source, {b} in the target"
    return None


def _meaning(tok: TokenizerInfo, i: int) -> str:
    if i in tok.specials:
        return f"special {tok.specials[i].content!r}" if tok.specials[i].special else repr(tok.specials[i].content)
    token = tok.vocab[i] if i < tok.size else None
    return "unused" if token is None else display_token(token)


def _token_set(tok: TokenizerInfo) -> dict[bytes, int]:
    return tok.bytes_to_id


def vocab_diff(source: TokenizerInfo, target: TokenizerInfo) -> dict[str, Any]:
    """Sizes, common/only counts, Jaccard and overlap coefficient; plus the only-lists as ``(id, bytes)``."""
    s, t = _token_set(source), _token_set(target)
    common = s.keys() & t.keys()
    src_only = sorted((i, b) for b, i in s.items() if b not in t)
    tgt_only = sorted((i, b) for b, i in t.items() if b not in s)
    union = len(s) + len(t) - len(common)
    return {
        "common": len(common),
        "source_only": len(src_only),
        "target_only": len(tgt_only),
        "jaccard": len(common) / union if union else 1.0,
        "overlap_coefficient": len(common) / min(len(s), len(t)) if s and t else 0.0,
        "_source_only": src_only,
        "_target_only": tgt_only,
    }


def sizes(tok: TokenizerInfo) -> dict[str, Any]:
    return {"kind": tok.kind, "id_space": tok.size, "regular": len(tok.regular_ids), "added": len(tok.added_ids),
            "special": len(tok.special_ids), "distinct_bytes": len(tok.bytes_to_id),
            "byte_fallback": len(tok.byte_fallback_ids), "embedding_rows": tok.embedding_rows}


def special_table(source: TokenizerInfo, target: TokenizerInfo) -> dict[str, dict[str, list[str]]]:
    """``{role: {'source': [contents], 'target': [contents]}}`` for every role either side has."""
    out = {}
    for role in ROLES:
        pair = {name: [s.content for _, s in sorted(tok.specials.items()) if role_of(s) == role]
                for name, tok in (("source", source), ("target", target))}
        if pair["source"] or pair["target"]:
            out[role] = pair
    return out


def _flat(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ragged rows: values (N,) and the row index of each value (N,)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    values = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    return values, np.repeat(np.arange(len(rows)), lengths)


def token_counts(ids: Sequence[Sequence[int]], size: int) -> np.ndarray:
    """How often each id occurs in ``ids`` (rows of token ids): (size,) int64."""
    flat, _ = _flat(ids)
    return np.bincount(flat, minlength=size)[:size]


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """Unique values of an almost sorted array (token ends rise within a line): sort + adjacent diff."""
    x = np.sort(x, kind="stable")
    return x[np.concatenate([[True], x[1:] != x[:-1]])] if len(x) else x


def _per_row(mask: np.ndarray, row: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(row, weights=mask.astype(np.float64), minlength=n).astype(np.int64)


def _flags(tok: TokenizerInfo) -> tuple[np.ndarray, np.ndarray]:
    fallback = np.zeros(tok.size + 1, dtype=bool)
    fallback[list(tok.byte_fallback_ids)] = True
    unk = np.zeros(tok.size + 1, dtype=bool)
    if tok.unk_id is not None:
        unk[tok.unk_id] = True
    return fallback, unk


def encoding_rows(texts: Sequence[str], scripts: Sequence[str], source: TokenizerInfo, target: TokenizerInfo,
                  src: tuple[list[list[int]], list[list[int]]], tgt: tuple[list[list[int]], list[list[int]]]
                  ) -> list[dict[str, Any]]:
    """One row per text: bytes, words, tokens each side, boundary agreement, fallback and unknown counts.

    ``src``/``tgt`` are ``(ids, char_ends)`` from :meth:`TokenizerInfo.encode_with_ends`.
    """
    n = len(texts)
    chars = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
    offsets = np.concatenate([[0], np.cumsum(chars)[:-1]])
    per_side = {}
    for name, tok, (ids, ends) in (("source", source, src), ("target", target, tgt)):
        flat_ids, row = _flat(ids)
        flat_ends, _ = _flat(ends)
        fallback, unk = _flags(tok)
        flat_ids = np.clip(flat_ids, 0, tok.size)
        pos = _sorted_unique(flat_ends + offsets[row])  # global boundary positions
        per_side[name] = (np.bincount(row, minlength=n), _per_row(fallback[flat_ids], row, n),
                          _per_row(unk[flat_ids], row, n), pos)
    a, b = per_side["source"][3], per_side["target"][3]
    shared = a[np.isin(a, b, assume_unique=True, kind="sort")] if len(b) else a[:0]
    bounds = np.concatenate([offsets, [np.iinfo(np.int64).max]])
    row_of = lambda pos: np.bincount(np.maximum(np.searchsorted(bounds, pos - 1, side="right") - 1, 0),  # noqa: E731
                                     minlength=n)
    inter, src_b, tgt_b = row_of(shared), row_of(per_side["source"][3]), row_of(per_side["target"][3])
    rows = []
    for i, text in enumerate(texts):
        s_tok, t_tok = int(per_side["source"][0][i]), int(per_side["target"][0][i])
        union = int(src_b[i] + tgt_b[i] - inter[i])
        rows.append({
            "line": i, "script": scripts[i], "bytes": len(text.encode("utf-8")), "words": len(text.split()),
            "source_tokens": s_tok, "target_tokens": t_tok,
            "length_ratio": round(t_tok / s_tok, 6) if s_tok else None,
            "boundary_agreement": round(int(inter[i]) / union, 6) if union else 1.0,
            "boundaries_shared": int(inter[i]), "boundaries_union": union,
            "source_byte_fallback": int(per_side["source"][1][i]), "target_byte_fallback": int(per_side["target"][1][i]),
            "source_unknown": int(per_side["source"][2][i]), "target_unknown": int(per_side["target"][2][i]),
        })
    return rows


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tot = {k: sum(r[k] for r in rows) for k in ("bytes", "words", "source_tokens", "target_tokens",
                                                "boundaries_shared", "boundaries_union", "source_byte_fallback",
                                                "target_byte_fallback", "source_unknown", "target_unknown")}
    div = lambda a, b: round(a / b, 6) if b else None  # noqa: E731
    return {
        "texts": len(rows), "bytes": tot["bytes"], "words": tot["words"],
        "source_tokens": tot["source_tokens"], "target_tokens": tot["target_tokens"],
        "length_ratio": div(tot["target_tokens"], tot["source_tokens"]),
        "source_bytes_per_token": div(tot["bytes"], tot["source_tokens"]),
        "target_bytes_per_token": div(tot["bytes"], tot["target_tokens"]),
        "source_tokens_per_word": div(tot["source_tokens"], tot["words"]),
        "target_tokens_per_word": div(tot["target_tokens"], tot["words"]),
        "boundary_agreement": div(tot["boundaries_shared"], tot["boundaries_union"]),
        "source_byte_fallback_rate": div(tot["source_byte_fallback"], tot["source_tokens"]),
        "target_byte_fallback_rate": div(tot["target_byte_fallback"], tot["target_tokens"]),
        "source_unknown_rate": div(tot["source_unknown"], tot["source_tokens"]),
        "target_unknown_rate": div(tot["target_unknown"], tot["target_tokens"]),
    }


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``{'overall': {...}, 'by_script': {script: {...}}}`` from :func:`encoding_rows`."""
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(r["script"], []).append(r)
    return {"overall": _summary(rows), "by_script": {s: _summary(g) for s, g in sorted(groups.items())}}
