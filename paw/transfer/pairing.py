"""Which layer pairings a transfer tries, in which order, and why (``--layer-map auto``).

``auto`` pairs layers by name when the depths agree and the weights agree with it (every source
layer's fingerprint correlates best with its namesake); otherwise by weight similarity, which finds
inserted layers (LLaMA Pro growth) and dropped ones (pruning). The others follow as fallbacks: the
pipeline keeps the first pairing under which the target is not refused, so a refusal means that
*every* pairing failed. A named ``--layer-map`` is the only pairing tried.
"""

from __future__ import annotations

from dataclasses import dataclass

from paw.errors import PawError
from paw.transfer.layers import LAYER_MAPS
from paw.transfer.methods import Unavailable

AUTO = "auto"
WHY = {"name": "layer i to layer i", "relative-depth": "layers at the same relative depth",
       "similarity": "order-preserving pairing of maximal layer-fingerprint correlation"}


@dataclass(frozen=True)
class Pairing:
    """One candidate layer pairing: how it was made, the pairs, and why it is tried."""

    how: str
    pairs: dict[int, int]
    why: str


def _similarity(ctx) -> list[list[float]] | str:
    """The (n_source, n_target) layer-fingerprint correlations, or the reason they cannot be had."""
    if "layer_similarity" in ctx.facts:
        return ctx.facts["layer_similarity"]
    try:
        scores = ctx.similarity_scores()
    except (Unavailable, PawError) as err:
        return str(err)
    ctx.facts["layer_similarity"] = scores  # reported: why layers paired up as they did
    return scores


def _named(ctx, how: str) -> Pairing | str:
    """The pairing of one registered layer map, or why it cannot be made."""
    failed: list[str] = []

    def similarity():
        scores = _similarity(ctx)
        if isinstance(scores, str):
            failed.append(scores)
            raise PawError(scores)
        return scores

    try:
        pairs = LAYER_MAPS[how](*ctx.n_layers, similarity)
    except PawError:
        if failed:
            return f"{how} pairing unavailable: {failed[0]}"
        raise
    return Pairing(how, pairs, WHY.get(how, LAYER_MAPS[how].__doc__ or how))


def candidates(ctx, how: str) -> list[Pairing]:
    """Pairings to try, first to last; one for a named ``how``, several (deduplicated) for ``auto``."""
    if how not in LAYER_MAPS:
        raise PawError(f"unknown --layer-map {how!r}; choose one of {', '.join(LAYER_MAPS.names())}")
    if how != AUTO:
        got = _named(ctx, how)
        if isinstance(got, str):
            raise PawError(got)
        return [got]
    n_s, n_t = ctx.n_layers
    order = ["name", "similarity", "relative-depth"]
    first_why = ""
    if n_s == n_t:
        scores = _similarity(ctx) if n_s > 1 else "one layer"
        if isinstance(scores, str):
            first_why = f"depths agree ({n_s} layers); the weights could not be compared ({scores})"
        elif all(max(range(n_t), key=lambda j, row=row: row[j]) == i for i, row in enumerate(scores)):
            first_why = f"depths agree ({n_s} layers) and every source layer's fingerprint correlates best " \
                        "with its namesake"
        else:
            order = ["similarity", "name", "relative-depth"]
            first_why = f"depths agree ({n_s} layers) but some source layer correlates best with another " \
                        "target layer"
    else:
        order = ["similarity", "relative-depth", "name"]
        first_why = f"depths differ ({n_s} source, {n_t} target layers)"
    out: list[Pairing] = []
    for name in order:
        got = _named(ctx, name)
        if isinstance(got, str) or any(p.pairs == got.pairs for p in out):
            continue
        why = got.why if out else f"{got.why}; chosen first because {first_why}"
        out.append(Pairing(got.how, got.pairs, why))
    return out
