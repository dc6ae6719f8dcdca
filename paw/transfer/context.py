"""Everything a transfer computes once and shares between modules: maps, gains, SVD cache.

:class:`Context` reads base tensors lazily from the two checkpoints (any ``Mapping`` name -> tensor),
one at a time, on the chosen device in float32, and memoises only small things (truncated singular
bases, residual-stream maps, unit maps of the current layer pair).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paw import arch
from paw.transfer import linalg, structural
from paw.transfer.layers import FINAL, count_layers, role_of, split_layer
from paw.transfer.methods import Unavailable
from paw.transfer.vocab import VocabIndex

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


def family_of(ckpt) -> arch.Family:
    """The :mod:`paw.arch` family of a checkpoint (its ``config``; :data:`paw.arch.GENERIC` without one)."""
    return arch.family(getattr(ckpt, "config", None))


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
        self.families = {"s": family_of(self.source), "t": family_of(self.target)}

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
        offset = self.families[side].norm_offset
        return g + offset if offset else g

    def input_norm(self, side: str, module: str) -> str | None:
        """The norm tensor whose gains scale ``module``'s input on one side (None for writers)."""
        fam = self.families[side]
        role = role_of(module, fam)
        if role is None or role.norm is None:
            return None
        if role.norm == FINAL:
            return fam.final_norm
        parts = split_layer(module)
        return f"{parts[0]}.{parts[1]}.{role.norm}.weight" if parts else None

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

    def fingerprint(self, side: str, name: str, *, module: str, transpose: bool = False, W=None) -> Fingerprint:
        """:class:`Fingerprint` of the base weight ``name`` of ``module`` (``transpose``: embedding tables)."""
        norm = self.input_norm(side, module)
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

        X_s, X_t = self._embeddings("embed-map")
        blocks = [(X_s, X_t)]
        if self._untied_heads():
            fs, ft = self.families["s"], self.families["t"]
            H_s = self.weight("s", fs.head) * self.gain("s", fs.final_norm, X_s.shape[1])
            H_t = self.weight("t", ft.head) * self.gain("t", ft.final_norm, X_t.shape[1])
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
                "tokens": int(X_s.shape[0]) // (2 if self._untied_heads() else 1),
                "fit_residual_source_to_target": round(linalg.scaled_residual(X_t, X_s @ M_st.T), 6),
                "fit_residual_target_to_source": round(linalg.scaled_residual(X_s, X_t @ M_ts.T), 6),
                "ridge": self.ridge}
            self._residual = (M_st, M_ts)
        return self._residual

    # ---- structural correspondences -----------------------------------------------------------
    def hidden_map(self) -> structural.UnitMap:
        if self._hidden is None:
            X_s, X_t = self._embeddings("structural")
            self._hidden = structural.hidden_channel_map(X_s, X_t)
            self.facts["hidden_channels"] = {"target": len(self._hidden.index), "paired": self._hidden.paired,
                                             "source": int(X_s.shape[1]),
                                             "mean_correlation": round(self._hidden.score, 6)}
        return self._hidden

    def _embeddings(self, method: str):
        """Matched embedding rows of shared tokens, source and target."""
        e_s, e_t = self.families["s"].embed, self.families["t"].embed
        if e_s not in self.source or e_t not in self.target:
            raise Unavailable(f"{method} needs the embedding ({e_s}, {e_t}) in both base models")
        return self.vocab.fit_rows(self.weight("s", e_s), self.weight("t", e_t), seed=self.seed)

    def _untied_heads(self) -> bool:
        return self.families["s"].head in self.source and self.families["t"].head in self.target

    def layer_weights(self, side: str, layer: int) -> dict:
        """``{role: weight}`` of one layer's projections (``'q'``, ..., ``'down'``; missing ones left out)."""
        fam = self.families[side]
        ckpt = self.source if side == "s" else self.target
        out = {}
        for proj in fam.projections:
            name = fam.layer_tensor(layer, proj.path)
            if name in ckpt:
                out[proj.role] = self.weight(side, name)
        return out

    def unit_maps(self, layer_s: int, layer_t: int) -> dict[str, structural.UnitMap]:
        """Head and neuron maps of one layer pair (the last pair is memoised: modules come layer by layer)."""
        key = (layer_s, layer_t)
        if key not in self._units:
            hd_s, hd_t = arch.head_dim(self.source.config), arch.head_dim(self.target.config)
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

        fam = self.families[side]
        ckpt = self.source if side == "s" else self.target
        parts = []
        for norm in fam.hidden_norms:
            name = fam.layer_tensor(layer, norm.path)
            if name in ckpt:
                parts.append(self.weight(side, name))
        for role, W in self.layer_weights(side, layer).items():
            parts.append(W.norm(dim=1) if fam.proj(role).side == arch.OUT else W.norm(dim=0))
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
