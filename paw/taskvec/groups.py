"""Which part of the network a parameter belongs to, from its name: one table of regex rules.

Every parameter falls in exactly one *module group* (the first rule that matches, else ``other``)
and, if its name holds a layer index, in one *layer group* ``layer_N`` as well:

    model.embed_tokens.weight                  -> embed
    model.layers.3.self_attn.q_proj.weight     -> attn,  layer_3
    model.layers.3.mlp.down_proj.weight        -> mlp,   layer_3
    model.layers.3.input_layernorm.weight      -> norm,  layer_3
    transformer.h.0.attn.c_attn.weight         -> attn,  layer_0
    lm_head.weight                             -> lm_head

Norms are tested before attention and MLP, so ``self_attn.q_norm`` (Qwen3) counts as a norm.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MODULE_GROUPS: dict[str, str] = {
    # group: pattern searched in the parameter name (first match wins, in this order)
    "embed": r"embed|token_embedding|(^|\.)(wte|wpe)(\.|$)",
    "lm_head": r"(^|\.)(lm_head|output)(\.weight|\.bias)?$",
    "norm": r"norm|(^|\.)ln_?(f|\d+)?(\.|$)",
    "attn": r"attn|attention|(^|\.)(q|k|v|o|qkv)_proj(\.|$)|(^|\.)(wq|wk|wv|wo)(\.|$)",
    "mlp": r"mlp|(^|\.|_)fc\d*(\.|$)|dense|(^|\.)(gate|up|down|gate_up)_proj(\.|$)|feed_forward|ffn"
           r"|(^|\.)w[123](\.|$)",
}
OTHER = "other"
LAYER_PATTERN = r"(?:^|\.)(?:layers|layer|h|blocks)\.(\d+)\."
"""``model.layers.12.`` or ``transformer.h.12.`` -> layer 12."""

GROUP_ORDER = ("embed", "lm_head", "attn", "mlp", "norm", OTHER)
"""Order in which the module groups are reported (rules above are tried in their own order)."""
_COMPILED = {name: re.compile(pattern) for name, pattern in MODULE_GROUPS.items()}
_LAYER = re.compile(LAYER_PATTERN)


def module_group(name: str) -> str:
    """``'model.layers.0.mlp.up_proj.weight' -> 'mlp'``; ``'other'`` when no rule matches."""
    for group, pattern in _COMPILED.items():
        if pattern.search(name):
            return group
    return OTHER


def layer_group(name: str) -> str | None:
    """``'model.layers.12.mlp.up_proj.weight' -> 'layer_12'``; ``None`` outside the layer stack."""
    match = _LAYER.search(name)
    return f"layer_{int(match.group(1))}" if match else None


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
