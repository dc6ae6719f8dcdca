"""Vocabulary extension: new BPE merges that produce the new tokens, and the grown weight tensors.

Two pure pieces, used by ``paw extend-tokenizer``:

1. :func:`plan_bpe_merges` turns new tokens into *real* byte-level BPE vocabulary. A BPE encoder
   applies merges in rank order (Sennrich et al. 2016; GPT-2's byte-level variant, Radford et al.
   2019), so a token is produced by encoding only if a chain of merges builds it from bytes. For
   each new token we encode its bytes with the current merges, giving pieces ``[p0, p1, ..., pk]``,
   then append the chain ``(p0, p1) -> p0p1``, ``(p0p1, p2) -> p0p1p2``, ... at the end of the
   merge list (k merges, at most k - 1 new intermediate tokens). The partial strings of a chain that were not in the vocabulary become
   *intermediate* tokens (they need ids and rows too). Appended merges have the lowest priority, so
   every merge the old tokenizer made still happens first, and a text whose encoding contains none
   of the new pairs encodes exactly as before. Tokens are planned one after another against the
   merges planned so far, so a later chain can never break an earlier token.

   ``vocab={h,e,l,o,he,ll}``, ``merges=[(h,e),(l,l)]``, token ``hello``: pieces
   ``[he, ll, o]`` -> new merges ``(he, ll), (hell, o)``, intermediate ``hell``, target ``hello``.

2. :func:`extend_tensors` grows ``embed_tokens`` and ``lm_head`` with rows from
   :mod:`paw.vocab.resize` and passes every other tensor through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from paw import arch
from paw.errors import PawError
from paw.vocab.resize import grow_rows, new_rows


def bpe_pieces(word: str, ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """Encode one pre-token with BPE merges: repeatedly merge the lowest-ranked adjacent pair.

    ``bpe_pieces('hello', {('h','e'): 0, ('l','l'): 1, ('he','ll'): 2}) -> ['hell', 'o']``.
    """
    parts = list(word)
    while len(parts) > 1:
        best, best_rank = -1, None
        for i in range(len(parts) - 1):
            r = ranks.get((parts[i], parts[i + 1]))
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best < 0:
            break
        parts[best: best + 2] = [parts[best] + parts[best + 1]]
    return parts


@dataclass
class BpePlan:
    """What :func:`plan_bpe_merges` adds: merges (in order), new vocab entries (in order)."""

    merges: list[tuple[str, str]] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    intermediates: list[str] = field(default_factory=list)
    already_produced: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


def plan_bpe_merges(words: Sequence[str], vocab: Mapping[str, int] | set[str],
                    merges: Sequence[tuple[str, str]], *, max_intermediates: int | None = None) -> BpePlan:
    """Plan merges so that BPE encoding of each word in ``words`` yields that single token.

    ``words`` are in the model's symbol alphabet (byte-level: ``'Ġhello'``). Words that the
    current merges already produce are listed in ``already_produced`` and get nothing. A word
    that would need more than ``max_intermediates`` intermediate tokens is not planned at all
    and listed in ``rejected`` (the caller can add it as an added token instead).
    """
    ranks: dict[tuple[str, str], int] = {}
    for i, pair in enumerate(merges):
        ranks.setdefault(pair, i)  # a duplicated merge keeps its first (winning) rank
    known = set(vocab)
    plan = BpePlan()
    for word in words:
        pieces = bpe_pieces(word, ranks)
        if len(pieces) == 1:
            if word not in known:  # a single symbol outside the vocabulary: nothing to merge
                plan.entries.append(word)
                known.add(word)
            else:
                plan.already_produced.append(word)
            continue
        new_merges, made = _chain(word, pieces, ranks, known, len(merges) + len(plan.merges))
        inter = [m for m in made if m != word]
        if max_intermediates is not None and len(inter) > max_intermediates:
            for pair in new_merges:  # roll back: this word is left to the caller
                del ranks[pair]
            known.difference_update(made)
            plan.rejected.append(word)
            continue
        plan.merges += new_merges
        plan.entries += made
        plan.intermediates += inter
    return plan


def _chain(word: str, pieces: list[str], ranks: dict, known: set, next_rank: int) -> tuple[list, list]:
    """Add merges to ``ranks`` (from ``next_rank`` on) until ``word`` encodes to itself.

    Returns (new merges, new vocabulary entries).
    """
    new_merges, made = [], []
    while len(pieces) > 1:  # one merge per round; re-encode, since a new merge may fire twice
        pair = (pieces[0], pieces[1])
        ranks[pair] = next_rank + len(new_merges)
        new_merges.append(pair)
        merged = pair[0] + pair[1]
        if merged not in known:
            known.add(merged)
            made.append(merged)
        # two pieces joined by the newest (last-ranked) merge can only give the word itself
        pieces = [merged] if len(pieces) == 2 else bpe_pieces(word, ranks)
    return new_merges, made


def with_vocab_size(config: Mapping | None, rows: int) -> dict | None:
    """A copy of a model config with ``vocab_size`` (and ``text_config.vocab_size`` if present) = ``rows``."""
    if config is None:
        return None
    config = dict(config)
    if isinstance(config.get("text_config"), dict) and "vocab_size" in config["text_config"]:
        config["text_config"] = {**config["text_config"], "vocab_size": rows}
    config["vocab_size"] = rows
    return config


def find_vocab_tensors(names: Sequence[str]) -> tuple[str, str | None]:
    """``(embedding key, output head key or None)`` among checkpoint tensor names (:mod:`paw.arch` aliases)."""
    weights = [n for n in names if n.endswith(".weight")]
    embeds = [n for n in weights if arch.is_embedding(n)]
    if len(embeds) != 1:
        found = ", ".join(embeds) or "none"
        raise PawError(f"expected exactly one input embedding tensor ({', '.join(arch.EMBED_ALIASES)}), "
                       f"found {found}")
    heads = [n for n in weights if arch.is_head(n)]
    return embeds[0], (heads[0] if heads else None)


def extend_tensors(tensors: Mapping[str, object], *, new_ids: Sequence[int], pieces: Sequence[Sequence[int]],
                   total_rows: int, init: str = "interpolate",
                   keys: tuple[str, str | None] | None = None, device=None) -> Iterator[tuple[str, object]]:
    """Yield ``(name, tensor)`` for a checkpoint whose vocabulary tensors gain rows.

    ``tensors`` maps names to (V, d) / other tensors (a lazy checkpoint works: one tensor at a
    time). ``new_ids[i]`` receives the ``init`` row for a token whose old pieces are
    ``pieces[i]``; the matrices become ``total_rows`` long (zero rows for padding). A tied head
    (no ``lm_head.weight`` stored) needs nothing: it is the embedding.
    """
    embed_key, head_key = keys or find_vocab_tensors(list(tensors))
    for name in tensors:
        tensor = tensors[name]
        if name in (embed_key, head_key):
            weight = tensor if device is None else tensor.to(device)
            rows = new_rows(weight, pieces, init=init)
            tensor = grow_rows(weight, total_rows, ids=new_ids, rows=rows).cpu()
        yield name, tensor
