"""Where each adapted module sits: its layer, its role in the residual stream, and layer matching.

A decoder layer's projections either *read* the residual stream through an RMSNorm (q, k, v read
the attention input norm; gate and up read the MLP input norm; the output head reads the final
norm) or *write* into it (o, down). The other side of a projection lives in a per-layer space: query
heads (``q``), key/value heads (``kv``) or MLP neurons (``neuron``). Transfer methods map each side
with the map of its space. Which module is which comes from :mod:`paw.arch`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from paw import arch
from paw.registry import Registry


@dataclass(frozen=True)
class Role:
    """How a module touches the residual stream: ``side`` is 'in' (reads it) or 'out' (writes it)."""

    side: str            # 'in': input is the (normed) residual; 'out': output goes to the residual
    other: str           # the space of the other side: 'q', 'kv', 'neuron', 'vocab'
    norm: str | None     # the norm whose gains scale the input (readers only): in-layer path, or 'final'


FINAL = "final"


def role_of(module: str, family: arch.Family = arch.GENERIC) -> Role | None:
    """``'model.layers.0.self_attn.q_proj'`` -> Role('in', 'q', 'input_layernorm'); None for unknown modules."""
    if arch.is_head(module):
        return Role(arch.IN, "vocab", FINAL)
    if arch.is_embedding(module):
        return Role(arch.OUT, "vocab", None)
    proj = family.proj_of(module)
    return Role(proj.side, proj.space, proj.norm) if proj else None


def split_layer(module: str) -> tuple[str, int, str] | None:
    """``'model.layers.3.mlp.up_proj'`` -> ``('model.layers', 3, 'mlp.up_proj')``; None outside layers."""
    return arch.split_layer(module)


def rename_layer(module: str, layer_map: dict[int, int]) -> str | None:
    """The target module path for a source module path; None when its layer has no partner."""
    index = arch.layer_index(module)
    if index is None:
        return module
    if index not in layer_map:
        return None
    return arch.rename_layer(module, layer_map[index])


def count_layers(names) -> int:
    """Number of decoder layers: 1 + the largest layer index among tensor names."""
    found = [arch.layer_index(n) for n in names]
    return 1 + max((i for i in found if i is not None), default=-1)


def monotone_assignment(score: list[list[float]]) -> list[tuple[int, int]]:
    """Order-preserving one-to-one matching of rows to columns maximising the summed score.

    Matches ``min(rows, cols)`` pairs ``(i, j)`` with both indices strictly increasing (layers keep
    their order when a model is pruned or grown). Dynamic programming, O(rows · cols).

    >>> monotone_assignment([[1, 0, 0], [0, 0, 1]])
    [(0, 0), (1, 2)]
    """
    n, m = len(score), len(score[0]) if score else 0
    if n > m:  # solve the transpose so that every row is matched
        return sorted((i, j) for j, i in monotone_assignment([list(col) for col in zip(*score, strict=True)]))
    neg = -math.inf
    best = [[neg] * (m + 1) for _ in range(n + 1)]
    take = [[False] * (m + 1) for _ in range(n + 1)]
    for j in range(m + 1):
        best[0][j] = 0.0
    for i in range(1, n + 1):
        for j in range(i, m + 1):
            skip = best[i][j - 1]
            use = best[i - 1][j - 1] + score[i - 1][j - 1]
            best[i][j], take[i][j] = (use, True) if use >= skip else (skip, False)
    pairs, i, j = [], n, m
    while i > 0:
        if take[i][j]:
            pairs.append((i - 1, j - 1))
            i -= 1
        j -= 1
    return pairs[::-1]


def relative_depth_scores(n_source: int, n_target: int) -> list[list[float]]:
    """``-|i/(L_s-1) - j/(L_t-1)|``: layers at the same relative depth score highest."""
    def rel(i: int, n: int) -> float:
        return i / (n - 1) if n > 1 else 0.0

    return [[-abs(rel(i, n_source) - rel(j, n_target)) for j in range(n_target)] for i in range(n_source)]


def name_scores(n_source: int, n_target: int) -> list[list[float]]:
    """1 on the diagonal (same layer number), 0 elsewhere; with different depths the extra layers stay unpaired."""
    return [[1.0 if i == j else -1.0 for j in range(n_target)] for i in range(n_source)]


def match_layers(score: list[list[float]], *, by_name: bool = False) -> dict[int, int]:
    """``source layer -> target layer`` from a score matrix (rows source, columns target)."""
    if not score or not score[0]:
        return {}
    if by_name:
        n = min(len(score), len(score[0]))
        return {i: i for i in range(n)}
    return dict(monotone_assignment(score))


# ``(n_source, n_target, similarity) -> {source layer: target layer}``; ``similarity()`` computes the
# (n_source, n_target) weight-similarity scores on demand, so only the map that needs them pays.
LayerMapFn = Callable[[int, int, Callable[[], list[list[float]]]], dict[int, int]]
LAYER_MAPS: Registry[LayerMapFn] = Registry("layer map")


@LAYER_MAPS.register("auto")
def _auto(n_source: int, n_target: int, similarity) -> dict[int, int]:
    """The first pairing ``auto`` tries: by name when depths agree, else by similarity.

    ``transfer_lora`` does more under ``auto`` (:mod:`paw.transfer.pairing`): it checks that the
    weights agree with the name pairing and tries the other pairings before it refuses a target.
    """
    if n_source == n_target:
        return _by_name(n_source, n_target, similarity)
    return _by_similarity(n_source, n_target, similarity)


@LAYER_MAPS.register("name")
def _by_name(n_source: int, n_target: int, similarity) -> dict[int, int]:
    """Layer i to layer i; when depths differ the extra layers stay unpaired."""
    return match_layers(name_scores(n_source, n_target), by_name=True)


@LAYER_MAPS.register("relative-depth")
def _by_relative_depth(n_source: int, n_target: int, similarity) -> dict[int, int]:
    """Layers at the same fraction of the depth pair up (monotone)."""
    return match_layers(relative_depth_scores(n_source, n_target))


@LAYER_MAPS.register("similarity")
def _by_similarity(n_source: int, n_target: int, similarity) -> dict[int, int]:
    """The monotone pairing that maximises total weight similarity (pruned or grown targets)."""
    return match_layers(similarity())
