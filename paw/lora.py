"""LoRA arithmetic as pure tensor functions (no I/O).

A linear LoRA stores ``A`` with shape (r, in) and ``B`` with shape (out, r); the update to the
base weight W (out, in) is ``ΔW = scaling · B @ A`` with ``scaling = alpha / r`` (or
``alpha / sqrt(r)`` with rsLoRA, Kalajdzievski 2023). An embedding LoRA stores
``lora_embedding_A`` (r, vocab) and ``lora_embedding_B`` (hidden, r); its update to the
embedding table E (vocab, hidden) is ``ΔE = scaling · (B @ A)ᵀ``.
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


def tensors_digest(tensors: dict, prefix: bytes = b"") -> str:
    """32 hex digits of sha256 over ``prefix`` and each tensor's name and float32 bytes, in name order:
    which adapter a cached result came from."""
    h = hashlib.sha256(prefix)
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().to("cpu").contiguous().float().numpy().tobytes())
    return h.hexdigest()[:32]
