"""Exact quantiles by radix select: bit-for-bit numpy.quantile, on tensors of any size."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from paw.taskvec.quantiles import (
    QUANTILES,
    SMALL_TENSOR,
    RadixSelect,
    SortSelect,
    exact_quantiles,
    float_keys,
    interpolation_points,
    keys_to_floats,
    order_statistics_selector,
    quantiles_from_order_stats,
    sample_positions,
    wanted_ranks,
)

QS = np.array(QUANTILES) / 100


def _numpy(x: np.ndarray) -> list[float]:
    """numpy's linear quantiles of the same values; the blend is done in float64 as PAW does it
    (numpy would round it to float32 for a float32 array; the order statistics are the same)."""
    return [float(v) for v in np.quantile(x.astype(np.float64), QS)]


def test_keys_order_floats_including_signed_zero_subnormals_and_infinities():
    values = np.array([-np.inf, -3e38, -1.0, -1e-40, -0.0, 0.0, 1e-45, 1e-40, 0.5, 1.0, 3e38, np.inf],
                      dtype=np.float32)
    keys = float_keys(torch.from_numpy(values)).tolist()
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)  # -0.0 and 0.0 differ in bits, both are 0 in value
    back = keys_to_floats(keys)
    assert np.array_equal(np.array(back, dtype=np.float32).view(np.int32), values.view(np.int32))


def test_interpolation_points_follow_numpy_linear():
    assert interpolation_points(5, [0, 50, 90, 100]) == [(0, 1, 0.0), (2, 3, 0.0), (3, 4, 0.6000000000000001),
                                                         (4, 4, 0.0)]
    assert interpolation_points(1, [0, 50, 100]) == [(0, 0, 0.0)] * 3


@pytest.mark.parametrize("values", [[7.0], [2.0, -1.0], [3.0, -1.0, 2.0, 10.0], [0.25] * 9,
                                    [-0.0, 0.0, -0.0, 1.0]])
def test_small_hand_cases_match_numpy(values):
    x = np.array(values, dtype=np.float32)
    assert exact_quantiles(torch.from_numpy(x)) == _numpy(x)


def test_hand_example():
    assert exact_quantiles(torch.tensor([3.0, -1.0, 2.0, 10.0]), [0, 25, 50, 100]) == [-1.0, 1.25, 2.5, 10.0]


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.integers(1, 400),
              elements=st.floats(-1e6, 1e6, allow_nan=False, width=32) | st.sampled_from([0.0, 1.5, -2.0])))
def test_matches_numpy_on_arbitrary_arrays(x):
    t = torch.from_numpy(x.copy())
    ours = exact_quantiles(t, chunk_size=37)  # many chunks, ragged end (sort path: small)
    ref = _numpy(x)
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=0)
    sel = RadixSelect(t.numel(), wanted_ranks(t.numel()))  # the radix path on the same input
    for c in t.split(37):
        sel.first_pass(c)
    sel.plan()
    for c in t.split(37):
        sel.second_pass(c)
    assert quantiles_from_order_stats(t.numel(), sel.values()) == ours
    # the order statistics themselves are exact, bit for bit
    assert ours[0] == float(x.min()) and ours[-1] == float(x.max())


def test_every_rank_equals_the_sorted_tensor():
    gen = torch.Generator().manual_seed(0)
    # bf16-rounded values: many ties, most keys share few high-bit buckets
    x = (torch.randn(50_000, generator=gen) * 0.01).bfloat16().float() - torch.randn(50_000, generator=gen).bfloat16().float() * 1e-3
    ranks = [0, 1, 17, 24_999, 25_000, 49_998, 49_999]
    sel = RadixSelect(x.numel(), ranks)
    chunks = x.split(4096)
    for c in chunks:
        sel.first_pass(c)
    sel.plan()
    for c in reversed(chunks):  # pass order does not matter
        sel.second_pass(c)
    ordered = torch.sort(x).values
    assert sel.values() == {r: float(ordered[r]) for r in ranks}


def test_sort_and_radix_selectors_agree():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(70_001, generator=gen).bfloat16().float()
    ranks = wanted_ranks(x.numel())
    found = []
    for cls in (SortSelect, RadixSelect):
        sel = cls(x.numel(), ranks)
        for c in x.split(8191):
            sel.first_pass(c)
        sel.plan()
        for c in x.split(8191):
            sel.second_pass(c)
        found.append(sel.values())
    assert found[0] == found[1]
    assert order_statistics_selector(SMALL_TENSOR, [0]).__class__ is SortSelect
    assert order_statistics_selector(SMALL_TENSOR + 1, [0]).__class__ is RadixSelect


def test_nan_gives_nan_like_numpy():
    x = torch.tensor([1.0, float("nan"), 2.0])
    assert all(math.isnan(v) for v in exact_quantiles(x))


def test_rank_out_of_range_is_refused():
    with pytest.raises(ValueError):
        RadixSelect(3, [3])


def test_more_than_2_to_the_24_elements_where_torch_quantile_refuses():
    n = (1 << 24) + 777_777  # 17.5M float32
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(n, dtype=np.float32) * np.float32(1e-3))
    x[:1000] = 0.0  # exact ties inside the tensor
    # (torch.quantile raises "input tensor is too large" here, after seconds of work: not re-tested)
    ours = exact_quantiles(x)
    ref = np.quantile(x.numpy().astype(np.float64), QS)
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=0)
    assert ours[0] == float(x.min()) and ours[-1] == float(x.max())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_radix_select_on_cuda_matches_numpy():
    x = torch.from_numpy(np.random.default_rng(2).standard_normal(3_000_000, dtype=np.float32))
    ours = exact_quantiles(x.cuda())
    np.testing.assert_allclose(ours, np.quantile(x.numpy().astype(np.float64), QS), rtol=1e-12, atol=0)


def _one_pass(x: torch.Tensor, ranks, sample, chunk: int = 8191):
    sel = RadixSelect(x.numel(), ranks, sample=sample)
    for c in x.split(chunk):
        sel.first_pass(c)
    again = sel.plan()
    if again:
        for c in x.split(chunk):
            sel.second_pass(c)
    return again, sel.values()


@pytest.mark.parametrize("kind", ["float32", "bf16 delta", "ties and signed zeros"])
def test_sampled_guess_finds_every_rank_in_one_pass(kind):
    gen = torch.Generator().manual_seed(5)
    n = 300_001
    if kind == "float32":
        x = torch.randn(n, generator=gen) * 1e-3 - 2e-4
    elif kind == "bf16 delta":  # Δ of bf16 weights: few distinct values, most with zero low bits
        base = (torch.randn(n, generator=gen) * 0.02).bfloat16()
        x = (base.float() + torch.randn(n, generator=gen) * 2e-4).bfloat16().float() - base.float()
    else:
        x = torch.randn(n, generator=gen)
        x[torch.rand(n, generator=gen) < 0.3] = 0.0
        x[torch.rand(n, generator=gen) < 0.1] = -0.0
    ranks = wanted_ranks(n) + [7, n // 3, n - 5]
    again, found = _one_pass(x, ranks, x[sample_positions(n)])
    assert not again
    ordered = torch.sort(x).values
    assert found == {r: float(ordered[r]) for r in sorted(set(ranks))}


def test_a_misleading_sample_costs_a_second_pass_not_exactness():
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(200_000, generator=gen)
    ranks = wanted_ranks(x.numel())
    again, found = _one_pass(x, ranks, torch.randn(5000, generator=gen) * 100 + 50)
    assert again
    ordered = torch.sort(x).values
    assert found == {r: float(ordered[r]) for r in ranks}


def test_keeping_too_much_falls_back_to_the_second_pass(monkeypatch):
    import paw.taskvec.quantiles as q

    monkeypatch.setattr(q, "KEEP_LIMIT", 0.0)
    x = torch.from_numpy(np.random.default_rng(7).standard_normal(400_000, dtype=np.float32))
    ranks = wanted_ranks(x.numel())
    again, found = _one_pass(x, ranks, x[sample_positions(x.numel())])
    assert again
    ordered = torch.sort(x).values
    assert found == {r: float(ordered[r]) for r in ranks}


def test_sample_positions_are_fixed_and_cover_small_tensors():
    assert torch.equal(sample_positions(1 << 20), sample_positions(1 << 20))
    assert sample_positions(1 << 20).numel() == 1 << 15
    assert sample_positions(1000).tolist() == list(range(1000))
