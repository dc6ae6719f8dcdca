"""Per-tensor task-vector statistics against numpy/scipy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from paw.taskvec.quantiles import QUANTILES
from paw.taskvec.stats import delta_stats

QS = np.array(QUANTILES) / 100


def reference(d: np.ndarray) -> dict:
    """Every column of per_param_stats.csv from a float32 Δ, by numpy/scipy in float64."""
    x = d.astype(np.float64).ravel()
    return {"l2": math.sqrt(float(np.dot(x, x))), "l1": float(np.abs(x).sum()), "maxabs": float(np.abs(x).max()),
            "mean": float(x.mean()), "std": float(x.std()), "skew": float(scipy.stats.skew(x)),
            "kurtosis_excess": float(scipy.stats.kurtosis(x)), "quantiles": list(np.quantile(x, QS))}


def assert_matches(stats, ref: dict, rtol: float = 1e-9) -> None:
    for key in ("l2", "l1", "maxabs", "mean", "std", "skew", "kurtosis_excess"):
        assert getattr(stats, key) == pytest.approx(ref[key], rel=rtol, abs=1e-15), key
    np.testing.assert_allclose(stats.quantiles, ref["quantiles"], rtol=1e-12, atol=0)
    assert stats.maxabs == ref["maxabs"]  # an element of Δ: exact


@pytest.mark.parametrize(("shape", "chunk_size"), [((97, 113), None), ((97, 113), 1000),
                                                   ((311, 257), None), ((311, 257), 4099)])
def test_two_bf16_models_match_numpy(shape, chunk_size):
    """Small tensors take the sort path, the 80k-element one the radix select."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(*shape, generator=gen).bfloat16()
    models = [(base.float() + 0.01 * torch.randn(*shape, generator=gen) + 0.002).bfloat16(),
              (base.float() + 0.03 * torch.randn(*shape, generator=gen)).bfloat16()]
    result = delta_stats(base, models, chunk_size=chunk_size)
    deltas = [(m.float() - base.float()).numpy() for m in models]
    for stats, d in zip(result.stats, deltas, strict=True):
        assert stats.numel == d.size
        assert_matches(stats, reference(d))
    dots = [[float(np.dot(a.ravel().astype(np.float64), b.ravel().astype(np.float64))) for b in deltas]
            for a in deltas]
    np.testing.assert_allclose(result.gram, dots, rtol=1e-12)
    assert result.stats[0].sumsq == result.gram[0][0]


def test_hand_computed_example():
    r = delta_stats(torch.zeros(4), [torch.tensor([1.0, -1.0, 2.0, 2.0])]).stats[0]
    # Δ = [1, -1, 2, 2]: mean 1, deviations [0, -2, 1, 1], m2 = 6/4, m3 = -6/4, m4 = 18/4
    assert (r.l2, r.l1, r.maxabs, r.mean) == (math.sqrt(10), 6.0, 2.0, 1.0)
    assert r.std == pytest.approx(math.sqrt(1.5))
    assert r.skew == pytest.approx(-1.5 / 1.5 ** 1.5)
    assert r.kurtosis_excess == pytest.approx(4.5 / 2.25 - 3)
    assert r.quantiles[0] == -1.0 and r.quantiles[5] == 1.5 and r.quantiles[-1] == 2.0


def test_zero_delta_has_zero_norms_and_undefined_shape_statistics():
    base = torch.randn(50)
    r = delta_stats(base, [base.clone()]).stats[0]
    assert (r.l2, r.l1, r.maxabs, r.mean, r.std) == (0.0, 0.0, 0.0, 0.0, 0.0)
    assert math.isnan(r.skew) and math.isnan(r.kurtosis_excess)  # scipy gives nan as well
    assert set(r.quantiles) == {0.0}


def test_nan_in_a_model_gives_nan_quantiles_not_a_crash():
    base = torch.zeros(10)
    model = torch.arange(10.0)
    model[3] = float("nan")
    r = delta_stats(base, [model]).stats[0]
    assert math.isnan(r.mean) and all(math.isnan(q) for q in r.quantiles)


def test_float16_and_float64_inputs_are_differenced_in_float32():
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(300, generator=gen, dtype=torch.float64)
    model = base + 1e-3 * torch.randn(300, generator=gen, dtype=torch.float64)
    r = delta_stats(base, [model]).stats[0]
    d = (model.float() - base.float()).numpy()
    assert_matches(r, reference(d))


@pytest.mark.parametrize("offset", [0.0, 3.0, 1000.0])
def test_one_pass_moments_match_two_pass_references_on_hard_cases(offset):
    """Large mean, tiny spread: the shifted power sums (one pass) keep float64 accuracy."""
    gen = torch.Generator().manual_seed(8)
    n = 200_003  # the radix path, several chunks
    base = torch.randn(n, generator=gen)
    model = base + offset + 1e-3 * torch.randn(n, generator=gen) ** 3  # skewed, heavy tails
    r = delta_stats(base, [model], chunk_size=30_000).stats[0]
    assert_matches(r, reference((model - base).numpy()))


def test_a_shift_far_from_the_mean_is_redone_in_a_second_pass():
    from paw.taskvec.stats import _Moments

    gen = torch.Generator().manual_seed(9)
    d = 500.0 + 1e-3 * torch.randn(100_000, generator=gen)
    acc = _Moments([0.0], d.device)  # no shift: the power sums cancel catastrophically
    chunks = d.split(7_000)
    for c in chunks:
        acc.first_pass([c])
    assert acc.end_first_pass(d.numel())
    for c in chunks:
        acc.second_pass([c])
    r = acc.finish(d.numel(), [tuple([0.0] * len(QUANTILES))]).stats[0]
    ref = reference(d.numpy())
    for key in ("mean", "std", "skew", "kurtosis_excess", "l2", "l1", "maxabs"):
        assert getattr(r, key) == pytest.approx(ref[key], rel=1e-9, abs=1e-15), key


def test_bf16_deltas_with_ties_match_numpy_on_the_one_pass_path():
    gen = torch.Generator().manual_seed(10)
    base = (torch.randn(512, 600, generator=gen) * 0.02).bfloat16()
    model = (base.float() + torch.randn(512, 600, generator=gen) * 2e-4).bfloat16()
    model[:100] = base[:100]  # unchanged rows: Δ = 0 exactly
    r = delta_stats(base, [model]).stats[0]
    assert_matches(r, reference((model.float() - base.float()).numpy()))
