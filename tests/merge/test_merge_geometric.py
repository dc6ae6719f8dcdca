"""The methods added for mergekit's breadth, on hand-sized tensors against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from paw.merge import geometric, sparse
from paw.merge.methods import METHODS, get_method

R = math.sqrt(0.5)


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


# ---------------------------------------------------------------- SLERP

@pytest.mark.parametrize("shape", [(2,), (1, 2)])
def test_slerp_ends_are_the_inputs(shape):
    v0, v1 = t(3.0, 1.0).reshape(shape), t(-1.0, 2.0).reshape(shape)
    torch.testing.assert_close(geometric.slerp(0.0, v0, v1), v0)
    torch.testing.assert_close(geometric.slerp(1.0, v0, v1), v1)


def test_slerp_of_orthogonal_vectors_follows_the_arc():
    # unit vectors 90° apart: t = 0.5 is the arc's midpoint, t = 1/3 is 30° from v0
    torch.testing.assert_close(geometric.slerp(0.5, t(1.0, 0.0), t(0.0, 1.0)), t(R, R))
    torch.testing.assert_close(geometric.slerp(1 / 3, t(1.0, 0.0), t(0.0, 1.0)),
                               t(math.cos(math.pi / 6), math.sin(math.pi / 6)))
    # unnormalised inputs of norm 2 keep norm 2 along the arc (a plain average would have norm 1.414)
    torch.testing.assert_close(geometric.slerp(0.5, t(2.0, 0.0), t(0.0, 2.0)), t(2 * R, 2 * R))


def test_slerp_of_nearly_collinear_vectors_falls_back_to_lerp():
    v0, v1 = t(1.0, 0.0), t(1.0, 0.01)  # cos = 0.99995 > 0.9995
    assert geometric.slerp_coefficients(0.3, v0, v1) == (0.7, 0.3)
    torch.testing.assert_close(geometric.slerp(0.3, v0, v1), 0.7 * v0 + 0.3 * v1)
    # antiparallel is collinear too: the midpoint is the plain average (zero), not a division by sin π
    torch.testing.assert_close(geometric.slerp(0.5, t(1.0, 0.0), t(-1.0, 0.0)), t(0.0, 0.0))
    # just outside the threshold the coefficients are the spherical ones and still finite
    theta = math.acos(0.999)
    s0, s1 = geometric.slerp_coefficients(0.5, t(1.0, 0.0), t(0.999, math.sqrt(1 - 0.999 ** 2)))
    assert s0 == pytest.approx(math.sin(theta / 2) / math.sin(theta), rel=1e-6) and s1 == pytest.approx(s0, rel=1e-6)


def test_slerp_with_a_zero_tensor_treats_it_as_orthogonal():
    s0, s1 = geometric.slerp_coefficients(0.5, t(0.0, 0.0), t(3.0, 4.0))
    assert s0 == pytest.approx(R) and s1 == pytest.approx(R)


def test_slerp_method_returns_the_task_vector_of_the_interpolation():
    gen = torch.Generator().manual_seed(0)
    base, model = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    merged = base + get_method("slerp")(base, [model - base], [1.0], t=0.25)
    torch.testing.assert_close(merged, geometric.slerp(0.25, base, model), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- NuSLERP, Multi-SLERP, Karcher

def test_nuslerp_rowwise_interpolates_each_row_and_lerps_collinear_rows():
    v0 = t(1.0, 0.0, 2.0, 0.0).reshape(2, 2)
    v1 = t(0.0, 1.0, 4.0, 0.0).reshape(2, 2)   # row 0 orthogonal, row 1 collinear
    out = geometric.nuslerp(0.5, v0, v1, flatten=False)
    torch.testing.assert_close(out, t(R, R, 3.0, 0.0).reshape(2, 2))


def test_nuslerp_takes_t_from_the_second_weight_and_works_on_task_vectors_with_a_base():
    base = t(5.0, 5.0)
    d = [t(1.0, 0.0), t(0.0, 1.0)]
    out = get_method("nuslerp")(base, [x.clone() for x in d], [1.0, 3.0], base_given=True)   # t = 3/4
    torch.testing.assert_close(out, t(math.cos(3 * math.pi / 8), math.sin(3 * math.pi / 8)))
    # without a base the two full models are interpolated (base is the first model, its delta zero)
    m0, m1 = t(1.0, 0.0), t(0.0, 1.0)
    out = get_method("nuslerp")(m0, [m0 - m0, m1 - m0], [1.0, 1.0], base_given=False)
    torch.testing.assert_close(m0 + out, t(R, R))


def test_karcher_mean_of_two_directions_is_the_arc_midpoint_times_the_mean_norm():
    out = geometric.karcher_mean([t(2.0, 0.0), t(0.0, 4.0)], [0.5, 0.5])
    torch.testing.assert_close(out, t(3 * R, 3 * R))
    # three directions 120° apart on a circle plus the third axis: symmetric, so the mean is that axis
    a = [t(1.0, 0.0, 1.0), t(-0.5, math.sqrt(3) / 2, 1.0), t(-0.5, -math.sqrt(3) / 2, 1.0)]
    out = geometric.karcher_mean(a, [1 / 3] * 3, max_iter=50, tol=1e-7)
    torch.testing.assert_close(out, t(0.0, 0.0, math.sqrt(2)), atol=1e-5, rtol=1e-5)


def test_multislerp_of_two_orthogonal_unit_vectors_is_the_midpoint():
    out = get_method("multislerp")(t(0.0, 0.0), [t(1.0, 0.0), t(0.0, 1.0)], [1.0, 1.0], base_given=True)
    torch.testing.assert_close(out, t(R, R))


# ---------------------------------------------------------------- Model Stock

def test_model_stock_ratio_for_two_fine_tunes_at_sixty_degrees_is_two_thirds():
    assert geometric.model_stock_ratio(0.5, 2) == pytest.approx(2 / 3)
    assert geometric.model_stock_ratio(1.0, 5) == pytest.approx(1.0)   # identical fine-tunes: take their mean
    assert geometric.model_stock_ratio(0.0, 3) == 0.0                   # orthogonal: stay at the base


def test_model_stock_moves_the_base_by_the_ratio_towards_the_mean():
    base = t(1.0, 1.0)
    d1, d2 = t(1.0, 0.0), t(0.5, math.sqrt(3) / 2)            # 60° apart, cos = 0.5
    out = get_method("model-stock")(base, [d1.clone(), d2.clone()], [0.9, 0.1])   # weights are not read
    torch.testing.assert_close(out, (2 / 3) * (d1 + d2) / 2)
    # filter_wise: one ratio per row (row 0 at 60°, row 1 identical -> ratio 1)
    rows = [torch.stack([d1, t(2.0, 0.0)]), torch.stack([d2, t(2.0, 0.0)])]
    out = get_method("model-stock")(torch.zeros(2, 2), [r.clone() for r in rows], [1, 1], filter_wise=True)
    torch.testing.assert_close(out, torch.stack([(2 / 3) * (d1 + d2) / 2, t(2.0, 0.0)]))


# ---------------------------------------------------------------- DELLA, breadcrumbs-ties, SCE, nearswap, passthrough

def test_della_keep_probabilities_rise_with_magnitude_rank():
    p = sparse.della_keep_probabilities(t(0.3, -0.1, 0.2), density=0.5, epsilon=0.1)
    torch.testing.assert_close(p, t(0.6, 0.4, 0.5))
    rows = sparse.della_keep_probabilities(t(1.0, 2.0, 4.0, 3.0).reshape(2, 2), density=0.5, epsilon=0.2)
    torch.testing.assert_close(rows, t(0.3, 0.7, 0.7, 0.3).reshape(2, 2))


def test_della_keeps_about_density_and_rescales_to_the_l1_norm():
    gen = torch.Generator().manual_seed(0)
    delta = torch.randn(200, 100, generator=gen)
    out = sparse.sparsify_della(delta.clone(), density=0.3, epsilon=0.1, generator=torch.Generator().manual_seed(1))
    kept = float((out != 0).float().mean())
    assert abs(kept - 0.3) < 0.01          # 20,000 Bernoulli draws: stderr 0.0032
    assert float(out.abs().sum()) == pytest.approx(float(delta.abs().sum()), rel=1e-5)
    again = sparse.sparsify_della(delta.clone(), density=0.3, epsilon=0.1, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, again)
    # larger entries survive more often than small ones
    big = delta.abs() > delta.abs().median()
    assert float((out != 0)[big].float().mean()) > float((out != 0)[~big].float().mean()) + 0.05


def test_breadcrumbs_ties_sums_the_agreeing_entries_without_dividing():
    # density 1 and gamma 0 keep everything; elected sign of Σ w Δ: [+, -]
    deltas = [t(0.4, -0.2), t(0.2, 0.6), t(-0.1, -0.8)]
    out = get_method("breadcrumbs-ties")(None, deltas, [1.0, 1.0, 1.0], density=1.0, gamma=0.0)
    torch.testing.assert_close(out, t(0.6, -1.0))
    deltas = [t(0.4, -0.2), t(0.2, 0.6), t(-0.1, -0.8)]
    out = get_method("breadcrumbs-ties")(None, deltas, [1.0, 1.0, 1.0], density=1.0, gamma=0.0, normalize=True)
    torch.testing.assert_close(out, t(0.3, -0.5))


def test_per_model_densities_trim_each_task_vector_on_its_own():
    deltas = [t(0.1, 0.9, -0.5, 0.2), t(0.3, -0.4, 0.2, -0.1)]
    out = get_method("ties")(None, deltas, [1.0, 1.0], density=[0.25, 1.0])
    # model 1 keeps only 0.9; model 2 keeps all; elected signs [+, +, +, -]
    torch.testing.assert_close(out, t(0.3, 0.9, 0.2, -0.1))


def test_sce_weights_by_energy_and_erases_minority_signs():
    deltas = [t(1.0, -2.0), t(3.0, 1.0)]         # energies 2.5 and 5 -> weights 1/3, 2/3; signs [+, -]
    out = get_method("sce")(None, [d.clone() for d in deltas], [1, 1])
    torch.testing.assert_close(out, t(7 / 3, -2.0))
    # select_topk 0.5 keeps the entry of largest variance across models (entry 1: 2.25 > 1)
    out = get_method("sce")(None, [d.clone() for d in deltas], [1, 1], select_topk=0.5)
    torch.testing.assert_close(out, t(0.0, -2.0))


def test_nearswap_moves_at_most_t_towards_the_model():
    out = get_method("nearswap")(t(0.0, 0.0), [t(0.1, 2.0)], [1.0], t=0.5)
    torch.testing.assert_close(out, t(0.1, 0.5))


def test_passthrough_keeps_the_model_and_applies_its_scale():
    model = t(1.0, -2.0)
    assert torch.equal(model + get_method("passthrough")(model, [torch.zeros(2)], [1.0]), model)
    torch.testing.assert_close(model + get_method("passthrough")(model, [torch.zeros(2)], [1.0], multiplier=[0.5]),
                               0.5 * model)


def test_every_method_cites_a_reference():
    for name, method in METHODS.items():
        assert len(method.paper) > 10 and method.summary, name


@pytest.mark.parametrize("n", [10, (1 << 22) - 1, 1 << 22, 3 * (1 << 22) + 77])
def test_the_chunked_dot_sums_the_chunks_as_before(n):
    """Reused float64 buffers give the bits of widening each chunk afresh, summed left to right."""
    from paw.merge.geometric import _dot

    gen = torch.Generator().manual_seed(n)
    a, b = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    chunks = zip(a.split(1 << 22), b.split(1 << 22), strict=True)
    assert _dot(a, b) == float(sum(float(torch.dot(x.double(), y.double())) for x, y in chunks))
