"""The pure math of extract-lora against hand-derived values and a dense ``torch.linalg.svd``."""

from __future__ import annotations

import math

import pytest
import torch

from paw.extract.svd import (
    BLOCK,
    choose_rank,
    difference,
    lora_factors,
    reference_error,
    relative_error,
    spectrum,
    squared_norm,
)


def _known(out: int, inn: int, singular, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(out, len(singular), generator=gen)).Q
    V = torch.linalg.qr(torch.randn(inn, len(singular), generator=gen)).Q
    return (U * torch.tensor(singular)) @ V.T


def test_energy_picks_the_hand_known_rank():
    spec = spectrum(_known(12, 9, [3.0, 2.0, 1.0]), limit=9, exact=True)
    assert spec.energies()[:3] == pytest.approx([9 / 14, 13 / 14, 1.0], abs=1e-6)
    assert [choose_rank(spec, energy=e) for e in (0.5, 0.9, 0.95, 1.0)] == [1, 2, 3, 3]
    assert choose_rank(spec, energy=1.0, max_rank=2) == 2        # the cap wins
    assert choose_rank(spec, rank=5) == 5 and choose_rank(spec, rank=50) == 9  # never above min(out, in)


@pytest.mark.parametrize("exact", [True, False])
def test_errors_match_a_dense_svd(exact):
    # 300 x 280: above the 256 at which top_singular switches to its randomised path
    gen = torch.Generator().manual_seed(1)
    delta = _known(300, 280, [8.0, 4.0, 2.0, 1.0, 0.5], seed=2) + 0.01 * torch.randn(300, 280, generator=gen)
    spec = spectrum(delta, limit=8, exact=exact, seed=0)
    for rank in (1, 2, 4):
        A, B = lora_factors(spec, rank)
        assert A.shape == (rank, 280) and B.shape == (300, rank)
        assert relative_error(delta, A, B) == pytest.approx(reference_error(delta, rank), rel=1e-3, abs=1e-5)
    held = spec.energies()[1]
    assert held == pytest.approx(1 - reference_error(delta, 2) ** 2, abs=1e-4)


def test_factors_are_balanced_and_embedding_layout_transposes():
    delta = _known(20, 6, [5.0, 1.0])  # an embedding table: (vocab, hidden)
    spec = spectrum(delta, limit=6, exact=True)
    A, B = lora_factors(spec, 2)
    assert float(A.norm()) == pytest.approx(float(B.norm()), rel=1e-5)  # sqrt(S) on each side
    A_e, B_e = lora_factors(spec, 2, embedding=True)
    assert A_e.shape == (2, 20) and B_e.shape == (6, 2)  # PEFT's lora_embedding_A (r, vocab), _B (hidden, r)
    assert torch.allclose((B_e @ A_e).T, delta, atol=1e-5)
    assert relative_error(delta, A_e, B_e, embedding=True) < 1e-5
    assert relative_error(delta, A_e[:1], B_e[:, :1], embedding=True) == pytest.approx(math.sqrt(1 / 26), rel=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_squared_norm_in_blocks_is_the_float64_sum(dtype):
    # more than one block, a ragged last one; bfloat16 widened block by block, float64 kept
    t = torch.randn(BLOCK * 2 + 777, generator=torch.Generator().manual_seed(3)).to(dtype)
    assert squared_norm(t) == pytest.approx(float(t.double().square().sum()), rel=1e-9)
    assert squared_norm(torch.tensor([3.0, 4.0])) == 25.0 and squared_norm(torch.zeros(5)) == 0.0
    tiny = torch.full((4,), 1e-30, dtype=torch.float64).float()  # float32 squares underflow to 0
    assert squared_norm(tiny) == pytest.approx(4e-60, rel=1e-6)


@pytest.mark.parametrize("embedding", [False, True])
def test_relative_error_in_row_blocks_is_the_dense_one(embedding):
    # rows past one block (BLOCK // 300 rows a block) and a ragged last block, both layouts
    gen = torch.Generator().manual_seed(4)
    out, inn, r = BLOCK // 300 * 2 + 13, 300, 3
    left, right = torch.randn(out, r, generator=gen), torch.randn(r, inn, generator=gen)
    delta = left @ right + 0.1 * torch.randn(out, inn, generator=gen, dtype=torch.float64).float()
    A, B = (left.T, right.T) if embedding else (right, left)  # embedding: Δ ≈ (B A)ᵀ = Aᵀ Bᵀ
    dense = float((delta.double() - left.double() @ right.double()).norm() / delta.double().norm())
    assert relative_error(delta, A, B, embedding=embedding) == pytest.approx(dense, rel=1e-5)
    total = float(delta.double().square().sum())
    assert relative_error(delta, A, B, embedding=embedding, total=total) == pytest.approx(dense, rel=1e-5)
    assert relative_error(torch.zeros(4, 3), torch.zeros(1, 3), torch.zeros(4, 1)) == 0.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_difference_is_the_widened_subtraction(dtype):
    # blocks of a bf16 / fp16 base subtracted from the widened fine-tune: the same bits as widening both
    gen = torch.Generator().manual_seed(5)
    f, b = (torch.randn(BLOCK // 100 + 7, 100, generator=gen).to(dtype) for _ in range(2))
    kept = f.clone()
    delta = difference(f, b, dtype=torch.float32)
    assert delta.dtype == torch.float32 and torch.equal(delta, f.float() - b.float())
    assert torch.equal(f, kept)  # the fine-tune is left as it was
    same = torch.randn(3, 4, generator=gen)  # float32 weights: one copy, the base subtracted as is
    assert torch.equal(difference(same, 2 * same, dtype=torch.float32), -same)
    half = torch.tensor([1.5, 2.0], dtype=torch.bfloat16)
    assert difference(half, torch.tensor([0.5, 0.5], dtype=torch.bfloat16), dtype=torch.float32).tolist() == [1.0, 1.5]
