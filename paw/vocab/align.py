"""Vocabulary alignment: for every target token, which source tokens its embedding comes from.

Methods live in a registry (:data:`METHODS`) and are chained: each maps what the previous ones left.
The default chain is ``exact`` then ``decompose``. Special tokens are matched first, by role (bos to
bos, eos to eos, ...) and then by identical content, under the method name ``special``.

==================  ===================================================================================
``exact``           same canonical bytes in the source: ``b' the'`` -> ``[id(' the')]``, weight 1
``decompose``       the source tokenization of the target token's bytes, equal weights:
                    ``b' tokenizer'`` -> ``[id(' token'), id('izer')]``, ``[0.5, 0.5]``
``nearest-string``  the source token with the highest character n-gram Dice score, found through an
                    inverted index (candidates share a rare n-gram; no all-pairs scan)
``semantic``        needs source embeddings: the decomposition's mean row, re-expressed as an affine
                    combination of k *shared* tokens chosen by orthogonal matching pursuit (Pati et
                    al. 1993), as in mergekit's tokensurgeon and FOCUS (Dobler & de Melo 2023)
``frequency``       ``decompose`` weighted by inverse corpus frequency of the pieces (a rare piece such
                    as ``izer`` says more than a frequent one such as a lone space); among equally short
                    candidate decompositions the one with the most frequent pieces wins
==================  ===================================================================================

A method is ``f(ctx: AlignContext, target_ids: list[int]) -> {target_id: (source_ids, weights)}``;
it may leave ids out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from paw.errors import PawError
from paw.io.tokenizer import TokenizerInfo
from paw.io.vocab_map import VocabMapping
from paw.registry import Registry
from paw.vocab.embed import omp_affine
from paw.vocab.ngram import NgramIndex
from paw.vocab.roles import role_id, role_of

if TYPE_CHECKING:  # numpy only annotates here; the CLI reads the method names without importing it
    import numpy as np

Entry = tuple[list[int], list[float]]
METHODS: Registry[Callable[[AlignContext, list[int]], dict[int, Entry]]] = Registry("alignment method")
NEEDS: dict[str, str] = {}  # method -> what it needs ('embeddings', 'counts')
DEFAULT_METHODS = ("exact", "decompose")


def register(name: str, *, needs: str | None = None):
    """Decorator adding an alignment method to :data:`METHODS`."""
    def wrap(fn):
        METHODS.add(name, fn)
        if needs:
            NEEDS[name] = needs
        return fn
    return wrap


@dataclass
class AlignContext:
    """What the methods may use. ``source_embeddings`` is (Ns, d); ``source_counts`` is (Ns,)."""

    source: TokenizerInfo
    target: TokenizerInfo
    source_embeddings: Any = None  # torch.Tensor (Ns, d) or None
    source_counts: np.ndarray | None = None
    k: int = 8  # anchors per token for ``semantic``
    _cache: dict = field(default_factory=dict)


def methods_help() -> str:
    """``--method`` help built from the alignment registry (so a new method shows up by itself)."""
    needs = {"embeddings": "needs the source model", "counts": "needs --corpus"}
    names = [f"{m} ({needs[NEEDS[m]]})" if m in NEEDS else m for m in METHODS]
    return f"Alignment methods, chained in order (repeat or comma-separate): {', '.join(names)}."


def check_methods(methods: list[str], *, have_embeddings: bool, have_counts: bool) -> None:
    for m in methods:
        METHODS.lookup(m)
        need = NEEDS.get(m)
        if need == "embeddings" and not have_embeddings:
            raise PawError(f"method {m!r} needs the source model's embeddings (--source-model)")
        if need == "counts" and not have_counts:
            raise PawError(f"method {m!r} needs token frequencies from a corpus (--corpus)")


def align(ctx: AlignContext, methods: tuple[str, ...] | list[str] = DEFAULT_METHODS) -> VocabMapping:
    """Chain ``methods`` over the target vocabulary; specials first. Returns a :class:`VocabMapping`."""
    entries: dict[int, tuple[str, list[int], list[float]]] = {
        t: ("special", [s], [1.0]) for t, s in match_specials(ctx.source, ctx.target).items()}
    todo = [i for i in range(ctx.target.size) if ctx.target.vocab[i] is not None]
    for name in methods:
        found = METHODS[name](ctx, todo)
        for t, (src, w) in found.items():
            entries[t] = (name, [int(s) for s in src], [float(x) for x in w])
        todo = [t for t in todo if t not in found]
    return VocabMapping(ctx.source.size, ctx.target.size, entries, ctx.source.spec, ctx.target.spec)


def match_specials(source: TokenizerInfo, target: TokenizerInfo) -> dict[int, int]:
    """Target special id -> source special id: same role (bos/eos/pad/unk...), else same content."""
    by_content = {s.content: i for i, s in source.specials.items() if s.special}
    out = {}
    for i, s in sorted(target.specials.items()):
        if not s.special:
            continue
        if s.content in by_content:
            out[i] = by_content[s.content]
        elif (role := role_of(s)) and role != "chat" and (j := role_id(source, role)) is not None:
            out[i] = j
    return out


# ----- exact and decompose ----------------------------------------------------------------------
@register("exact")
def exact(ctx: AlignContext, target_ids: list[int]) -> dict[int, Entry]:
    src = ctx.source.bytes_to_id
    return {t: ([src[b]], [1.0]) for t in target_ids if (b := ctx.target.vocab[t]) in src}


def greedy_pieces(data: bytes, vocab: dict[bytes, int], max_len: int) -> list[int] | None:
    """Longest-prefix-first segmentation of ``data`` into source tokens; None if a byte is missing.

    ``b'hello'`` with ``{h, he, hell, o, l}`` -> ``[id(hell), id(o)]``.
    """
    out, i = [], 0
    while i < len(data):
        for n in range(min(max_len, len(data) - i), 0, -1):
            j = vocab.get(data[i:i + n])
            if j is not None:
                out.append(j)
                i += n
                break
        else:
            return None
    return out


def decompositions(ctx: AlignContext, target_ids: list[int]) -> dict[int, list[list[int]]]:
    """Candidate source segmentations per target id: the source tokenizer's, then greedy longest-match.

    The tokenizer's own segmentation is kept only if its canonical bytes rebuild the target bytes
    exactly (SentencePiece prefixes an extra ``▁``, WordPiece marks word starts) and has no unknown.
    """
    key = ("decomp", tuple(target_ids))
    if key in ctx._cache:
        return ctx._cache[key]
    src = ctx.source
    vocab = src.bytes_to_id
    max_len = max(map(len, vocab), default=1)
    datas = [ctx.target.vocab[t] for t in target_ids]
    texts, where = [], []
    for k, b in enumerate(datas):
        try:
            texts.append(b.decode("utf-8"))
            where.append(k)
        except UnicodeDecodeError:
            pass
    encoded = dict(zip(where, src.encode_batch(texts), strict=True)) if texts else {}
    out: dict[int, list[list[int]]] = {}
    for k, (t, b) in enumerate(zip(target_ids, datas, strict=True)):
        cands = []
        ids = encoded.get(k)
        if ids and src.unk_id not in ids and b"".join(src.token_bytes(i) for i in ids) == b:
            cands.append(list(ids))
        greedy = greedy_pieces(b, vocab, max_len)
        if greedy is not None and greedy not in cands:
            cands.append(greedy)
        if cands:
            out[t] = cands
    ctx._cache[key] = out
    return out


@register("decompose")
def decompose(ctx: AlignContext, target_ids: list[int]) -> dict[int, Entry]:
    return {t: (c[0], [1.0 / len(c[0])] * len(c[0])) for t, c in decompositions(ctx, target_ids).items()}


@register("frequency", needs="counts")
def frequency(ctx: AlignContext, target_ids: list[int]) -> dict[int, Entry]:
    counts = ctx.source_counts
    total = float(counts.sum())
    idf = lambda s: math.log((total + 1.0) / (float(counts[s]) + 1.0)) + 1.0  # noqa: E731
    out = {}
    for t, cands in decompositions(ctx, target_ids).items():
        best = min(cands, key=lambda c: (len(c), -min(float(counts[s]) for s in c)))
        w = [idf(s) for s in best]
        z = sum(w)
        out[t] = (best, [x / z for x in w])
    return out


# ----- nearest string ----------------------------------------------------------------------------
@register("nearest-string")
def nearest_string(ctx: AlignContext, target_ids: list[int]) -> dict[int, Entry]:
    src_ids = [i for i in range(ctx.source.size) if ctx.source.vocab[i] is not None]
    index = ctx._cache.get("ngram")
    if index is None:
        index = ctx._cache["ngram"] = NgramIndex([ctx.source.vocab[i] for i in src_ids])
    best = index.nearest([ctx.target.vocab[t] for t in target_ids])
    return {t: ([src_ids[j]], [1.0]) for t, (j, score) in zip(target_ids, best, strict=True) if j >= 0 and score > 0}


# ----- semantic (OMP over shared anchors) ---------------------------------------------------------
@register("semantic", needs="embeddings")
def semantic(ctx: AlignContext, target_ids: list[int]) -> dict[int, Entry]:
    import torch

    E = ctx.source_embeddings
    shared = exact(ctx, [i for i in range(ctx.target.size) if ctx.target.vocab[i] is not None])
    anchors = sorted({src[0] for src, _ in shared.values()})
    decomp = decompositions(ctx, target_ids)
    todo = [t for t in target_ids if t in decomp]
    if not todo or not anchors:
        return {}
    out = {}
    A = E[torch.tensor(anchors, device=E.device)].float()  # (Na, d)
    for start in range(0, len(todo), 1024):
        chunk = todo[start:start + 1024]
        X = torch.stack([E[torch.tensor(decomp[t][0], device=E.device)].float().mean(0) for t in chunk])  # (B, d)
        idx, w = omp_affine(X, A, k=min(ctx.k, len(anchors)))
        for t, row_i, row_w in zip(chunk, idx.tolist(), w.tolist(), strict=True):
            out[t] = ([anchors[j] for j in row_i], row_w)
    return out
