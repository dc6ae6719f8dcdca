"""Spectra of task vectors (stable rank, effective rank, energy at k) and pairwise interference."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from paw.taskvec.spectra import (
    PairCounts,
    SpectraOptions,
    pair_counts,
    pair_matrix,
    sign_and_mask,
    spectral_stats,
    tensor_spectra,
)


def _reference(delta, ranks):
    """Stable rank, effective rank and energies from a dense ``torch.linalg.svd`` in float64."""
    S = torch.linalg.svd(delta.double(), full_matrices=False).S
    sq = S.square()
    p = S / S.sum()
    p = p[p > 0]
    return (float(sq.sum() / sq[0]), math.exp(float(-(p * p.log()).sum())),
            [float(sq[:k].sum() / sq.sum()) for k in ranks])


@pytest.mark.parametrize("shape", [(20, 30), (64, 48), (7, 200), (256, 300)])
def test_exact_path_matches_dense_svd(shape):
    delta = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    ranks = (1, 3, 8, 16, 64)
    s = spectral_stats(delta, ranks=ranks)
    stable, erank, energies = _reference(delta, ranks)
    assert s.exact
    assert s.stable_rank == pytest.approx(stable, rel=1e-10)
    assert s.effective_rank == pytest.approx(erank, rel=1e-10)
    assert s.energies == pytest.approx(energies, rel=1e-10, abs=1e-12)


def test_hand_example():
    s = spectral_stats(torch.diag(torch.tensor([3.0, 1.0, 0.0])), ranks=(1, 2, 8))
    p = torch.tensor([0.75, 0.25], dtype=torch.float64)
    assert s.stable_rank == pytest.approx(10 / 9)
    assert s.effective_rank == pytest.approx(math.exp(float(-(p * p.log()).sum())))
    assert s.energies == (pytest.approx(0.9), 1.0, 1.0)


def test_rank_two_delta():
    g = torch.Generator().manual_seed(0)
    U = torch.linalg.qr(torch.randn(40, 2, generator=g)).Q
    V = torch.linalg.qr(torch.randn(50, 2, generator=g)).Q
    delta = U @ torch.diag(torch.tensor([3.0, 1.0])) @ V.T  # (40, 50), rank 2
    s = spectral_stats(delta, ranks=(1, 2, 8))
    assert s.stable_rank <= 2 and s.stable_rank == pytest.approx(10 / 9, rel=1e-5)
    assert 1 < s.effective_rank <= 2
    assert s.energies[0] == pytest.approx(0.9, rel=1e-5)
    assert s.energies[1] == 1.0 and s.energies[2] == 1.0


def _known_spectrum(out_dim, in_dim, values, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = values.numel()
    U = torch.linalg.qr(torch.randn(out_dim, r, generator=g, dtype=torch.float64)).Q
    V = torch.linalg.qr(torch.randn(in_dim, r, generator=g, dtype=torch.float64)).Q
    return (U * values) @ V.T


def test_randomised_path_on_a_decaying_spectrum():
    values = 0.9 ** torch.arange(300, dtype=torch.float64)
    delta = _known_spectrum(300, 500, values).float()  # smaller side 300 > 256: randomised
    ranks = (8, 16, 64)
    s = spectral_stats(delta, ranks=ranks)
    stable, erank, energies = _reference(delta, ranks)
    assert not s.exact
    assert s.stable_rank == pytest.approx(stable, rel=1e-4)
    assert s.energies == pytest.approx(energies, rel=1e-4)
    assert s.effective_rank == pytest.approx(erank, rel=0.05)  # the tail is estimated, not computed
    again = spectral_stats(delta.clone(), ranks=ranks)
    assert again == s  # seeded: bit for bit


def test_zero_and_nonfinite_deltas_are_nan():
    for delta in (torch.zeros(5, 6), torch.full((5, 6), float("nan"))):
        s = spectral_stats(delta, ranks=(1, 2))
        assert math.isnan(s.stable_rank) and math.isnan(s.effective_rank) and all(map(math.isnan, s.energies))


def test_sign_agreement_and_mask_overlap_by_hand():
    a = sign_and_mask(torch.tensor([1.0, -2.0, 0.0, 4.0]), density=0.5)   # mask: entries 1, 3
    b = sign_and_mask(torch.tensor([3.0, 2.0, 0.0, -1.0]), density=0.5)   # mask: entries 0, 1
    assert a[1].tolist() == [False, True, False, True] and b[1].tolist() == [True, True, False, False]
    c = pair_counts(a, b)
    # both moved entries 0, 1, 3; signs agree at 0 only; masks share {1} of {0, 1, 3}
    assert c == PairCounts(both=3, agree=1, inter=1, union=3)
    assert c.sign_agreement == pytest.approx(1 / 3) and c.mask_overlap == pytest.approx(1 / 3)


def test_masks_follow_ties_and_skip_unmoved_entries():
    # k = int(0.5 * 6) = 3; ties at |2| are kept in index order (as paw merge's TIES trims)
    signs, mask = sign_and_mask(torch.tensor([2.0, -2.0, 0.5, 2.0, 2.0, 0.0]), density=0.5)
    assert mask.tolist() == [True, True, False, True, False, False]
    assert signs.tolist() == [1, -1, 1, 1, 1, 0]
    _, zero_mask = sign_and_mask(torch.zeros(6), density=0.5)
    assert not zero_mask.any()  # an unmoved tensor has no top-k entries
    c = pair_counts((signs, mask), sign_and_mask(torch.zeros(6), density=0.5))
    assert math.isnan(c.sign_agreement) and c.mask_overlap == 0.0


def test_whole_model_figures_sum_counts():
    t1 = {(0, 1): PairCounts(both=4, agree=3, inter=1, union=2)}
    t2 = {(0, 1): PairCounts(both=6, agree=2, inter=0, union=3)}
    agree = pair_matrix([t1, t2], 2, "sign_agreement")
    overlap = pair_matrix([t1, t2], 2, "mask_overlap")
    assert agree == [[1.0, 0.5], [0.5, 1.0]] and overlap == [[1.0, 0.2], [0.2, 1.0]]
    broken = pair_matrix([t1, {(0, 1): None}], 2, "sign_agreement")
    assert math.isnan(broken[0][1]) and broken[0][0] == 1.0


def test_tensor_spectra_per_model_and_pair():
    base = torch.zeros(6, 4)
    models = [base + torch.eye(6, 4), base - torch.eye(6, 4), base + 2 * torch.eye(6, 4)]
    spectra, pairs = tensor_spectra(base, models, SpectraOptions(ranks=(1, 4)))
    assert [s.stable_rank for s in spectra] == pytest.approx([4.0, 4.0, 4.0])
    assert sorted(pairs) == [(0, 1), (0, 2), (1, 2)]
    assert pairs[(0, 1)].sign_agreement == 0.0 and pairs[(0, 2)].sign_agreement == 1.0
    assert tensor_spectra(torch.zeros(3), [torch.ones(3)], SpectraOptions())[0] == [None]  # 1-D: no spectrum


def _read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def spectra_report(tmp_path_factory, tv_models):
    from paw.cli import main

    out = tmp_path_factory.mktemp("tvspectra") / "stats"
    args = ["task-vectors", "--base", str(tv_models["base"]), "--models", str(tv_models["ft1"]),
            str(tv_models["ft2"]), "--outdir", str(out), "--device", "cpu", "--spectra", "--spectra-ranks", "2,8"]
    assert main(args) == 0
    return out, args


def test_cli_writes_spectra_files(spectra_report, numpy_deltas, tv_models):
    out, _ = spectra_report
    assert {"pairwise_sign_agreement.csv", "pairwise_mask_overlap.csv", "pairwise_interference.csv"} <= {
        p.name for p in out.iterdir()}
    for model in ("ft1", "ft2"):
        names = {p.name for p in (out / model).iterdir()}
        assert {"spectra.csv", "spectra_groups.csv", "energy_by_rank.png"} <= names
    rows = _read(out / "ft1" / "spectra.csv")
    assert rows[0] == ["param", "shape", "stable_rank", "effective_rank", "energy_at_2", "energy_at_8", "exact_svd"]
    deltas = numpy_deltas(tv_models["base"], tv_models["ft1"])
    two_d = {k for k, v in deltas.items() if v.ndim == 2}
    assert {r[0] for r in rows[1:]} == two_d
    for row in rows[1:]:
        stable, erank, energies = _reference(torch.from_numpy(deltas[row[0]]), (2, 8))
        assert float(row[2]) == pytest.approx(stable, rel=1e-9) and float(row[3]) == pytest.approx(erank, rel=1e-9)
        assert [float(x) for x in row[4:6]] == pytest.approx(energies, rel=1e-9)
    info = json.loads((out / "ft1" / "summary.json").read_text())
    assert info["spectra"]["ranks"] == [2, 8] and info["spectra"]["mask_density"] == 0.2
    assert set(info["spectra"]["groups"]["attn"]) == {"tensors", "stable_rank_mean", "effective_rank_mean",
                                                      "energy_at_2", "energy_at_8"}
    agree = _read(out / "pairwise_sign_agreement.csv")
    assert agree[0] == ["model", "ft1", "ft2"] and agree[1][2] == agree[2][1]
    assert 0.4 < float(agree[1][2]) < 0.6  # two independent random fine-tunes: a coin flip
    inter = _read(out / "pairwise_interference.csv")
    assert inter[0] == ["param", "model_a", "model_b", "sign_agreement", "mask_overlap"]
    assert len(inter) - 1 == len(deltas)


def test_cli_rerun_is_byte_identical(spectra_report, tmp_path):
    from paw.cli import main

    out, args = spectra_report
    again = tmp_path / "again"
    rerun = list(args)
    rerun[rerun.index("--outdir") + 1] = str(again)
    assert main(rerun) == 0
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file() and p.name != "summary.json")
    assert files == sorted(p.relative_to(again) for p in again.rglob("*")
                           if p.is_file() and p.name != "summary.json")
    for f in files:
        assert (out / f).read_bytes() == (again / f).read_bytes(), f
    old, new = (json.loads((d / "ft1" / "summary.json").read_text()) for d in (out, again))
    old.pop("command"), new.pop("command")
    assert old == new


@pytest.mark.parametrize("flags", [["--spectra-ranks", "0,8"], ["--spectra-ranks", "a,b"],
                                   ["--mask-density", "0"], ["--mask-density", "1.5"]])
def test_bad_spectra_flags_exit_2(cli, tmp_path, tv_models, flags):
    result = cli("task-vectors", "--base", tv_models["base"], "--models", tv_models["ft1"],
                 "--outdir", tmp_path / "out", "--spectra", *flags)
    assert result.exit_code == 2
    assert flags[0] in result.stderr and not (tmp_path / "out").exists()
