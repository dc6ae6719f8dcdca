"""Fine-tunes whose deltas are known by construction, over the session's tiny zoo models.

Every projection of layer 0 moves by a rank-2 delta with singular values (2c, c) (energy 0.8 at
rank 1), every projection of layer 1 and the head by (c, c) (energy 0.5 at rank 1), so the rank
``--energy`` must pick, the error at rank 1 and the exact reconstruction at rank 2 are all known.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from paw import arch


def rank2_delta(shape, singular, *, seed: int, scale: float):
    """``scale · Σ s_i u_i v_iᵀ`` with orthonormal u (out, 2), v (in, 2) drawn from ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(shape[0], 2, generator=gen)).Q
    V = torch.linalg.qr(torch.randn(shape[1], 2, generator=gen)).Q
    return scale * (U * torch.tensor(singular)) @ V.T


def make_finetune(base: Path, folder: Path, *, head: str = "rank2", embed: str = "same", norm: bool = False) -> Path:
    """Save ``base`` moved by known deltas: projections always; ``head`` / ``embed`` 'rank2', 'full' or 'same'."""
    import torch
    from transformers import AutoModelForCausalLM

    from paw import zoo

    model = AutoModelForCausalLM.from_pretrained(base)
    fam = arch.family(model.config.to_dict())
    params = dict(model.named_parameters(remove_duplicate=False))
    moves = {}
    for i in range(model.config.num_hidden_layers):
        for k, proj in enumerate(fam.projections):
            moves[fam.layer_tensor(i, proj.path)] = ("rank2", (2.0, 1.0) if i == 0 else (1.0, 1.0), 10 * i + k)
    moves[fam.head] = (head, (1.0, 1.0), 100)
    moves[fam.embed] = (embed, (1.0, 1.0), 101)
    with torch.no_grad():
        for name, (how, singular, seed) in moves.items():
            if how == "same" or name not in params:
                continue
            p = params[name]
            scale = 0.2 * float(p.norm()) / float(torch.tensor(singular).norm())
            if how == "rank2":
                p.add_(rank2_delta(p.shape, singular, seed=seed, scale=scale))
            else:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)) * 0.2 * float(p.std()))
        if norm:
            params[fam.final_norm].add_(0.05)
    return zoo.save_model(model, folder)


@pytest.fixture(scope="session")
def llama_ft(zoo_root, tiny_llama) -> Path:
    """tiny_llama with rank-2 projection deltas, a full-rank head delta and the embedding unchanged."""
    return make_finetune(tiny_llama, zoo_root / "extract-llama-ft", head="full")


@pytest.fixture(scope="session")
def llama_ft_norm(zoo_root, tiny_llama) -> Path:
    """As ``llama_ft`` with a rank-2 head delta and the final norm moved (a delta no LoRA carries)."""
    return make_finetune(tiny_llama, zoo_root / "extract-llama-ft-norm", head="rank2", norm=True)


@pytest.fixture(scope="session")
def qwen_ft(zoo_root, tiny_qwen) -> Path:
    """tiny_qwen (tied head) with rank-2 projection deltas and a rank-2 delta of the shared embedding."""
    return make_finetune(tiny_qwen, zoo_root / "extract-qwen-ft", head="same", embed="rank2")
