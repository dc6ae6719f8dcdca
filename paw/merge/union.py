"""Merges across vocabularies (``--vocab-policy union``, mergekit's ``tokenizer: source: union``).

The union vocabulary is the base's tokens in the base's order, then every token a model has and the
base lacks (models in order, each in its own id order). Each model's embedding and head matrices are
then laid out on the union ids (mergekit's rules): a model's own row where it has the token; else a
default row taken from the only model that has it, or from the base when the base has it, or the
mean over the models that have it (zero when none does). Per-token overrides name the source (a
model, ``zero``, or a model's row of another token) and ``force`` it on every model. The merge
method then runs on these matrices as on any tensor, so a token only one fine-tune added keeps that
fine-tune's row (every task vector is zero there) and shared rows merge as usual.

    tables: base {a: 0, b: 1}, ft {a: 0, b: 1, <|im|>: 2}  ->  union [a, b, <|im|>],
    perms base [0, 1, -1], ft [0, 1, 2]; the base's row for <|im|> is ft's row 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paw.errors import PawError

ZERO = "zero"


@dataclass
class TokenOverride:
    """Where a token's default row comes from: ``source`` a member index, ``"zero"``, or
    ``(member index, row id)``; ``force``: every member takes it, its own row or not."""

    source: Any = None
    force: bool = False


@dataclass
class UnionVocab:
    """``tokens``: union id -> token; ``perms[c][u]``: member c's row for union id u, or -1;
    ``new``: the ``added_tokens`` records for ids past the base's; ``rows``: output rows (padded)."""

    tokens: list[str]
    perms: list[list[int]]
    new: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    from_member: dict[str, int] = field(default_factory=dict)   # new token -> member it came from
    member_ids: list[dict[str, int]] = field(default_factory=list)  # each member's token -> id


def build_union(tables: Sequence[Any], rows: Sequence[int], *, pad_to_multiple_of: int | None = None) -> UnionVocab:
    """The union of the members' token tables (member 0 first: the base, or the first model).

    ``tables[c]`` has ``ids`` (token -> id) and ``added`` (token -> added-token record); ``rows[c]``
    is member c's embedding row count (ids at or past it are ignored, as mergekit does).
    """
    tokens: dict[str, int] = {}
    new: list[dict[str, Any]] = []
    origin: dict[str, int] = {}
    for c, (table, limit) in enumerate(zip(tables, rows, strict=True)):
        for token, i in sorted(table.ids.items(), key=lambda kv: kv[1]):
            if i >= limit or token in tokens:
                continue
            tokens[token] = len(tokens)
            if c > 0:
                record = table.added.get(token) or {"content": token, "single_word": False, "lstrip": False,
                                                    "rstrip": False, "normalized": True, "special": False}
                new.append({"id": tokens[token], **record})
                origin[token] = c
    order = list(tokens)
    perms = [[t.ids[tok] if tok in t.ids and t.ids[tok] < limit else -1 for tok in order]
             for t, limit in zip(tables, rows, strict=True)]
    total = len(order)
    if pad_to_multiple_of and total % pad_to_multiple_of:
        total += pad_to_multiple_of - total % pad_to_multiple_of
    return UnionVocab(order, perms, new, total, origin, [dict(t.ids) for t in tables])


def token_at(union: UnionVocab, u: int) -> str:
    return union.tokens[u]


def _sources(union: UnionVocab, overrides: Mapping[str, TokenOverride], base_given: bool) -> list[Any]:
    """Per union id, where the default row comes from (mergekit's ``assign_embedding_sources``)."""
    out: list[Any] = []
    for u, token in enumerate(union.tokens):
        if token in overrides and overrides[token].source is not None:
            out.append(overrides[token].source)
            continue
        present = [c for c, p in enumerate(union.perms) if p[u] >= 0]
        if len(present) == 1:
            out.append(present[0])
        elif not present:
            out.append(ZERO)
        elif base_given and union.perms[0][u] >= 0:
            out.append(0)
        else:
            out.append(None)  # the mean over the members that have it
    return out


def permuted_matrices(union: UnionVocab, mats: Sequence[Any], *, overrides: Mapping[str, TokenOverride] | None = None,
                      base_given: bool = True) -> list[Any]:
    """Each member's vocabulary matrix (rows = its ids, shape ``(V_c, H)``) on the union ids: ``(rows, H)``.

    Padding rows past the union's tokens take the mean of the real rows (mergekit's choice).
    """
    import torch

    overrides = overrides or {}
    sources = _sources(union, overrides, base_given)
    n, h = len(union.tokens), mats[0].shape[1]
    perms = torch.tensor(union.perms, dtype=torch.long)
    default = torch.zeros((n, h), dtype=mats[0].dtype, device=mats[0].device)
    for u, src in enumerate(sources):
        if src == ZERO:
            continue
        if isinstance(src, tuple):  # (member, row id) or (member, token string)
            row = src[1] if isinstance(src[1], int) else union.member_ids[src[0]].get(src[1], -1)
            if not 0 <= row < mats[src[0]].shape[0]:
                raise PawError(f"tokenizer.tokens.{token_at(union, u)}: the source token {src[1]!r} is not in "
                               f"that model's vocabulary")
            default[u] = mats[src[0]][row]
        elif isinstance(src, int):
            default[u] = mats[src][int(perms[src, u])]
        else:
            have = [c for c in range(len(mats)) if perms[c, u] >= 0]
            default[u] = sum(mats[c][int(perms[c, u])] for c in have) / len(have)
    forced = torch.tensor([bool(overrides.get(t, TokenOverride()).force) for t in union.tokens])
    out = []
    for c, mat in enumerate(mats):
        rows = torch.zeros((union.rows, h), dtype=mat.dtype, device=mat.device)
        rows[:n] = default
        own = (perms[c] >= 0) & ~forced
        index = torch.nonzero(own).reshape(-1)
        rows[index] = mat[perms[c, index]].to(rows.dtype)
        if union.rows > n:
            rows[n:] = rows[:n].mean(dim=0)
        out.append(rows)
    return out
