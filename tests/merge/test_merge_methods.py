"""The merge functions on hand-sized tensors, against hand-computed values and the numpy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paw.errors import PawError
from paw.merge.methods import (
    METHODS,
    get_method,
    sign_consensus_mean,
    sparsify_outliers,
    sparsify_random,
    tensor_seed,
    top_k_mask,
)
from tests.merge import merge_reference as ref


def test_registry_holds_the_methods_in_order_each_with_its_paper():
    assert list(METHODS) == ["task-arithmetic", "ties", "dare-linear", "dare-ties", "breadcrumbs", "breadcrumbs-ties",
                             "della", "della-linear", "linear", "slerp", "nuslerp", "multislerp", "karcher",
                             "model-stock", "nearswap", "sce", "passthrough"]
    assert all(m.paper and m.summary for m in METHODS.values())
    # TIES and DARE are parameter sets of one function, not separate implementations
    assert METHODS["ties"].fn is METHODS["dare-ties"].fn is METHODS["task-arithmetic"].fn
    assert METHODS["ties"].fixed == {"sparsify": "magnitude", "consensus": True}
    assert METHODS["breadcrumbs-ties"].fixed == {"sparsify": "outliers", "consensus": True, "normalize": False}
    assert METHODS["dare-linear"].fixed == {"sparsify": "random"}
    assert not METHODS["linear"].needs_base


def test_unknown_method_lists_valid_names():
    with pytest.raises(PawError, match="choose one of: task-arithmetic, ties"):
        get_method("slurp")


def test_top_k_mask_keeps_exactly_k_and_breaks_ties_by_index():
    x = torch.tensor([0.1, 0.5, 0.3, 0.5, 0.5, 0.2])
    assert top_k_mask(x, 2).tolist() == [False, True, False, True, False, False]
    assert top_k_mask(x, 4).tolist() == [False, True, True, True, True, False]
    assert top_k_mask(x, 0).sum() == 0 and top_k_mask(x, 9).all()


def test_top_k_mask_matches_stable_sort_on_many_ties():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 7, (40, 30), generator=gen).float()  # 7 distinct values: ties everywhere
    for k in (1, 100, 599, 1199):
        expected = ref.rank_mask(x.numpy(), 0, k)
        assert np.array_equal(top_k_mask(x, k).numpy(), expected)


def test_ties_hand_example_from_the_module_docstring():
    # one entry, three models: elected sign +, agreeing {0.3, 0.2}, equal weights -> mean 0.25
    w = [1 / 3] * 3
    weighted = [torch.tensor([v], dtype=torch.float64) / 3 for v in (0.3, -0.1, 0.2)]
    assert sign_consensus_mean(weighted, w).item() == pytest.approx(0.25)
    merged = get_method("ties")(None, [torch.tensor([0.3]), torch.tensor([-0.1]), torch.tensor([0.2])], w,
                                density=1.0)
    assert merged.item() == pytest.approx(0.25)
    ta = get_method("task-arithmetic")(None, [torch.tensor([0.3]), torch.tensor([-0.1]), torch.tensor([0.2])], w)
    assert ta.item() == pytest.approx(0.4 / 3)


def test_ties_weighted_mean_and_zero_sign_elects_plus():
    # weights 0.75/0.25: sum of weighted is 0.75*0.4 - 0.25*1.2 = 0 -> elected +, only model 0 agrees
    d = [torch.tensor([0.4], dtype=torch.float64), torch.tensor([-1.2], dtype=torch.float64)]
    merged = get_method("ties")(None, d, [0.75, 0.25], density=1.0)
    assert merged.item() == pytest.approx(0.4)


def test_ties_matches_reference_on_random_tensors():
    gen = torch.Generator().manual_seed(1)
    deltas = [torch.randn(17, 9, generator=gen) for _ in range(3)]
    w = [0.5, 0.3, 0.2]
    want = ref.ties([d.numpy() for d in deltas], w, 0.3)  # first: methods overwrite their deltas
    got = get_method("ties")(None, deltas, w, density=0.3).double().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_breadcrumbs_drops_outliers_and_the_tail():
    d = torch.arange(1, 101, dtype=torch.float32)  # magnitudes 1..100
    kept = sparsify_outliers(d.clone(), density=0.2, gamma=0.05)
    # drop the 5 largest (96..100), keep the next 20 (76..95)
    assert torch.nonzero(kept).reshape(-1).tolist() == list(range(75, 95))
    got = get_method("breadcrumbs")(None, [d.clone(), -d], [0.7, 0.3], density=0.2, gamma=0.05).double().numpy()
    np.testing.assert_allclose(got, ref.breadcrumbs([d.numpy(), -d.numpy()], [0.7, 0.3], 0.2, 0.05), rtol=1e-6)


def test_dare_drops_at_the_rate_rescales_and_is_seeded():
    d = torch.ones(200_000)
    a = sparsify_random(d.clone(), drop_rate=0.9, generator=torch.Generator().manual_seed(5))
    b = sparsify_random(d.clone(), drop_rate=0.9, generator=torch.Generator().manual_seed(5))
    c = sparsify_random(d.clone(), drop_rate=0.9, generator=torch.Generator().manual_seed(6))
    assert torch.equal(d, torch.ones(200_000))
    assert torch.equal(a, b) and not torch.equal(a, c)
    kept = a != 0
    assert abs(kept.float().mean().item() - 0.1) < 0.005
    assert torch.allclose(a[kept], torch.full_like(a[kept], 10.0))  # 1 / (1 - 0.9)
    assert abs(a.mean().item() - 1.0) < 0.05  # expectation preserved


def test_tensor_seed_is_stable_and_distinct():
    assert tensor_seed(0, "lm_head.weight", 1) == tensor_seed(0, "lm_head.weight", 1)
    seeds = {tensor_seed(s, n, i) for s in (0, 1) for n in ("a", "b") for i in (0, 1)}
    assert len(seeds) == 8
    # a fixed value: BLAKE2b, not Python's per-process hash()
    assert tensor_seed(0, "x", 0) == 731594208413708128


def test_methods_work_in_place_on_deltas_and_never_touch_base():
    gen = torch.Generator().manual_seed(4)
    base = torch.randn(30, 20, generator=gen)
    keep = base.clone()
    for name, method in METHODS.items():
        n = method.n_models[1] or 3
        deltas = [torch.randn(30, 20, generator=gen) for _ in range(n)]
        gens = [torch.Generator().manual_seed(i) for i in range(n)]
        out = method(base, deltas, [0.2, 0.3, 0.5][:n], density=0.5, drop_rate=0.5, gamma=0.1, epsilon=0.1,
                     generators=gens)
        assert out.shape == base.shape and torch.isfinite(out).all()
        assert torch.equal(base, keep), name


def test_linear_is_the_weighted_average_of_full_models():
    gen = torch.Generator().manual_seed(2)
    models = [torch.randn(5, 4, generator=gen) for _ in range(3)]
    reference_model = models[0]
    deltas = [m - reference_model for m in models]
    merged = reference_model + get_method("linear")(reference_model, deltas, [2.0, 1.0, 1.0])
    assert merged.data_ptr() != reference_model.data_ptr()
    np.testing.assert_allclose(merged.numpy(), ref.soup([m.numpy() for m in models], [2, 1, 1]),
                               rtol=1e-5, atol=1e-6)


def test_kth_largest_radix_path_is_exact():
    from paw.merge.methods import kth_largest

    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(1 << 21, generator=gen) * 0.01).bfloat16().float().abs()  # many ties, > 2^20 entries
    x[:5] = 0.0
    for k in (1, 7, 1000, (1 << 21) // 5, (1 << 21) - 3, 1 << 21):
        assert kth_largest(x, k).item() == torch.kthvalue(x, x.numel() - k + 1).values.item()
    mask = top_k_mask(x, 12345)
    assert int(mask.sum()) == 12345
    assert np.array_equal(mask.numpy(), ref.rank_mask(x.numpy(), 0, 12345))


def _sign_consensus_with_masks(weighted, weights, normalize=True):
    """The definition, written with boolean masks (the code before the branch-free form)."""
    plus = sum(weighted[1:], weighted[0].clone()) >= 0
    total, divisor = torch.zeros_like(weighted[0]), torch.zeros_like(weighted[0])
    for t, w in zip(weighted, weights, strict=True):
        agree = torch.where(plus, t > 0, t < 0)
        total.add_(torch.where(agree, t, 0.0))
        divisor.add_(agree, alpha=w)
    if not normalize:
        return total
    divisor[divisor == 0] = 1.0
    return total.div_(divisor)


@pytest.mark.parametrize("normalize", [True, False])
def test_sign_consensus_gives_the_bits_of_the_masked_definition(normalize):
    """Signed zeros, subnormals, infinities, weights of both signs summing to 0, and NaN (the masked path)."""
    gen = torch.Generator().manual_seed(1)
    values = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-45, -1e-45, 3e38, -3e38, math.inf, -math.inf, math.nan])
    for trial in range(120):
        k = 1 + trial % 4
        pool = values if trial % 4 == 0 else values[:-1]
        ts = [pool[torch.randint(0, len(pool), (512,), generator=gen)] * (1 + trial % 2 * torch.rand(512, generator=gen))
              for _ in range(k)]
        weights = [0.5, -0.5, 0.25, -0.25][:k] if trial % 3 == 0 else torch.randn(k, generator=gen).tolist()
        want = _sign_consensus_with_masks([t.clone() for t in ts], weights, normalize)
        got = sign_consensus_mean([t.clone() for t in ts], weights, normalize=normalize)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), trial


@pytest.mark.parametrize("shape", [(7,), (1,), (3, 1), (5, 0), (64, 33), (4, 2, 3), ()])
def test_della_ranks_are_the_argsort_of_the_argsort(shape):
    from paw.merge.sparse import della_keep_probabilities

    delta = torch.randn(shape, generator=torch.Generator().manual_seed(0)).bfloat16().float()  # ties in |Δ|
    rows = delta.reshape(1, -1) if delta.dim() < 2 else delta.reshape(delta.shape[0], -1)
    ranks = torch.argsort(torch.argsort(rows.abs(), dim=1), dim=1).float()
    norm = ranks / (rows.shape[1] - 1) if rows.shape[1] > 1 else torch.zeros_like(ranks)
    assert torch.equal(della_keep_probabilities(delta, density=0.5, epsilon=0.1),
                       (0.4 + norm * 0.2).reshape(delta.shape))
