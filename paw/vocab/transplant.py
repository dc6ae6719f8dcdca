"""Give a model a new tokenizer: remap its embedding rows, update its config, check the result.

Only the vocabulary-indexed tensors change (``embed_tokens``, ``lm_head`` and their aliases); every
row of the new matrices is built from the source rows by :func:`paw.vocab.embed.apply_mapping`.
Tied embeddings stay tied because both names (when both are stored) get the same rows.

The semantic check compares, per text, the mean-pooled last hidden state of the original model on
its own tokenization with that of the transplanted model on the new tokenization (cosine; 1.0 when
the tokenizers agree). It measures how much of the input side survived; it is not a perplexity.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.io.tokenizer import TokenizerInfo
from paw.io.vocab_map import VocabMapping
from paw.vocab.embed import apply_mapping
from paw.vocab.roles import role_id

_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def embedding_names(shapes: Mapping[str, tuple[int, ...]], rows: int) -> list[str]:
    """Names of the 2-D vocabulary tensors: an embedding or head name (:func:`paw.arch.is_vocab_tensor`), ``rows`` rows."""
    return sorted(n for n, s in shapes.items() if len(s) == 2 and s[0] == rows and arch.is_vocab_tensor(n))


def vocab_rows(config: dict) -> int:
    for cfg in (config, config.get("text_config") or {}):
        if isinstance(cfg.get("vocab_size"), int):
            return cfg["vocab_size"]
    raise PawError("model config has no vocab_size")


def new_config(config: dict, target: TokenizerInfo, rows: int) -> dict:
    """``config`` with ``vocab_size = rows`` and bos/eos/pad ids taken from the target tokenizer."""
    out = copy.deepcopy(config)
    ids = {f"{role}_token_id": role_id(target, role) for role in ("bos", "eos", "pad")}
    for cfg in (out, out.get("text_config")):
        if not isinstance(cfg, dict):
            continue
        if "vocab_size" in cfg or cfg is out:
            cfg["vocab_size"] = rows
        for key in _TOKEN_KEYS:
            if key in cfg or ids[key] is not None:
                cfg[key] = ids[key]
    return out


HEAD_POLICIES = ("mapping", "first")


COPIED = ("exact", "special")
"""Methods that copy a source row as it is; every other row is built (decompose, semantic, omp, init)."""


def tied_head_warning(coverage: Mapping[str, int], *, source_rows: int, tied: bool) -> str | None:
    """A warning when more rows are built than the source model has in all, and its head is tied.

    Each built row is then also an output row, and together they take probability from the right
    token: SmolLM2-135M given Gemma-3's tokenizer (215,888 built rows against 49,152) lost 17.8% in
    bits per byte with decompose rows and 167% with OMP's, nearly all of it in the head
    (docs/benchmarks/tokenizers.md).

    >>> tied_head_warning({"exact": 46145, "special": 3, "omp": 215888, "unmapped": 108}, source_rows=49152,
    ...                   tied=True)[:63]
    '215,996 of the 262,144 rows are built, not copied, and the head'
    >>> tied_head_warning({"exact": 46145, "omp": 3004, "unmapped": 0}, source_rows=262144, tied=True) is None
    True
    """
    built = sum(n for method, n in coverage.items() if method not in COPIED)
    if not tied or built <= source_rows:
        return None
    total = sum(coverage.values())
    return (f"{built:,} of the {total:,} rows are built, not copied, and the head is tied: each is also an output "
            f"row, more than the model's own {source_rows:,}, and together they can take much of the probability "
            "of the right token (a small model given a vocabulary five times its own lost 17-167% in bits per byte; "
            "docs/benchmarks/tokenizers.md); keep the check on, and heal")


def first_piece(mapping: VocabMapping) -> VocabMapping:
    """Every multi-piece entry reduced to its first source token (weight 1).

    For an output row this is the better guess: ``p(' token'+'izer' | h)`` is at most
    ``p(' token' | h)``, while the mean of the two rows scores ``'izer'`` *in place of* the first
    piece, which the context rarely predicts.
    """
    entries = {t: (m, src[:1], [1.0]) for t, (m, src, _) in mapping.entries.items()}
    return VocabMapping(mapping.source_size, mapping.target_size, entries, mapping.source, mapping.target)


def transplanted_tensors(tensors: Mapping[str, Any], names: list[str], mapping: VocabMapping, *,
                         rows: int, fallback: str = "mean", head: str = "mapping", tied: bool = False,
                         head_mapping: VocabMapping | None = None, device: Any = "cpu",
                         ) -> Iterator[tuple[str, Any]]:
    """Stream ``(name, tensor)``: vocabulary tensors remapped to ``rows`` rows, the rest unchanged.

    ``head='first'`` builds untied output rows (``lm_head``) from the first piece of each
    decomposition (:func:`first_piece`); ``head_mapping`` (a donor-aware fit of the head,
    :mod:`paw.vocab.omp`) replaces both for an untied head. Tied models keep one matrix, built from
    ``mapping``. Rows beyond the target vocabulary (``rows > mapping.target_size``, padding) get the
    fallback.
    """
    import torch

    if head not in HEAD_POLICIES:
        raise PawError(f"unknown head policy {head!r}; choose from {', '.join(HEAD_POLICIES)}")
    out_mapping = head_mapping or (first_piece(mapping) if head == "first" else mapping)
    for name in tensors:
        t = tensors[name]
        if name in names:
            m = out_mapping if arch.is_head(name) and not tied else mapping
            new = apply_mapping(t.to(device), m, fallback=fallback)  # (Nt, d)
            if rows > new.shape[0]:
                pad = new.float().mean(0, keepdim=True).expand(rows - new.shape[0], -1).to(new.dtype)
                new = torch.cat([new, pad])
            t = new.cpu()
        yield name, t


def semantic_check(original, transplanted, source_ids: list[list[int]], target_ids: list[list[int]],
                   *, device: Any = "cpu") -> dict[str, Any]:
    """Cosine of mean-pooled last hidden states, per text: ``{'mean','std','min','max','texts'}``."""
    import torch

    cos = []
    with torch.no_grad():
        for s, t in zip(source_ids, target_ids, strict=True):
            if not s or not t:
                continue
            h_s = original(torch.tensor([s], device=device), output_hidden_states=True).hidden_states[-1][0].mean(0)
            h_t = transplanted(torch.tensor([t], device=device), output_hidden_states=True).hidden_states[-1][0].mean(0)
            cos.append(float(torch.nn.functional.cosine_similarity(h_s.float(), h_t.float(), dim=0)))
    if not cos:
        return {"texts": 0}
    c = torch.tensor(cos, dtype=torch.float64)
    return {"texts": len(cos), "mean": round(float(c.mean()), 6),
            "std": round(float(c.std(unbiased=False)), 6), "min": round(float(c.min()), 6),
            "max": round(float(c.max()), 6)}
