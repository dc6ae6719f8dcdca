"""Which part of the network a parameter belongs to, from its name (rules in :mod:`paw.arch`).

Every parameter falls in exactly one *module group* (the first rule that matches, else ``other``)
and, if its name holds a layer index, in one *layer group* ``layer_N`` as well:

    model.embed_tokens.weight                  -> embed
    model.layers.3.self_attn.q_proj.weight     -> attn,  layer_3
    model.layers.3.mlp.down_proj.weight        -> mlp,   layer_3
    model.layers.3.input_layernorm.weight      -> norm,  layer_3
    transformer.h.0.attn.c_attn.weight         -> attn,  layer_0
    lm_head.weight                             -> lm_head

The rules are :func:`paw.arch.module_kind` (norms are tested before attention and MLP, so
``self_attn.q_norm`` (Qwen3) counts as a norm) and :func:`paw.arch.layer_index`.
"""

from __future__ import annotations

from collections.abc import Iterable

from paw import arch

OTHER = "other"
_GROUP_OF_KIND = {"head": "lm_head"}  # report names of the arch kinds that differ from them
GROUP_ORDER = ("embed", "lm_head", "attn", "mlp", "norm", OTHER)
"""Order in which the module groups are reported."""


def module_group(name: str) -> str:
    """``'model.layers.0.mlp.up_proj.weight' -> 'mlp'``; ``'other'`` when no rule matches."""
    kind = arch.module_kind(name)
    return _GROUP_OF_KIND.get(kind, kind)


def layer_group(name: str) -> str | None:
    """``'model.layers.12.mlp.up_proj.weight' -> 'layer_12'``; ``None`` outside the layer stack."""
    index = arch.layer_index(name)
    return None if index is None else f"layer_{index}"


def groups_of(name: str) -> list[str]:
    """The module group, then the layer group if any."""
    layer = layer_group(name)
    return [module_group(name)] + ([layer] if layer else [])


def layer_index(group: str) -> int:
    return int(group.removeprefix("layer_"))


def aggregate(rows: Iterable[tuple[str, int, float, float]]) -> dict[str, dict[str, float | int]]:
    """Sum ``(name, numel, sumsq, l1)`` rows into ``{group: {'l2', 'l1', 'param_count'}}``.

    All module groups are present (zeros when empty); layer groups follow in layer order.
    Sums run in the order of ``rows`` (float64), so the result is reproducible.
    """
    acc: dict[str, list] = {g: [0.0, 0.0, 0] for g in GROUP_ORDER}
    layers: dict[str, list] = {}
    for name, numel, sumsq, l1 in rows:
        for group in groups_of(name):
            slot = acc[group] if group in acc else layers.setdefault(group, [0.0, 0.0, 0])
            slot[0] += sumsq
            slot[1] += l1
            slot[2] += numel
    ordered = {**acc, **{g: layers[g] for g in sorted(layers, key=layer_index)}}
    return {g: {"l2": s ** 0.5, "l1": l1, "param_count": n} for g, (s, l1, n) in ordered.items()}
