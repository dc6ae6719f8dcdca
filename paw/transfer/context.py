"""Everything a transfer computes once and shares between modules: maps, gains, SVD cache.

:class:`Context` reads base tensors lazily from the two checkpoints (any ``Mapping`` name -> tensor),
one at a time, on the chosen device in float32, and memoises only small things (truncated singular
bases, residual-stream maps, unit maps of the current layer pair).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paw.transfer import linalg, structural
from paw.transfer.layers import Role, count_layers, split_layer
from paw.transfer.methods import Unavailable
from paw.transfer.vocab import VocabIndex

EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"
FINAL_NORM = "model.norm.weight"
_LAYER_WEIGHTS = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
                  "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
                  "down_proj": "mlp.down_proj"}


PROBES = 16  # Gaussian probes of the residual sketches (a JL estimate of ‖W_t − c·W_s‖ per module)


@dataclass
class Fingerprint:
    """What relatedness needs of one weight, kept for the whole transfer (a few MB per weight).

    ``U`` (out, R), ``V`` (in, R): top-R singular bases of the weight as it acts on the RMS-normalised
    residual (reader weights with their norm gains folded in, so layers and models with other gains
    compare fairly); ``probe``: the same weight times shared Gaussian probes (out, PROBES).
    """

    U: Any
    V: Any
    probe: Any


def head_dim_of(config: dict | None) -> int | None:
    cfg = config or {}
    cfg = cfg.get("text_config", cfg)
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        return int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    return None


@dataclass
class Context:
    """Shared state of one transfer (see module docstring)."""

    source: Any
    target: Any
    device: Any
    ridge: float = 1e-2
    subspace_rank: int | None = None
    vocab: VocabIndex | None = None
    seed: int = 0
    layer_map: dict[int, int] = field(default_factory=dict)
    _svd: dict = field(default_factory=dict, repr=False)
    _prints: dict = field(default_factory=dict, repr=False)
    _omega: dict = field(default_factory=dict, repr=False)
    _residual: tuple | None = field(default=None, repr=False)
    _hidden: structural.UnitMap | None = field(default=None, repr=False)
    _units: dict = field(default_factory=dict, repr=False)
    facts: dict = field(default_factory=dict)

    dtype: Any = None  # float32, set in __post_init__ (torch is imported lazily)

    def __post_init__(self):
        import torch

        self.dtype = torch.float32
        self.n_layers = (count_layers(self.source), count_layers(self.target))

    # ---- tensors ------------------------------------------------------------------------------
    def weight(self, side: str, name: str):
        """One base tensor, read now, as float32 on the device (nothing big is kept)."""
        ckpt = self.source if side == "s" else self.target
        return ckpt[name].to(device=self.device, dtype=self.dtype)

    def forget_bases(self) -> None:
        """Drop the methods' memoised singular bases (each base weight belongs to one module, done by now).

        Fingerprints stay: the next modules compare against them as the null.
        """
        self._svd.clear()

    def gain(self, side: str, norm_name: str | None, width: int):
        """RMSNorm gains (d,) as the module sees them (Gemma stores ``w`` and scales by ``1 + w``)."""
        import torch

        ckpt = self.source if side == "s" else self.target
        if norm_name is None or norm_name not in ckpt:
            return torch.ones(width, device=self.device)
        g = self.weight(side, norm_name)
        model_type = str((ckpt.config or {}).get("model_type", ""))
        return g + 1.0 if model_type.startswith("gemma") else g

    def norm_name(self, module: str, norm: str | None) -> str | None:
        if norm is None:
            return None
        if norm == "final":
            return FINAL_NORM
        parts = split_layer(module)
        return f"{parts[0]}.{parts[1]}.{norm}.weight" if parts else None

    # ---- truncated SVD, once per base weight --------------------------------------------------
    def sketch_seed(self, side: str) -> int:
        """Independent randomized-SVD sketches per model: a shared one biases their overlap upward."""
        return 2 * self.seed + (0 if side == "s" else 1)

    def svd(self, side: str, name: str, W=None, *, rank: int | None = None):
        """Top-R singular triplets of a base weight as stored, memoised by (side, name, R)."""
        shape = tuple(W.shape) if W is not None else tuple(self.weight_shape(side, name))
        rank = rank or linalg.default_rank(*shape, self.subspace_rank)
        key = (side, name, rank)
        if key not in self._svd:
            W = self.weight(side, name) if W is None else W
            self._svd[key] = linalg.top_singular(W, rank, seed=self.sketch_seed(side))
        return self._svd[key]

    def weight_shape(self, side: str, name: str):
        return (self.source if side == "s" else self.target).shape(name)

    def probes(self, n: int):
        """(n, PROBES) Gaussian probes shared by both models (seeded by n): residual sketches compare."""
        import torch

        if n not in self._omega:
            gen = torch.Generator().manual_seed(10_007 * self.seed + n)
            self._omega[n] = torch.randn(n, PROBES, generator=gen).to(self.device) / PROBES ** 0.5
        return self._omega[n]

    def fingerprint(self, side: str, name: str, *, module: str, role: Role | None, transpose: bool = False,
                    W=None) -> Fingerprint:
        """:class:`Fingerprint` of one base weight (``transpose`` for embedding tables), memoised."""
        norm = self.norm_name(module, role.norm) if role is not None and role.side == "in" else None
        key = (side, name, transpose, norm)
        if key not in self._prints:
            if W is None:
                W = self.weight(side, name)
                W = W.T if transpose else W
            if norm is not None:
                W = W * self.gain(side, norm, W.shape[1])[None, :]
            rank = linalg.default_rank(*W.shape)
            U, _, V = linalg.top_singular(W, rank, seed=self.sketch_seed(side))
            self._prints[key] = Fingerprint(U, V, W @ self.probes(W.shape[1]))
        return self._prints[key]

    # ---- residual-stream maps (embed-map) -----------------------------------------------------
    def embedding_rows(self):
        """Matched rows of shared tokens: embeddings, plus final-norm-folded unembeddings when both are untied."""
        import torch

        if EMBED not in self.source or EMBED not in self.target:
            raise Unavailable(f"embed-map needs {EMBED} in both base models")
        X_s, X_t = self.vocab.fit_rows(self.weight("s", EMBED), self.weight("t", EMBED), seed=self.seed)
        blocks = [(X_s, X_t)]
        if LM_HEAD in self.source and LM_HEAD in self.target:
            H_s = self.weight("s", LM_HEAD) * self.gain("s", FINAL_NORM, X_s.shape[1])
            H_t = self.weight("t", LM_HEAD) * self.gain("t", FINAL_NORM, X_t.shape[1])
            blocks.append(self.vocab.fit_rows(H_s, H_t, seed=self.seed))
        scale = [1.0 / max(float(s.norm()), 1e-12) for s, _ in blocks]  # each block weighs the same
        return (torch.cat([s * c for (s, _), c in zip(blocks, scale, strict=True)]),
                torch.cat([t * c for (_, t), c in zip(blocks, scale, strict=True)]))

    def residual_maps(self):
        """``(M_st (d_t, d_s), M_ts (d_s, d_t))``: ridge maps between the residual streams."""
        if self._residual is None:
            X_s, X_t = self.embedding_rows()
            M_st = linalg.ridge_map(X_s, X_t, self.ridge)
            M_ts = linalg.ridge_map(X_t, X_s, self.ridge)
            self.facts["residual_map"] = {
                "tokens": int(X_s.shape[0]) // (2 if LM_HEAD in self.source and LM_HEAD in self.target else 1),
                "fit_residual_source_to_target": round(linalg.scaled_residual(X_t, X_s @ M_st.T), 6),
                "fit_residual_target_to_source": round(linalg.scaled_residual(X_s, X_t @ M_ts.T), 6),
                "ridge": self.ridge}
            self._residual = (M_st, M_ts)
        return self._residual

    # ---- structural correspondences -----------------------------------------------------------
    def hidden_map(self) -> structural.UnitMap:
        if self._hidden is None:
            if EMBED not in self.source or EMBED not in self.target:
                raise Unavailable(f"structural needs {EMBED} in both base models")
            X_s, X_t = self.vocab.fit_rows(self.weight("s", EMBED), self.weight("t", EMBED), seed=self.seed)
            self._hidden = structural.hidden_channel_map(X_s, X_t)
            self.facts["hidden_channels"] = {"target": len(self._hidden.index), "paired": self._hidden.paired,
                                             "source": int(X_s.shape[1]),
                                             "mean_correlation": round(self._hidden.score, 6)}
        return self._hidden

    def layer_weights(self, side: str, layer: int) -> dict:
        prefix = "model.layers"
        ckpt = self.source if side == "s" else self.target
        out = {}
        for short, rest in _LAYER_WEIGHTS.items():
            name = f"{prefix}.{layer}.{rest}.weight"
            if name in ckpt:
                out[short] = self.weight(side, name)
        return out

    def unit_maps(self, layer_s: int, layer_t: int) -> dict[str, structural.UnitMap]:
        """Head and neuron maps of one layer pair (the last pair is memoised: modules come layer by layer)."""
        key = (layer_s, layer_t)
        if key not in self._units:
            hd_s, hd_t = head_dim_of(self.source.config), head_dim_of(self.target.config)
            if hd_s is None or hd_s != hd_t:
                raise Unavailable(f"structural needs the same head_dim in both configs (source {hd_s}, target {hd_t})")
            maps = structural.layer_unit_maps(self.layer_weights("s", layer_s), self.layer_weights("t", layer_t),
                                              self.hidden_map(), hd_s)
            self._units = {key: maps}
            self.facts.setdefault("layer_units", {})[f"{layer_s}->{layer_t}"] = {
                k: {"target": len(m.index), "paired": m.paired, "mean_correlation": round(m.score, 4)}
                for k, m in sorted(maps.items())}
        return self._units[key]

    def layer_signature(self, side: str, layer: int):
        """Per-hidden-channel fingerprint of a layer (norm gains, reader column norms, writer row norms)."""
        import torch

        ckpt = self.source if side == "s" else self.target
        parts = []
        for norm in ("input_layernorm", "post_attention_layernorm"):
            name = f"model.layers.{layer}.{norm}.weight"
            if name in ckpt:
                parts.append(self.weight(side, name))
        for short, W in self.layer_weights(side, layer).items():
            parts.append(W.norm(dim=1) if short in ("o_proj", "down_proj") else W.norm(dim=0))
        return torch.stack(parts)  # (k, d)

    def similarity_scores(self) -> list[list[float]]:
        """Correlation of layer fingerprints in paired hidden channels: rows source layers, columns target."""
        import torch

        h = self.hidden_map()
        cols_t = [j for j, i in enumerate(h.index) if i >= 0]
        cols_s = [h.index[j] for j in cols_t]
        sig_s = [structural._normalise_rows(self.layer_signature("s", i)[:, cols_s].reshape(1, -1))
                 for i in range(self.n_layers[0])]
        sig_t = [structural._normalise_rows(self.layer_signature("t", j)[:, cols_t].reshape(1, -1))
                 for j in range(self.n_layers[1])]
        S = torch.cat(sig_s) @ torch.cat(sig_t).T
        return [[round(float(x), 6) for x in row] for row in S]
