"""LoRA arithmetic as pure tensor functions (no I/O).

A linear LoRA stores ``A`` with shape (r, in) and ``B`` with shape (out, r); the update to the
base weight W (out, in) is ``ΔW = scaling · B @ A`` with ``scaling = alpha / r`` (or
``alpha / sqrt(r)`` with rsLoRA, Kalajdzievski 2023). An embedding LoRA stores
``lora_embedding_A`` (r, vocab) and ``lora_embedding_B`` (hidden, r); its update to the
embedding table E (vocab, hidden) is ``ΔE = scaling · (B @ A)ᵀ``.

DoRA (Liu et al. 2024, "DoRA: Weight-Decomposed Low-Rank Adaptation", arXiv:2402.09353) adds a
magnitude vector m and merges as ``W' = m ⊙ (W + ΔW) / ||W + ΔW||``, the norm taken per output
row of a linear weight (PEFT's ``norm(dim=1)`` of the (out, in) matrix: m has ``out`` entries) and
per hidden column of an embedding table (over the vocabulary: m has ``hidden`` entries), as PEFT's
``lora/dora.py`` and ``variants.py`` merge it.
"""

from __future__ import annotations

import hashlib
import math


def lora_scaling(r: int, alpha: float, *, rslora: bool = False) -> float:
    """``r=8, alpha=16`` -> 2.0; with ``rslora`` -> 16 / sqrt(8)."""
    return alpha / math.sqrt(r) if rslora else alpha / r


def lora_delta(A, B, scaling: float, *, embedding: bool = False):
    """ΔW in the base weight's layout: (out, in) for linear, (vocab, hidden) for embeddings."""
    delta = (B.float() @ A.float()) * scaling
    return delta.T if embedding else delta


def apply_lora(W, A, B, scaling: float, *, magnitude=None, embedding: bool = False,
               rows: tuple[int, int] | None = None):
    """The merged weight ``W + ΔW``, or DoRA's ``m ⊙ (W + ΔW) / ||W + ΔW||`` with ``magnitude``, in float32.

    ``W`` is the base weight (out, in) (embedding: (vocab, hidden)), or its rows ``[start, stop)``
    when ``rows`` is given; only those rows of the result are computed. A linear DoRA row needs only
    its own row; an embedding DoRA column norm runs over every row, so ``rows`` is refused there.
    Tiny example (linear, 1x2): ``W = [[3, 0]]``, ``ΔW = [[0, 4]]``, ``m = [10]`` -> LoRA ``[[3, 4]]``,
    DoRA ``10 · [3, 4] / 5 = [[6, 8]]``.
    """
    import torch

    start, stop = rows if rows is not None else (None, None)
    if embedding:
        delta = (B.float() @ A[:, start:stop].float()).T * scaling           # (rows, hidden)
    else:
        delta = (B[start:stop].float() @ A.float()) * scaling                # (rows, in)
    merged = W.float() + delta
    if magnitude is None:
        return merged
    if embedding:
        if rows is not None:
            raise ValueError("a DoRA embedding's column norms need the whole table, not rows of it")
        return merged * (magnitude.float() / torch.linalg.norm(merged, dim=0)).view(1, -1)
    m = magnitude[start:stop].float()
    return merged * (m / torch.linalg.norm(merged, dim=1)).view(-1, 1)


def tensors_digest(tensors: dict, prefix: bytes = b"") -> str:
    """32 hex digits of sha256 over ``prefix`` and each tensor's name and float32 bytes, in name order:
    which adapter a cached result came from."""
    h = hashlib.sha256(prefix)
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().to("cpu").contiguous().float().numpy().tobytes())
    return h.hexdigest()[:32]
