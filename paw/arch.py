"""One table of model families: tensor names, head_dim and tying rules, norm conventions, GGUF names.

Every PAW package asks this module where a family keeps its embedding, output head, norms and
projections instead of spelling the names itself (torchtune's ``convert_weights`` keeps the same kind
of single table). A :class:`Family` is plain frozen data, found by ``config.json``'s ``model_type``,
then its ``architectures``:

>>> family({"model_type": "qwen2"}).proj("q").path
'self_attn.q_proj'
>>> family({"model_type": "gemma"}).norm_offset     # Gemma's RMSNorm scales by (1 + w)
1.0
>>> gguf_to_hf("blk.3.ffn_norm.weight", family({"model_type": "gemma2"}))
'model.layers.3.pre_feedforward_layernorm.weight'

A config of a family not in the table gets :data:`GENERIC`, the Llama naming every code path used
before this table existed; ``family(config, strict=True)`` refuses it instead. Name *parsing*
(:func:`split_layer`, :func:`module_kind`, :func:`is_embedding`, ...) needs no family and also knows
the usual aliases of other layouts (GPT-2 ``transformer.h.N``/``wte``, NeoX ``embed_in``/``embed_out``,
llama.cpp ``blk.N``/``token_embd``/``output``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from paw.errors import PawError

__all__ = ["FAMILIES", "GENERIC", "Family", "Norm", "Proj", "embed_multiplier", "family", "get", "gguf_to_hf",
           "head_dim", "hf_to_gguf", "is_embedding", "is_head", "is_vocab_tensor", "layer_index", "module_kind",
           "rename_layer", "split_layer", "tied"]

IN, OUT = "in", "out"  # a projection reads the (normed) residual stream, or writes into it
HIDDEN, HEAD = "hidden", "head"  # widths of a norm: the residual stream, or one head (head_dim)


@dataclass(frozen=True)
class Proj:
    """One linear layer of a decoder block, seen from the residual stream.

    A reader (``side='in'``) takes the residual stream through the norm ``norm``; a writer
    (``side='out'``) adds its output to it (after ``post``, Gemma2/3's sandwich norm, when set).
    ``space`` is the other side: query heads ``'q'`` (heads x head_dim), key/value heads ``'kv'``,
    or MLP neurons ``'neuron'``. So q_proj's weight is (q, hidden) and o_proj's is (hidden, q).
    """

    role: str               # 'q', 'k', 'v', 'o', 'gate', 'up', 'down'
    path: str               # inside the layer: 'self_attn.q_proj'
    side: str               # IN or OUT
    space: str              # 'q', 'kv' or 'neuron'
    norm: str | None        # readers: the per-layer norm whose gains scale the input
    gguf: str               # llama.cpp name inside 'blk.{i}.': 'attn_q'
    post: str | None = None  # writers: a norm applied to the output before the residual add

    @property
    def name(self) -> str:
        """``'q_proj'``: the module name PEFT's ``target_modules`` match."""
        return self.path.rsplit(".", 1)[-1]

    @property
    def block(self) -> str:
        """``'attn'`` or ``'mlp'``."""
        return "attn" if self.space in ("q", "kv") else "mlp"

    @property
    def axes(self) -> tuple[str, str]:
        """Spaces of the weight's (out, in) axes: ``('q', 'hidden')`` for q_proj."""
        return (self.space, HIDDEN) if self.side == IN else (HIDDEN, self.space)


@dataclass(frozen=True)
class Norm:
    """A per-layer norm: its path inside the layer, its llama.cpp name and its width."""

    path: str               # 'input_layernorm'
    gguf: str               # 'attn_norm'
    width: str = HIDDEN     # HIDDEN, or HEAD for per-head q/k norms (size head_dim)


def _projections(mlp_norm: str = "post_attention_layernorm", *, sandwich: bool = False) -> tuple[Proj, ...]:
    """Llama's seven projections; Gemma2/3 read the MLP through ``mlp_norm`` and norm both block outputs."""
    attn_in = "input_layernorm"
    attn_out, mlp_out = ("post_attention_layernorm", "post_feedforward_layernorm") if sandwich else (None, None)
    return (
        Proj("q", "self_attn.q_proj", IN, "q", attn_in, "attn_q"),
        Proj("k", "self_attn.k_proj", IN, "kv", attn_in, "attn_k"),
        Proj("v", "self_attn.v_proj", IN, "kv", attn_in, "attn_v"),
        Proj("o", "self_attn.o_proj", OUT, "q", None, "attn_output", attn_out),
        Proj("gate", "mlp.gate_proj", IN, "neuron", mlp_norm, "ffn_gate"),
        Proj("up", "mlp.up_proj", IN, "neuron", mlp_norm, "ffn_up"),
        Proj("down", "mlp.down_proj", OUT, "neuron", None, "ffn_down", mlp_out),
    )


_PRE_NORMS = (Norm("input_layernorm", "attn_norm"), Norm("post_attention_layernorm", "ffn_norm"))
_SANDWICH_NORMS = (Norm("input_layernorm", "attn_norm"), Norm("post_attention_layernorm", "post_attention_norm"),
                   Norm("pre_feedforward_layernorm", "ffn_norm"), Norm("post_feedforward_layernorm", "post_ffw_norm"))
_QK_NORMS = (Norm("self_attn.q_norm", "attn_q_norm", HEAD), Norm("self_attn.k_norm", "attn_k_norm", HEAD))


@dataclass(frozen=True)
class Family:
    """Everything PAW needs to know about one architecture's checkpoint layout and conventions."""

    name: str
    model_types: tuple[str, ...] = ()       # config.json model_type values
    architectures: tuple[str, ...] = ()     # config.json architectures values
    projections: tuple[Proj, ...] = _projections()
    norms: tuple[Norm, ...] = _PRE_NORMS    # per-layer norms, in module order
    biases: tuple[str, ...] = ()            # roles whose projection also has a bias (Qwen2: q, k, v)
    embed: str = "model.embed_tokens.weight"
    head: str = "lm_head.weight"            # absent from the checkpoint when tied to the embedding
    final_norm: str = "model.norm.weight"
    layers: str = "model.layers"            # layer i's tensors start with f"{layers}.{i}."
    tie_default: bool = False               # tie_word_embeddings when config.json does not say
    norm_offset: float = 0.0                # an RMSNorm multiplies by (norm_offset + w): Gemma 1.0
    embed_scale: bool = False               # embeddings are multiplied by sqrt(hidden_size): Gemma
    gguf_norm_shift: float = 0.0            # llama.cpp stores norm gains as w + shift (Gemma: 1.0)
    gguf_permute_qk: bool = False           # llama.cpp reorders q/k rows for its RoPE layout (Llama, Mistral)

    def proj(self, role: str) -> Proj:
        """The projection of a role: ``proj('down').path == 'mlp.down_proj'``."""
        for p in self.projections:
            if p.role == role:
                return p
        raise PawError(f"family {self.name} has no {role!r} projection; roles: "
                       f"{', '.join(p.role for p in self.projections)}")

    def proj_of(self, name: str) -> Proj | None:
        """The projection a module path or tensor name belongs to, by its module name; else None.

        ``proj_of('model.layers.2.mlp.up_proj.weight').role == 'up'``; ``proj_of('lm_head')`` is None.
        """
        module = _strip_param(name).rsplit(".", 1)[-1]
        return next((p for p in self.projections if p.name == module), None)

    def layer_tensor(self, i: int, path: str, param: str = "weight") -> str:
        """``layer_tensor(3, 'mlp.up_proj') == 'model.layers.3.mlp.up_proj.weight'``."""
        return f"{self.layers}.{i}.{path}.{param}"

    @property
    def linear_names(self) -> list[str]:
        """PEFT ``target_modules`` for every projection: ``['q_proj', 'k_proj', ..., 'down_proj']``."""
        return [p.name for p in self.projections]

    @property
    def writers(self) -> tuple[Proj, ...]:
        """Projections that add into the residual stream (o, down)."""
        return tuple(p for p in self.projections if p.side == OUT)

    @property
    def hidden_norms(self) -> tuple[Norm, ...]:
        """Per-layer norms over the residual stream (not the per-head q/k norms)."""
        return tuple(n for n in self.norms if n.width == HIDDEN)

    def layer_tensors(self, i: int) -> list[str]:
        """Every tensor of layer ``i``: projection weights (and biases), then norms."""
        out = []
        for p in self.projections:
            out.append(self.layer_tensor(i, p.path))
            if p.role in self.biases:
                out.append(self.layer_tensor(i, p.path, "bias"))
        return out + [self.layer_tensor(i, n.path) for n in self.norms]

    def tensor_names(self, n_layers: int, *, tied: bool) -> list[str]:
        """All tensor names a checkpoint of ``n_layers`` layers stores (no head when ``tied``)."""
        names = [self.embed] + [n for i in range(n_layers) for n in self.layer_tensors(i)] + [self.final_norm]
        return names if tied else names + [self.head]

    def shapes(self, config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every tensor a checkpoint with this ``config.json`` stores (:meth:`tensor_names` order).

        Llama, hidden 8, 2 heads over 1 KV head: ``shapes(cfg)['model.layers.0.self_attn.k_proj.weight'] == (4, 8)``.
        """
        cfg = _text(config)
        try:
            heads, layers = int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
            sizes = {HIDDEN: int(cfg["hidden_size"]), "neuron": int(cfg["intermediate_size"]),
                     "vocab": int(cfg["vocab_size"])}
        except KeyError as missing:
            raise PawError(f"config lacks {missing.args[0]!r}") from None
        hd = head_dim(cfg)
        sizes.update({HEAD: hd, "q": heads * hd, "kv": int(cfg.get("num_key_value_heads") or heads) * hd})
        names = self.tensor_names(layers, tied=tied(config))
        return {name: tuple(sizes[k] for k in self.axes(name)) for name in names}

    def axes(self, name: str) -> tuple[str, ...] | None:
        """What each axis of a tensor indexes: ``'vocab'``, ``'hidden'``, ``'q'``, ``'kv'``, ``'neuron'``, ``'head'``.

        (out, in) for weights, (out,) for biases and gains: ``axes('model.layers.0.mlp.down_proj.weight') ==
        ('hidden', 'neuron')``; None for a tensor the family does not have.
        """
        inner, top = _axes_table(self)
        parts = split_layer(name)
        if parts and parts[0] == self.layers:
            return inner.get(parts[2])
        return top.get(name)


GENERIC = Family("generic")
"""Llama naming for configs the table does not know: what PAW assumed everywhere before the table."""

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("llama", ("llama",), ("LlamaForCausalLM",), gguf_permute_qk=True),
    Family("mistral", ("mistral",), ("MistralForCausalLM",), gguf_permute_qk=True),
    Family("qwen2", ("qwen2",), ("Qwen2ForCausalLM",), biases=("q", "k", "v")),
    Family("qwen3", ("qwen3",), ("Qwen3ForCausalLM",), norms=_PRE_NORMS[:1] + _QK_NORMS + _PRE_NORMS[1:]),
    Family("gemma", ("gemma",), ("GemmaForCausalLM",), tie_default=True, norm_offset=1.0, embed_scale=True,
           gguf_norm_shift=1.0),
    Family("gemma2", ("gemma2",), ("Gemma2ForCausalLM",), _projections("pre_feedforward_layernorm", sandwich=True),
           _SANDWICH_NORMS, tie_default=True, norm_offset=1.0, embed_scale=True, gguf_norm_shift=1.0),
    Family("gemma3_text", ("gemma3_text",), ("Gemma3ForCausalLM",),
           _projections("pre_feedforward_layernorm", sandwich=True), _QK_NORMS + _SANDWICH_NORMS,
           tie_default=True, norm_offset=1.0, embed_scale=True, gguf_norm_shift=1.0),
    # image-text Gemma 3: the same language model, saved under a 'language_model.' prefix
    Family("gemma3", ("gemma3",), ("Gemma3ForConditionalGeneration",),
           _projections("pre_feedforward_layernorm", sandwich=True), _QK_NORMS + _SANDWICH_NORMS,
           embed="language_model.model.embed_tokens.weight", head="language_model.lm_head.weight",
           final_norm="language_model.model.norm.weight", layers="language_model.model.layers",
           tie_default=True, norm_offset=1.0, embed_scale=True, gguf_norm_shift=1.0),
)}
"""Known families by name (the ``model_type`` they stand for, save Llama's ``generic`` stand-in).

Names are those of the safetensors files (what PAW reads), which for image-text Gemma 3 differ from
the module paths transformers builds in memory. Phi-3 is absent: its fused ``qkv_proj`` and
``gate_up_proj`` have no single space on their output side.
"""


def get(name: str) -> Family:
    """The family called ``name``; :class:`PawError` naming the known ones otherwise."""
    if name not in FAMILIES:
        raise PawError(f"unknown model family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def family(config: Mapping[str, Any] | None, *, strict: bool = False) -> Family:
    """The family of a ``config.json`` dict: by ``model_type``, then ``architectures``.

    An unknown (or missing) config gives :data:`GENERIC`, or with ``strict`` a :class:`PawError`
    naming the known families. ``family({'model_type': 'mistral'}).name == 'mistral'``.
    """
    cfg = config or {}
    kind, archs = cfg.get("model_type"), tuple(cfg.get("architectures") or ())
    for fam in FAMILIES.values():
        if kind in fam.model_types:
            return fam
    for fam in FAMILIES.values():
        if any(a in fam.architectures for a in archs):
            return fam
    if strict:
        what = kind or "/".join(archs) or "no model_type"
        raise PawError(f"unknown model family ({what}); known: {', '.join(FAMILIES)}")
    return GENERIC


def _text(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The language model's part of a config (``text_config`` of multimodal configs)."""
    cfg = config or {}
    return cfg.get("text_config") or cfg


def head_dim(config: Mapping[str, Any] | None) -> int | None:
    """``config.head_dim``, else ``hidden_size // num_attention_heads``, else None.

    ``head_dim({'hidden_size': 64, 'num_attention_heads': 4}) == 16``; Gemma and Qwen3 set
    ``head_dim`` apart from that ratio, which is why the field wins.
    """
    cfg = _text(config)
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        return int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    return None


def tied(config: Mapping[str, Any] | None) -> bool:
    """Whether the output head is the input embedding: ``tie_word_embeddings`` or the family default.

    ``tied({'model_type': 'gemma'})`` is True (transformers' Gemma default); ``tied({})`` is False.
    """
    cfg = config or {}
    flag = cfg.get("tie_word_embeddings", (cfg.get("text_config") or {}).get("tie_word_embeddings"))
    return family(cfg).tie_default if flag is None else bool(flag)


def embed_multiplier(config: Mapping[str, Any] | None) -> float:
    """What the model multiplies embedding rows by before layer 0: sqrt(hidden_size) for Gemma, else 1."""
    return math.sqrt(int(_text(config)["hidden_size"])) if family(config).embed_scale else 1.0


# ------------------------------------------------------------------------------ family-free parsing

_LAYER = re.compile(r"^(?P<prefix>(?:.*?\.)?(?:layers|layer|h|blocks|blk))\.(?P<index>\d+)\.(?P<rest>.+)$")
_PARAM = re.compile(r"\.(weight|bias)$")
# the token-indexed matrices of common layouts: input embeddings, then output heads
EMBED_ALIASES = ("embed_tokens", "embed_in", "wte", "word_embeddings", "tok_embeddings", "token_embd")
HEAD_ALIASES = ("lm_head", "embed_out", "output")
_VOCAB = re.compile(rf"(?:^|\.)(?P<module>{'|'.join(EMBED_ALIASES + HEAD_ALIASES)})(?:\.weight)?$")
# parameter groups by name, first match wins (norms before attention: Qwen3's self_attn.q_norm is a norm)
_KINDS = tuple((kind, re.compile(pattern)) for kind, pattern in (
    ("head", r"(^|\.)(lm_head|output|embed_out)(\.weight|\.bias)?$"),
    ("embed", r"embed|token_embedding|(^|\.)(wte|wpe)(\.|$)"),
    ("norm", r"norm|(^|\.)ln_?(f|\d+)?(\.|$)"),
    ("attn", r"attn|attention|(^|\.)(q|k|v|o|qkv)_proj(\.|$)|(^|\.)(wq|wk|wv|wo)(\.|$)"),
    ("mlp", r"mlp|(^|\.|_)fc\d*(\.|$)|dense|(^|\.)(gate|up|down|gate_up)_proj(\.|$)|feed_forward|ffn"
            r"|(^|\.)w[123](\.|$)"),
))
KINDS = ("embed", "head", "attn", "mlp", "norm", "other")


def _strip_param(name: str) -> str:
    return _PARAM.sub("", name)


def split_layer(name: str) -> tuple[str, int, str] | None:
    """``'model.layers.3.mlp.up_proj'`` -> ``('model.layers', 3, 'mlp.up_proj')``; None outside layers.

    Also ``transformer.h.N``, ``layer.N``, ``blocks.N`` and llama.cpp's ``blk.N``; the first one wins.
    """
    m = _LAYER.match(name)
    return (m["prefix"], int(m["index"]), m["rest"]) if m else None


def layer_index(name: str) -> int | None:
    """``layer_index('model.layers.12.mlp.up_proj.weight') == 12``; None outside the layer stack."""
    parts = split_layer(name)
    return parts[1] if parts else None


def rename_layer(name: str, index: int) -> str:
    """The same tensor in layer ``index``: ``rename_layer('model.layers.3.x', 0) == 'model.layers.0.x'``."""
    parts = split_layer(name)
    if parts is None:
        raise PawError(f"{name!r} is not inside a decoder layer")
    return f"{parts[0]}.{index}.{parts[2]}"


def is_embedding(name: str) -> bool:
    """The input token embedding (module path or ``.weight``): ``embed_tokens``, ``wte``, ``embed_in``, ..."""
    m = _VOCAB.search(name)
    return bool(m) and m["module"] in EMBED_ALIASES


def is_head(name: str) -> bool:
    """The output head (module path or ``.weight``): ``lm_head``, NeoX ``embed_out``, llama.cpp ``output``."""
    m = _VOCAB.search(name)
    return bool(m) and m["module"] in HEAD_ALIASES


def is_vocab_tensor(name: str) -> bool:
    """Indexed by token id along dim 0: an input embedding or an output head."""
    return _VOCAB.search(name) is not None


def module_kind(name: str) -> str:
    """The part of the network a parameter belongs to: one of :data:`KINDS`.

    ``module_kind('model.layers.0.mlp.up_proj.weight') == 'mlp'``,
    ``module_kind('transformer.h.0.ln_1.weight') == 'norm'``, ``module_kind('score.weight') == 'other'``.
    """
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return "other"


@cache
def _axes_table(fam: Family) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(in-layer name -> axis kinds, top-level name -> axis kinds) of :meth:`Family.axes`."""
    inner: dict[str, tuple[str, ...]] = {}
    for p in fam.projections:
        inner[f"{p.path}.weight"], inner[f"{p.path}.bias"] = p.axes, p.axes[:1]
    inner.update({f"{n.path}.weight": (n.width,) for n in fam.norms})
    return inner, {fam.embed: ("vocab", HIDDEN), fam.head: ("vocab", HIDDEN), fam.final_norm: (HIDDEN,)}


# ----------------------------------------------------------------------------------------- GGUF

@cache
def _gguf_table(fam: Family) -> tuple[dict[str, str], dict[str, str]]:
    """(whole-name map, in-layer path map), HF -> GGUF, without the ``.weight``/``.bias`` ending."""
    top = {_strip_param(fam.embed): "token_embd", _strip_param(fam.head): "output",
           _strip_param(fam.final_norm): "output_norm"}
    inner = {p.path: p.gguf for p in fam.projections} | {n.path: n.gguf for n in fam.norms}
    return top, inner


def _param(name: str) -> tuple[str, str]:
    m = _PARAM.search(name)
    if not m:
        raise PawError(f"{name!r} has no .weight or .bias ending")
    return name[: m.start()], m.group(0)


def hf_to_gguf(name: str, fam: Family = GENERIC) -> str:
    """llama.cpp's name of a Hugging Face tensor.

    ``hf_to_gguf('model.layers.0.self_attn.o_proj.weight') == 'blk.0.attn_output.weight'``.
    """
    base, param = _param(name)
    top, inner = _gguf_table(fam)
    if base in top:
        return top[base] + param
    parts = split_layer(base)
    if parts and parts[0] == fam.layers and parts[2] in inner:
        return f"blk.{parts[1]}.{inner[parts[2]]}{param}"
    raise PawError(f"no GGUF name for {name!r} in the {fam.name} family")


def gguf_to_hf(name: str, fam: Family = GENERIC) -> str:
    """The Hugging Face name of a llama.cpp tensor.

    ``gguf_to_hf('blk.2.ffn_up.weight') == 'model.layers.2.mlp.up_proj.weight'``. Names only: a reader
    must still undo the values' :attr:`Family.gguf_norm_shift` and :attr:`Family.gguf_permute_qk`.
    """
    base, param = _param(name)
    top, inner = _gguf_table(fam)
    back_top = {v: k for k, v in top.items()}
    if base in back_top:
        return back_top[base] + param
    parts = split_layer(base)
    back = {v: k for k, v in inner.items()}
    if parts and parts[0] == "blk" and parts[2] in back:
        return f"{fam.layers}.{parts[1]}.{back[parts[2]]}{param}"
    raise PawError(f"unknown GGUF tensor {name!r} for the {fam.name} family")
