"""Model surgery on Llama-family state dicts: prune by importance, grow while preserving the function.

These are the operations that make the "sibling" checkpoints users meet: Minitron (Muralidharan et
al. 2024) and Sheared-LLaMA (Xia et al. 2024) prune hidden channels, attention heads, MLP neurons and
whole layers from a trained model and heal it with brief training; LLaMA Pro (Wu et al. 2024) and
Net2Net (Chen et al. 2016) grow a model so that it computes exactly the same function before further
training. Everything here is pure: ``dict[str, Tensor]`` and a config ``dict`` (the ``config.json``
fields) in, new ones out. Tensor names and axes come from :mod:`paw.arch` (Llama, Mistral, Qwen2/3,
Gemma layouts; projection biases included), with tied or untied embeddings.

Every tensor axis has one *kind* (see :meth:`paw.arch.Family.axes`):

    hidden  the residual stream, size H           (embed columns, q/k/v/gate/up inputs, o/down outputs, norms)
    q       query heads x head_dim, size nh * hd  (q_proj outputs, o_proj inputs)
    kv      KV heads x head_dim, size nkv * hd    (k_proj / v_proj outputs)
    neuron  MLP width, size I                     (gate/up outputs, down inputs)
    vocab   the vocabulary                        (never changed here)
    head    one head, size hd                     (Qwen3/Gemma3 q/k norms; never changed here)

Pruning selects indices along axes of one kind; growing appends entries along them. Heads are pruned
by whole KV groups (a KV head together with the ``nh / nkv`` query heads that read it), so grouped-query
attention stays valid. A Hugging Face config holds one number per dimension, so every kept layer must
keep the same number of heads and neurons; :func:`prune_state_dict` enforces it.

>>> new_sd, new_cfg = prune_by_importance(sd, cfg, hidden=24, heads=2, neurons=48, layers=3)  # doctest: +SKIP
>>> big_sd, big_cfg = grow_state_dict(sd, cfg, hidden_size=64, intermediate_size=256, num_layers=6)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from paw import arch
from paw.errors import PawError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["Dims", "grow_state_dict", "importance_scores", "prune_by_importance", "prune_state_dict"]


def _writes(fam: arch.Family, name: str) -> bool:
    """Whether a tensor writes into the residual stream (the embedding, o and down projections).

    Their new entries start at zero when growing, so the grown model computes the old function
    (new channels stay zero, new neurons and layers add nothing).
    """
    layer, rest = _split(name, fam)
    if layer is None:
        return name == fam.embed
    return rest.rsplit(".", 1)[0] in {p.path for p in fam.writers}


@dataclass(frozen=True)
class Dims:
    """The shape numbers of a Llama-family config."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    neurons: int

    @classmethod
    def of(cls, config: dict[str, Any]) -> Dims:
        try:
            hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
            dims = cls(hidden, int(config["num_hidden_layers"]), heads,
                       int(config.get("num_key_value_heads") or heads),
                       arch.head_dim(config), int(config["intermediate_size"]))
        except KeyError as missing:
            raise PawError(f"config lacks {missing.args[0]!r}; surgery needs a Llama-family config") from None
        if dims.heads % dims.kv_heads:
            raise PawError(f"num_attention_heads {dims.heads} is not a multiple of num_key_value_heads {dims.kv_heads}")
        return dims

    @property
    def group(self) -> int:
        """Query heads per KV head (1 for multi-head attention)."""
        return self.heads // self.kv_heads


def _split(name: str, fam: arch.Family) -> tuple[int | None, str]:
    """``'model.layers.3.mlp.up_proj.weight'`` -> ``(3, 'mlp.up_proj.weight')``; top-level keys -> ``(None, name)``."""
    parts = arch.split_layer(name)
    return (parts[1], parts[2]) if parts and parts[0] == fam.layers else (None, name)


def _axes(name: str, fam: arch.Family) -> tuple[str, ...]:
    axes = fam.axes(name)
    if axes is None:
        raise PawError(f"surgery does not know the tensor {name!r} (the {fam.name} layout of paw.arch)")
    return axes


