"""task-vectors --spectra against independent references on random tensors.

Sign agreement and top-k mask overlap: a dense numpy reference (stable argsort for the top-k, so ties
are kept in flat-index order as TIES trims), equal *exactly* (integer counts). Spectral statistics:
``torch.linalg.svdvals`` in float64, within 1e-4 relative, for the exact path the report takes on
every matrix whose smaller side is at most 256 (and on larger ones when asked).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paw.taskvec.spectra import (
    SpectraOptions,
    pair_counts,
    pair_matrix,
    sign_and_mask,
    spectral_stats,
    tensor_spectra,
)


def _np_mask(delta: np.ndarray, density: float) -> np.ndarray:
    flat = delta.reshape(-1)
    k = max(1, int(density * flat.size))
    order = np.argsort(-np.abs(flat), kind="stable")  # largest first, ties by index
    mask = np.zeros(flat.size, dtype=bool)
    mask[order[:k]] = True
    return mask & (flat != 0)


def _np_counts(a: np.ndarray, b: np.ndarray, density: float) -> tuple[int, int, int, int]:
    sa, sb = np.sign(a).reshape(-1), np.sign(b).reshape(-1)
    both = (sa != 0) & (sb != 0)
    ma, mb = _np_mask(a, density), _np_mask(b, density)
    return int(both.sum()), int((both & (sa == sb)).sum()), int((ma & mb).sum()), int((ma | mb).sum())


def _random_delta(shape, seed: int, *, zeros: float = 0.1, levels: int | None = None) -> np.ndarray:
    """Gaussian entries, a share of exact zeros, and optionally few distinct magnitudes (many ties)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if levels:
        x = np.round(x * levels / 3) / levels  # bf16-like coarse values: ties at the top-k threshold
    x[rng.random(shape) < zeros] = 0.0
    return x


def _correlated(a: np.ndarray, seed: int) -> np.ndarray:
    """A second task vector that shares part of the first's direction (agreement well above 0.5)."""
    rng = np.random.default_rng(seed)
    b = 0.7 * a + 0.5 * rng.standard_normal(a.shape).astype(np.float32)
    b[rng.random(a.shape) < 0.1] = 0.0
    return b


@pytest.mark.parametrize("shape, density, levels", [
    ((37, 53), 0.2, None), ((64, 64), 0.05, None), ((7, 300), 0.5, 4), ((128, 96), 0.2, 2), ((1000,), 1.0, None),
])
@pytest.mark.parametrize("seed", [0, 1])
def test_pair_counts_equal_the_numpy_reference(shape, density, levels, seed):
    a = _random_delta(shape, seed, levels=levels)
    b = _correlated(a, seed + 100) if seed else _random_delta(shape, seed + 50, levels=levels)
    if levels:
        b = np.round(b * levels / 3) / levels
    ours = pair_counts(sign_and_mask(torch.from_numpy(a), density=density),
                       sign_and_mask(torch.from_numpy(b), density=density))
    both, agree, inter, union = _np_counts(a, b, density)
    assert (ours.both, ours.agree, ours.inter, ours.union) == (both, agree, inter, union)
    assert ours.sign_agreement == agree / both and ours.mask_overlap == inter / union


def test_masks_equal_numpy_on_the_radix_path():
    # 2^20 + 3 float32 entries take kth_largest's histogram path; 64 levels make thousands of ties
    a = _random_delta((1024, 1025), 7, levels=64, zeros=0.05)
    _, mask = sign_and_mask(torch.from_numpy(a), density=0.2)
    assert np.array_equal(mask.numpy().reshape(-1), _np_mask(a, 0.2))


def test_whole_model_matrices_equal_numpy_on_concatenated_tensors():
    shapes = [(24, 40), (40,), (16, 16, 3)]
    base = [np.zeros(s, dtype=np.float32) for s in shapes]
    deltas = [[_random_delta(s, 10 * m + t, levels=8 if t == 1 else None) for t, s in enumerate(shapes)]
              for m in range(3)]
    per_tensor = []
    for t in range(len(shapes)):
        models = [torch.from_numpy(base[t] + deltas[m][t]) for m in range(3)]
        _, pairs = tensor_spectra(torch.from_numpy(base[t]), models, SpectraOptions(density=0.3))
        per_tensor.append(pairs)
    agree, overlap = pair_matrix(per_tensor, 3, "sign_agreement"), pair_matrix(per_tensor, 3, "mask_overlap")
    for i in range(3):
        for j in range(i + 1, 3):
            counts = np.sum([_np_counts(deltas[i][t], deltas[j][t], 0.3) for t in range(len(shapes))], axis=0)
            both, ag, inter, union = (int(c) for c in counts)
            assert agree[i][j] == agree[j][i] == ag / both
            assert overlap[i][j] == overlap[j][i] == inter / union


def _svdvals_reference(delta: torch.Tensor, ranks) -> tuple[float, float, list[float]]:
    S = torch.linalg.svdvals(delta.double())
    sq = S.square()
    p = S / S.sum()
    p = p[p > 0]
    return (float(sq.sum() / sq[0]), math.exp(float(-(p * p.log()).sum())),
            [float(sq[:k].sum() / sq.sum()) for k in ranks])


@pytest.mark.parametrize("shape, exact", [((48, 80), None), ((256, 200), None), ((300, 257), True),
                                          ((5, 3), None)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_spectral_stats_match_svdvals_on_random_tensors(shape, exact, dtype):
    delta = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[0])).to(dtype)
    ranks = (1, 8, 16, 64)
    s = spectral_stats(delta, ranks=ranks, exact=exact)
    stable, erank, energies = _svdvals_reference(delta, ranks)
    assert s.exact
    assert s.stable_rank == pytest.approx(stable, rel=1e-4)
    assert s.effective_rank == pytest.approx(erank, rel=1e-4)
    assert s.energies == pytest.approx(energies, rel=1e-4)


def test_spectra_exact_option_gives_svdvals_figures_on_large_flat_spectra():
    """--spectra-exact: the full SVD past the size where the randomised one runs low on a flat spectrum."""
    import torch

    from paw.taskvec.spectra import SpectraOptions, tensor_spectra

    g = torch.Generator().manual_seed(0)
    base = torch.zeros(300, 400)
    model = torch.randn(300, 400, generator=g)
    S = torch.linalg.svdvals(model.double())
    [stats], _ = tensor_spectra(base, [model], SpectraOptions(ranks=(8, 64), exact=True).check())
    assert stats.exact
    assert stats.stable_rank == pytest.approx(float(S.square().sum() / S[0] ** 2), rel=1e-4)
    assert stats.energies[1] == pytest.approx(float(S[:64].square().sum() / S.square().sum()), rel=1e-4)
    [fast], _ = tensor_spectra(base, [model], SpectraOptions(ranks=(8, 64)).check())
    assert not fast.exact   # the default path: an estimate (see docs/commands/task-vectors.md)
