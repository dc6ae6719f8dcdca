"""The vocabulary side of a transfer: target token rows built from source token rows.

A ``paw-vocab-map`` (see :mod:`paw.io.vocab_map`) says that target token ``t`` is
``Σ_k w_k · source token s_k``; with identical tokenizers the map is the identity. Embedding LoRA
factors, ``lm_head`` LoRA outputs and ``modules_to_save`` rows all go through :class:`VocabIndex`.
"""

from __future__ import annotations

from dataclasses import dataclass

from paw.errors import PawError

MAX_FIT_TOKENS = 8192  # tokens used to fit residual-stream maps (a seeded sample of the shared ones)


# The way forward wherever a weight map cannot carry the adapter (another tokenizer, an unrelated model).
DISTILL_HINT = "distill it with --method distill --prompts FILE (label-free task inputs; docs/distill.md)"


def vocabulary_change(vocab_map, source_rows: int, target_rows: int, id_change: str | None) -> str | None:
    """How the two models' token ids differ, in words, or None when id ``i`` means the same on both sides.

    ``vocab_map``: a :class:`paw.io.vocab_map.VocabMapping` or None; ``id_change``: what
    :func:`paw.vocab.compare.id_difference` found comparing the two tokenizers (None: same, or unknown).
    ``(None, 256, 300, None)`` -> ``'256 source rows, 300 target rows'``.
    """
    if source_rows != target_rows:
        return f"{source_rows} source rows, {target_rows} target rows"
    if id_change is not None:
        return f"{source_rows} rows each, but {id_change}"
    if vocab_map is not None and not _maps_ids_to_themselves(vocab_map):
        return f"{source_rows} rows each, and --vocab-map sends target ids to other source ids"
    return None


def auto_refusal(change: str) -> str:
    """Why ``auto`` moves nothing across another vocabulary: the one message for every such case."""
    return (f"the vocabularies differ ({change}): --method auto moves no adapter across a tokenizer change (in "
            "PAW's benchmark no data-free method kept any of the gain there, although every module looked "
            f"related); {DISTILL_HINT}; or name a weight-space --method with --vocab-map (made by paw "
            "align-vocab) to try anyway")


def _maps_ids_to_themselves(mapping) -> bool:
    return mapping.source_size == mapping.target_size and len(mapping.entries) == mapping.target_size and all(
        ids == [t] for t, (_, ids, _) in mapping.entries.items())


@dataclass
class VocabIndex:
    """Sparse (V_t, V_s) map as flat triplets; ``identity`` when both sides share the tokenizer."""

    source_size: int
    target_size: int
    identity: bool
    tgt: object = None   # LongTensor (nnz,)
    src: object = None   # LongTensor (nnz,)
    weight: object = None  # FloatTensor (nnz,)
    mapped: int = 0

    @classmethod
    def from_mapping(cls, mapping, source_rows: int, target_rows: int) -> VocabIndex:
        """From a :class:`paw.io.vocab_map.VocabMapping` (or None: identity, sizes must agree)."""
        import torch

        if mapping is None:
            if source_rows != target_rows:
                raise PawError(f"the vocabularies differ ({source_rows} source rows, {target_rows} target "
                               "rows): pass --vocab-map (made by paw align-vocab), though across tokenizers no "
                               "weight map has kept a gain in PAW's benchmarks; or " + DISTILL_HINT)
            return cls(source_rows, target_rows, True, mapped=target_rows)
        if mapping.source_size > source_rows or mapping.target_size > target_rows:
            raise PawError(f"vocabulary map sizes {mapping.source_size}->{mapping.target_size} exceed the "
                           f"embedding rows {source_rows}->{target_rows}")
        tgt, src, w = [], [], []
        for t, (_, ids, weights) in sorted(mapping.entries.items()):
            tgt += [t] * len(ids)
            src += list(ids)
            w += list(weights)
        return cls(source_rows, target_rows, False, torch.tensor(tgt, dtype=torch.long),
                   torch.tensor(src, dtype=torch.long), torch.tensor(w, dtype=torch.float32),
                   len(mapping.entries))

    def rows(self, X):
        """(V_s, k) -> (V_t, k): each target row the weighted sum of its source rows (unmapped: zero)."""
        import torch

        if self.identity:
            return X
        out = torch.zeros(self.target_size, X.shape[1], dtype=X.dtype, device=X.device)
        w = self.weight.to(X.device, X.dtype)[:, None]
        return out.index_add_(0, self.tgt.to(X.device), X[self.src.to(X.device)] * w)

    def cols(self, X):
        """(k, V_s) -> (k, V_t)."""
        return self.rows(X.T).T

    def target_ids(self) -> list[int]:
        if self.identity:
            return list(range(self.target_size))
        return sorted(set(self.tgt.tolist()))

    def fit_rows(self, E_s, E_t, *, seed: int = 0, limit: int = MAX_FIT_TOKENS):
        """Matched rows ``(X_s, X_t)`` (n, d_s), (n, d_t) of at most ``limit`` shared tokens (seeded sample)."""
        import torch

        ids = self.target_ids()
        if len(ids) > limit:
            gen = torch.Generator().manual_seed(seed)
            pick = torch.randperm(len(ids), generator=gen)[:limit].sort().values
            ids = [ids[i] for i in pick.tolist()]
        ids_t = torch.tensor(ids, dtype=torch.long)
        if self.identity:
            return E_s[ids_t.to(E_s.device)].float(), E_t[ids_t.to(E_t.device)].float()
        keep = torch.isin(self.tgt, ids_t)
        sub = VocabIndex(self.source_size, self.target_size, False, self.tgt[keep], self.src[keep],
                         self.weight[keep], len(ids))
        X_s = sub.rows(E_s.float())[ids_t.to(E_s.device)]
        return X_s, E_t[ids_t.to(E_t.device)].float()

    def describe(self) -> dict:
        return {"identity": self.identity, "source_rows": self.source_size, "target_rows": self.target_size,
                "mapped_target_tokens": self.mapped}