# --------------------------------------------------------------------------------------------- prune

def _check_indices(what: str, keep: list[int], size: int) -> list[int]:
    keep = sorted(int(i) for i in keep)
    if not keep:
        raise PawError(f"{what}: nothing kept")
    if len(set(keep)) != len(keep) or keep[0] < 0 or keep[-1] >= size:
        raise PawError(f"{what}: indices must be distinct and in [0, {size}), got {keep}")
    return keep


def _uniform(what: str, per_layer: dict[int, list[int]], layers: list[int], size: int) -> dict[int, list[int]]:
    """Per-layer kept indices for every kept layer (absent = keep all); all the same count."""
    out = {layer: _check_indices(f"{what} of layer {layer}", per_layer.get(layer, range(size)), size)
           for layer in layers}
    counts = {layer: len(keep) for layer, keep in out.items()}
    if len(set(counts.values())) > 1:
        raise PawError(f"{what}: every kept layer must keep the same number (a config holds one), got {counts}")
    return out


def prune_state_dict(sd: dict[str, Tensor], config: dict[str, Any], *, hidden_keep: list[int] | None = None,
                     kv_heads_keep: dict[int, list[int]] | None = None,
                     neurons_keep: dict[int, list[int]] | None = None,
                     layers_keep: list[int] | None = None) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Keep the given hidden channels, KV groups, MLP neurons and layers; return ``(state_dict, config)``.

    ``hidden_keep``: residual channels (indices in ``[0, H)``) kept in every tensor that touches the
    residual stream. ``kv_heads_keep[l]``: KV heads kept in source layer ``l``; KV head ``g`` takes its
    query heads ``g*G .. g*G+G-1`` (``G = nh / nkv``) with it, and ``o_proj`` loses the matching input
    columns. ``neurons_keep[l]``: MLP neurons kept in source layer ``l``. ``layers_keep``: source layers
    kept, renumbered in order. ``None`` keeps everything along that axis; a layer missing from a dict
    keeps all its heads or neurons. Indices are sorted, so order inside the model is preserved.

    Pruning is not function-preserving in general (that is what healing is for); removing a layer
    whose ``o_proj`` and ``down_proj`` are zero, or neurons whose ``down_proj`` column is zero, is.
    Removing hidden channels also changes the RMSNorm denominators (mean over fewer channels).

    >>> sd2, cfg2 = prune_state_dict(sd, cfg, kv_heads_keep={0: [1], 1: [0]}, layers_keep=[0, 1])  # doctest: +SKIP
    """
    import torch

    d = Dims.of(config)
    layers = _check_indices("layers_keep", layers_keep if layers_keep is not None else range(d.layers), d.layers)
    hidden = _check_indices("hidden_keep", hidden_keep if hidden_keep is not None else range(d.hidden), d.hidden)
    groups = _uniform("kv_heads_keep", kv_heads_keep or {}, layers, d.kv_heads)
    neurons = _uniform("neurons_keep", neurons_keep or {}, layers, d.neurons)
    renumber = {old: new for new, old in enumerate(layers)}
    fam = arch.family(config)

    def index(kind: str, layer: int | None) -> Tensor | None:
        if kind == "hidden":
            return torch.tensor(hidden)
        if kind == "neuron":
            return torch.tensor(neurons[layer])
        if kind == "kv":
            return torch.tensor([g * d.head_dim + j for g in groups[layer] for j in range(d.head_dim)])
        if kind == "q":
            return torch.tensor([(g * d.group + h) * d.head_dim + j for g in groups[layer]
                                 for h in range(d.group) for j in range(d.head_dim)])
        return None  # vocab

    out: dict[str, Tensor] = {}
    for name, tensor in sd.items():
        layer, rest = _split(name, fam)
        axes = _axes(name, fam)
        if layer is not None and layer not in renumber:
            continue
        for axis, kind in enumerate(axes):
            idx = index(kind, layer)
            if idx is not None:
                tensor = tensor.index_select(axis, idx.to(tensor.device))
        out[name if layer is None else arch.rename_layer(name, renumber[layer])] = tensor.contiguous()

    kv = len(groups[layers[0]])
    new = dict(config, hidden_size=len(hidden), num_hidden_layers=len(layers), num_key_value_heads=kv,
               num_attention_heads=kv * d.group, head_dim=d.head_dim, intermediate_size=len(neurons[layers[0]]))
    if isinstance(config.get("layer_types"), list):
        new["layer_types"] = [config["layer_types"][i] for i in layers]
    return out, new


# ---------------------------------------------------------------------------------------- importance

def importance_scores(sd: dict[str, Tensor], config: dict[str, Any]) -> dict[str, Any]:
    """Data-free importance of every prunable unit, from weight norms (bigger = more important).

    Returns ``{"hidden": (H,), "heads": {layer: (nkv,)}, "neurons": {layer: (I,)}, "layers": (L,)}``
    as float tensors. Minitron and Sheared-LLaMA score units by activations on calibration data;
    without data we use the product of the norms of the weights that read a unit and the weights that
    write it, the first-order size of its contribution to the output:

    - neuron ``j`` of layer ``l``: ``||gate[j]|| * ||up[j]|| * ||down[:, j]||``;
    - KV group ``g``: ``||W_q[group]|| ||W_k[g]|| + ||W_v[g]|| ||W_o[:, group]||`` (the QK and OV circuits);
    - hidden channel ``c``: the summed squared norms of every row/column touching channel ``c``
      (embedding column, reader columns times their norm gain, writer rows, final-norm gain times
      ``lm_head`` column);
    - layer ``l``: the OV and MLP write sizes ``||W_o|| ||W_v|| + ||W_down|| ||W_up||`` relative to the
      embedding's row norm (how much the block can move the residual stream).

    Norm gains are taken as the model applies them (``1 + w`` for Gemma, see :mod:`paw.arch`).
    """
    import torch

    d = Dims.of(config)
    fam = arch.family(config)

    def w(layer: int, role: str) -> Tensor:
        return sd[fam.layer_tensor(layer, fam.proj(role).path)].float()

    def gain(name: str) -> Tensor:
        return sd[name].float() + fam.norm_offset

    embed = sd[fam.embed].float()
    hidden = embed.pow(2).sum(0)
    heads, neurons, layers = {}, {}, []
    for layer in range(d.layers):
        gate, up, down = w(layer, "gate"), w(layer, "up"), w(layer, "down")
        neurons[layer] = gate.norm(dim=1) * up.norm(dim=1) * down.norm(dim=0)
        q, k, v, o = (w(layer, role) for role in "qkvo")
        qg = q.reshape(d.kv_heads, -1, d.hidden).flatten(1).norm(dim=1)
        kg, vg = (t.reshape(d.kv_heads, -1, d.hidden).flatten(1).norm(dim=1) for t in (k, v))
        og = o.reshape(d.hidden, d.kv_heads, -1).transpose(0, 1).flatten(1).norm(dim=1)
        heads[layer] = qg * kg + vg * og
        g_in, g_post = (gain(fam.layer_tensor(layer, fam.proj(role).norm)) for role in ("q", "gate"))
        hidden = hidden + (torch.cat([q, k, v]).pow(2).sum(0) * g_in.pow(2)
                           + torch.cat([gate, up]).pow(2).sum(0) * g_post.pow(2)
                           + o.pow(2).sum(1) + down.pow(2).sum(1))
        layers.append(float(o.norm() * v.norm() + down.norm() * up.norm()))
    head = sd[fam.head].float() if fam.head in sd else embed
    hidden = hidden + head.pow(2).sum(0) * gain(fam.final_norm).pow(2)
    scale = float(embed.norm(dim=1).mean())
    return {"hidden": hidden, "heads": heads, "neurons": neurons,
            "layers": torch.tensor(layers) / max(scale, 1e-12)}


def _top(scores: Tensor, k: int) -> list[int]:
    """Indices of the ``k`` largest scores, in ascending index order (ties to the lower index)."""
    import torch

    order = torch.argsort(-scores, stable=True)[:k]
    return sorted(order.tolist())


def prune_by_importance(sd: dict[str, Tensor], config: dict[str, Any], *, hidden: int | None = None,
                        heads: int | None = None, neurons: int | None = None,
                        layers: int | None = None) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Prune to the given sizes, keeping the most important units by :func:`importance_scores`.

    ``hidden``: new ``hidden_size``; ``heads``: new ``num_attention_heads`` (a multiple of the
    query-per-KV group size, since heads go by whole KV groups); ``neurons``: new
    ``intermediate_size``; ``layers``: new ``num_hidden_layers``. ``None`` keeps that dimension.
    Each layer chooses its own heads and neurons, keeping the same count everywhere.
    """
    d = Dims.of(config)
    for what, value, size in (("hidden", hidden, d.hidden), ("heads", heads, d.heads),
                              ("neurons", neurons, d.neurons), ("layers", layers, d.layers)):
        if value is not None and not 0 < value <= size:
            raise PawError(f"{what}={value}: must be in [1, {size}]")
    if heads is not None and heads % d.group:
        raise PawError(f"heads={heads}: must be a multiple of the group size {d.group} (heads go by KV group)")
    scores = importance_scores(sd, config)
    layer_keep = _top(scores["layers"], layers) if layers is not None else list(range(d.layers))
    return prune_state_dict(
        sd, config,
        hidden_keep=_top(scores["hidden"], hidden) if hidden is not None else None,
        kv_heads_keep={i: _top(scores["heads"][i], heads // d.group) for i in layer_keep} if heads else None,
        neurons_keep={i: _top(scores["neurons"][i], neurons) for i in layer_keep} if neurons else None,
        layers_keep=layer_keep)


# ---------------------------------------------------------------------------------------------- grow

def _insert_positions(old: int, new: int) -> list[int | None]:
    """Layer plan after growth: source index, or ``None`` for a new layer, spread evenly.

    >>> _insert_positions(4, 6)
    [0, 1, None, 2, None, 3]
    """
    extra = new - old
    after: dict[int, int] = {}
    for j in range(extra):
        slot = math.ceil((j + 1) * old / (extra + 1)) - 1
        after[slot] = after.get(slot, 0) + 1
    plan: list[int | None] = []
    for i in range(old):
        plan.append(i)
        plan.extend([None] * after.get(i, 0))
    return plan


def _widen(name: str, tensor: Tensor, fam: arch.Family, sizes: dict[str, int], gen, norm_scale: float) -> Tensor:
    """Pad ``tensor`` to ``sizes`` along each axis; fill per the rules of :func:`grow_state_dict`."""
    import torch

    axes = _axes(name, fam)
    shape = [sizes.get(kind, n) for kind, n in zip(axes, tensor.shape, strict=True)]
    if list(tensor.shape) == shape:
        return tensor.clone()
    is_norm = arch.module_kind(name) == "norm"
    if is_norm:
        fill = torch.full(shape, float(tensor.float().mean()) * norm_scale, dtype=tensor.dtype)
    elif name.endswith(".bias") or _writes(fam, name):
        fill = torch.zeros(shape, dtype=tensor.dtype)
    else:  # readers: random, at the tensor's own scale, so new units compute something and get gradient
        std = float(tensor.float().std()) if tensor.numel() > 1 else 0.02
        fill = (torch.randn(shape, generator=gen) * std).to(tensor.dtype)
    fill[tuple(slice(0, n) for n in tensor.shape)] = tensor * norm_scale if is_norm else tensor
    return fill.to(tensor.device)


def grow_state_dict(sd: dict[str, Tensor], config: dict[str, Any], *, hidden_size: int | None = None,
                    intermediate_size: int | None = None, num_layers: int | None = None,
                    seed: int = 0) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Widen and deepen a model so that it computes the same logits; return ``(state_dict, config)``.

    What is added (always appended after the existing units, so old index ``i`` stays ``i``):

    - **MLP neurons** (``intermediate_size``): new ``gate``/``up`` rows random at the layer's weight
      scale, new ``down_proj`` columns zero. The new neurons fire but write nothing: exact.
    - **Layers** (``num_layers``): LLaMA Pro block expansion. New layers are spread evenly, each a copy
      of the layer before it with ``o_proj`` and ``down_proj`` (and their biases) set to zero, so both
      residual branches add zero: an identity block, exact. Training moves them off zero.
    - **Hidden channels** (``hidden_size`` H -> H'): new embedding columns and new rows of every writer
      (``o_proj``, ``down_proj``) are zero, so the new residual channels stay exactly zero; new reader
      columns (q/k/v/gate/up/``lm_head``) are random, which reads zeros, so nothing changes, but the
      channels receive gradient. RMSNorm divides by ``sqrt(mean(x^2) + eps)``; with zeros appended the
      mean shrinks by ``H / H'``, so the old gains are multiplied by ``sqrt(H / H')`` and ``rms_norm_eps``
      by ``H / H'``. Then ``x_c w'_c / sqrt(mean'(x^2) + eps') = x_c w_c / sqrt(mean(x^2) + eps)`` for
      every old channel ``c``: exact up to float rounding. What is *not* preserved: the config's
      ``rms_norm_eps`` changes (a model rebuilt with the old eps differs by ``O(eps)``), and the
      original gains are rescaled, so a weight-space comparison with the source must undo the
      ``sqrt(H / H')`` factor. New channels' gains start at the mean rescaled gain.

    Heads and ``head_dim`` are unchanged. Only for an RMSNorm computing ``x * w`` (not Gemma's ``(1 + w)``).

    >>> big, cfg2 = grow_state_dict(sd, cfg, intermediate_size=128, num_layers=4, seed=0)  # doctest: +SKIP
    """
    import torch

    d = Dims.of(config)
    hidden_size, intermediate_size = hidden_size or d.hidden, intermediate_size or d.neurons
    num_layers = num_layers or d.layers
    for what, new, old in (("hidden_size", hidden_size, d.hidden), ("intermediate_size", intermediate_size, d.neurons),
                           ("num_layers", num_layers, d.layers)):
        if new < old:
            raise PawError(f"{what}={new} is smaller than the model's {old}; growing cannot shrink (prune instead)")
    fam = arch.family(config)
    # an unknown model_type may scale by (1 + w): only families known to compute x * w (or no model_type)
    if hidden_size != d.hidden and (fam.norm_offset or (fam is arch.GENERIC and "model_type" in config)):
        plain = ", ".join(f.name for f in arch.FAMILIES.values() if not f.norm_offset)
        raise PawError(f"growing hidden_size needs an x * w RMSNorm ({plain}); "
                       f"model_type is {config.get('model_type')!r}")
    gen = torch.Generator().manual_seed(seed)
    sizes = {"hidden": hidden_size, "neuron": intermediate_size}
    norm_scale = math.sqrt(d.hidden / hidden_size)

    widened = {name: _widen(name, t, fam, sizes, gen, norm_scale) for name, t in sd.items()}
    if arch.tied(config) and fam.head in widened:
        widened[fam.head] = widened[fam.embed]

    plan = _insert_positions(d.layers, num_layers)
    out = {name: t for name, t in widened.items() if _split(name, fam)[0] is None}
    source = 0
    for new_index, old_index in enumerate(plan):
        copy_of = old_index if old_index is not None else source
        for name, tensor in widened.items():
            layer, rest = _split(name, fam)
            if layer != copy_of:
                continue
            if old_index is None and _writes(fam, name):
                tensor = torch.zeros_like(tensor)
            out[arch.rename_layer(name, new_index)] = tensor.clone() if old_index is None else tensor
        source = copy_of

    new = dict(config, hidden_size=hidden_size, intermediate_size=intermediate_size, num_hidden_layers=num_layers,
               head_dim=d.head_dim, rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)) * d.hidden / hidden_size)
    if isinstance(config.get("layer_types"), list):
        types = config["layer_types"]
        last = types[0]
        new["layer_types"] = []
        for i in plan:
            last = types[i] if i is not None else last
            new["layer_types"].append(last)
    return out, new
