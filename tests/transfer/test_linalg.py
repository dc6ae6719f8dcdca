"""Pure pieces: randomized SVD against the full one, overlap and chance, ridge maps, matching, layer DP."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paw.transfer import linalg
from paw.transfer.layers import match_layers, monotone_assignment, relative_depth_scores
from paw.transfer.structural import match_units


def _low_rank_plus_noise(out=300, inn=200, rank=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(out, rank, generator=gen)).Q
    V = torch.linalg.qr(torch.randn(inn, rank, generator=gen)).Q
    S = torch.linspace(10, 5, rank)
    return (U * S) @ V.T + 0.01 * torch.randn(out, inn, generator=gen)


def test_randomized_svd_matches_full_svd_on_its_subspace():
    W = _low_rank_plus_noise()
    U, S, V = linalg.top_singular(W, 10, seed=3)
    Uf, Sf, Vf = linalg.full_singular(W, 10)
    assert torch.allclose(S, Sf, rtol=1e-3)
    assert linalg.subspace_similarity(U, Uf) > 0.9999 and linalg.subspace_similarity(V, Vf) > 0.9999
    U2, _, _ = linalg.top_singular(W, 10, seed=3)
    assert torch.equal(U, U2)  # seeded: repeatable to the bit
    assert (U[U.abs().argmax(0), torch.arange(10)] > 0).all()  # canonical signs


def test_similarity_of_random_subspaces_sits_at_chance():
    gen = torch.Generator().manual_seed(1)
    d, R = 400, 20
    sims = [linalg.subspace_similarity(torch.linalg.qr(torch.randn(d, R, generator=gen)).Q,
                                       torch.linalg.qr(torch.randn(d, R, generator=gen)).Q) for _ in range(20)]
    assert abs(sum(sims) / len(sims) - linalg.chance_similarity(R, d)) < 0.01  # R/d = 0.05


def test_scaled_residual_values():
    W = torch.randn(20, 10, generator=torch.Generator().manual_seed(0))
    assert abs(linalg.scaled_residual(W, 3 * W)) < 1e-6  # issue 24: 3.6e-4 on an AMD EPYC before
    assert linalg.scaled_residual(W, 2 * W) < 1e-12  # 2W is exact in float32: float64 rounding only
    assert abs(linalg.scaled_residual(W, torch.zeros_like(W)) - 1.0) < 1e-12
    noise = torch.randn(20, 10, generator=torch.Generator().manual_seed(1))
    noise -= (noise * W).sum() / (W * W).sum() * W  # orthogonal to W
    assert abs(linalg.scaled_residual(W + noise, W) - float(noise.norm() / (W + noise).norm())) < 1e-6


def test_scaled_residual_small_residuals_have_relative_accuracy():
    # A residual far below float32's epsilon relative to the norms: the expansion
    # ‖t‖² − 2c⟨t,h⟩ + c²‖h‖² loses it entirely (0 or ~1e-4 depending on the BLAS's rounding, whatever
    # the CPU), the direct sum keeps three significant digits against a float64 reference.
    gen = torch.Generator().manual_seed(2)
    W = torch.randn(512, 384, generator=gen)
    noise = torch.randn(512, 384, generator=gen).double()
    W64 = W.double()
    noise -= (noise * W64).sum() / (W64 * W64).sum() * W64
    for size in (1e-6, 1e-4, 1e-2):
        T = (W64 + size * noise / noise.norm() * W64.norm()).float()
        T64 = T.double()
        c = float((T64 * W64).sum() / (W64 * W64).sum())
        ref = float((T64 - c * W64).norm() / T64.norm())
        assert abs(linalg.scaled_residual(T, W) - ref) <= 1e-3 * ref, size
        assert abs(linalg.scaled_residual(T, 2.5 * W) - ref) <= 1e-3 * ref, size


def test_scaled_residual_across_chunks(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    T, H = torch.randn(37, 11, generator=gen), torch.randn(37, 11, generator=gen)
    whole = linalg.scaled_residual(T, H)
    monkeypatch.setattr(linalg, "RESIDUAL_CHUNK", 10)  # 41 blocks, the last one short
    assert abs(linalg.scaled_residual(T, H) - whole) < 1e-12
    T64, H64 = T.double().reshape(-1), H.double().reshape(-1)
    c = max(float(T64 @ H64 / (H64 @ H64)), 0.0)
    assert abs(whole - float((T64 - c * H64).norm() / T64.norm())) < 1e-12


def test_lora_norm_of_a_product_much_smaller_than_its_factors():
    # B A = 0 exactly while ‖A‖, ‖B‖ are large: the trace formula must not report rounding noise
    A = torch.zeros(2, 64)
    A[0, :] = 1000.0
    B = torch.zeros(64, 2)
    B[:, 1] = 1000.0
    assert linalg.lora_norm(A, B) == 0.0
    gen = torch.Generator().manual_seed(5)
    A, B = torch.randn(4, 50, generator=gen), torch.randn(30, 4, generator=gen)
    assert abs(linalg.lora_norm(A, B) - float((B.double() @ A.double()).norm())) < 1e-9 * float((B @ A).norm())


def test_lora_norm_equals_dense_norm():
    gen = torch.Generator().manual_seed(0)
    A, B = torch.randn(4, 30, generator=gen), torch.randn(50, 4, generator=gen)
    assert abs(linalg.lora_norm(A, B) - float((B @ A).norm())) < 1e-3


def test_ridge_map_recovers_a_rotation_and_is_identity_on_equal_data():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(500, 16, generator=gen)
    Q = torch.linalg.qr(torch.randn(16, 16, generator=gen)).Q
    assert torch.allclose(linalg.ridge_map(X, X @ Q.T, 1e-8), Q, atol=1e-4)
    assert torch.equal(linalg.ridge_map(X, X, 1e-2), torch.eye(16))


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 12), st.integers(1, 10), st.integers(1, 6), st.integers(0, 1000))
def test_push_through_maps_equal_the_direct_solution(out_s, k, r, seed):
    """left_map_apply solves a (k, k) system; compare with the (out, out) normal equations."""
    gen = torch.Generator().manual_seed(seed)
    Ws, Wt, B = (torch.randn(out_s, k, generator=gen, dtype=torch.float64), torch.randn(out_s + 1, k, generator=gen,
                 dtype=torch.float64), torch.randn(out_s, r, generator=gen, dtype=torch.float64))
    lam = linalg.ridge_lambda(Ws, 0.1)
    J = torch.eye(out_s + 1, out_s, dtype=torch.float64)
    direct = (Wt @ Ws.T + lam * J) @ torch.linalg.inv(Ws @ Ws.T + lam * torch.eye(out_s, dtype=torch.float64))
    assert torch.allclose(linalg.left_map_apply(B, Ws, Wt, 0.1).double(), direct @ B, atol=1e-3)


def test_match_units_finds_a_permutation_and_leaves_new_units_unpaired():
    gen = torch.Generator().manual_seed(0)
    F = torch.randn(30, 64, generator=gen)
    perm = torch.randperm(30, generator=gen)[:20]
    got = match_units(torch.cat([F[perm], torch.randn(5, 64, generator=gen)]), F)
    assert got.index[:20] == perm.tolist() and got.index[20:] == [-1] * 5


def test_monotone_assignment_and_layer_maps():
    assert monotone_assignment([[1, 0, 0], [0, 0, 1]]) == [(0, 0), (1, 2)]
    assert monotone_assignment([[1, 0], [0, 0], [0, 1]]) == [(0, 0), (2, 1)]
    assert match_layers(relative_depth_scores(4, 2)) == {0: 0, 3: 1}
    assert match_layers(relative_depth_scores(2, 4)) == {0: 0, 1: 3}


def test_sketched_gram_residual_is_zero_for_equal_reads_and_near_one_for_independent():
    gen = torch.Generator().manual_seed(4)
    W, Q = torch.randn(200, 40, generator=gen), torch.linalg.qr(torch.randn(200, 200, generator=gen)).Q
    other = torch.randn(200, 40, generator=gen)

    def gram_of(M):
        return lambda X: M.T @ (M @ X)

    # a rotation of the output side leaves the Gram of the input side unchanged
    same = linalg.gram_residual_sketch(gram_of(Q @ W), gram_of(W), 40, float(W.pow(2).sum()), float(W.pow(2).sum()))
    assert same < 1e-4
    indep = linalg.gram_residual_sketch(gram_of(other), gram_of(W), 40, float(other.pow(2).sum()),
                                        float(W.pow(2).sum()))
    exact = linalg.centered_gram_residual(other.T @ other, W.T @ W)
    assert indep > 0.9 and abs(indep - exact) < 0.1
