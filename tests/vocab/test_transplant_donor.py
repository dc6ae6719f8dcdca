"""Donor-aware OMP (``paw transplant-tokenizer --donor``): the solver on hand-checked cases, and the
pipeline rebuilding a row that is an exact sparse combination of anchors in the donor's space."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from paw.io.tokenizer import open_tokenizer
from paw.io.vocab_map import read_vocab_map
from paw.vocab.omp import batch_omp, donor_omp


def test_batch_omp_hand_example():
    # anchors e1, e2, e3, e1+e2; x = (2, 2, 1): |x.a| = 2, 2, 1, 4 -> e1+e2, residual (0, 0, 1) -> e3
    A = torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]])
    idx, coef = batch_omp(torch.tensor([[2.0, 2, 1]]), A, k=2)
    assert idx.tolist() == [[3, 2]]
    assert coef[0].tolist() == pytest.approx([2.0, 1.0], abs=1e-6)
    # a third step finds a zero residual; whatever it picks gets coefficient 0
    idx, coef = batch_omp(torch.tensor([[2.0, 2, 1]]), A, k=3)
    assert idx[0, :2].tolist() == [3, 2] and coef[0].tolist() == pytest.approx([2.0, 1.0, 0.0], abs=1e-6)


def test_batch_omp_recovers_sparse_combinations():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(300, 64, generator=g)
    X = torch.stack([0.7 * A[3] - 1.2 * A[10] + 0.4 * A[125], 2.0 * A[7], -0.5 * A[299] + 0.25 * A[0]])
    truth = [{3: 0.7, 10: -1.2, 125: 0.4}, {7: 2.0}, {299: -0.5, 0: 0.25}]
    for k in (3, 6):
        idx, coef = batch_omp(X, A, k=k)
        for row, want in enumerate(truth):
            got = dict(zip(idx[row].tolist(), coef[row].tolist(), strict=True))
            assert set(want) <= set(got)
            for j, c in got.items():
                assert c == pytest.approx(want.get(j, 0.0), abs=1e-4)


def test_batch_omp_coefficients_are_least_squares_on_the_chosen_anchors():
    g = torch.Generator().manual_seed(1)
    A, X = torch.randn(50, 16, generator=g), torch.randn(4, 16, generator=g)
    idx, coef = batch_omp(X, A, k=5)
    assert len({tuple(sorted(r)) for r in idx.tolist()}) == 4 and all(len(set(r)) == 5 for r in idx.tolist())
    for b in range(4):
        ref = torch.linalg.lstsq(A[idx[b]].T.double(), X[b].double()).solution
        assert torch.allclose(coef[b].double(), ref, atol=1e-4)
    # the residual only shrinks as k grows
    errs = [(X - torch.einsum("bk,bkd->bd", c, A[i])).norm(dim=1) for i, c in (batch_omp(X, A, k=k) for k in (1, 3, 8))]
    assert torch.all(errs[0] >= errs[1] - 1e-5) and torch.all(errs[1] >= errs[2] - 1e-5)


def test_donor_omp_applies_donor_coefficients_to_source_ids():
    g = torch.Generator().manual_seed(2)
    D = torch.randn(10, 32, generator=g)  # donor rows, indexed by target id
    D[9] = 3.0 * D[1] - 0.5 * D[4]
    anchors = [(t, 100 + t) for t in range(8)]  # target id t is source id 100 + t
    out = donor_omp(D, anchors, [9], k=2)
    assert sorted(zip(*out[9], strict=True)) == [(101, pytest.approx(3.0, abs=1e-5)), (104, pytest.approx(-0.5, abs=1e-5))]


@pytest.fixture(scope="module")
def donor(tmp_path_factory):
    """A tied Qwen2 (hidden 64) with a 400-token tokenizer: 296 of its tokens are tiny_llama's, 100 new."""
    from paw import zoo

    return zoo.tiny_model(tmp_path_factory.mktemp("donor") / "qwen", "qwen2", seed=5, vocab_size=400,
                          hidden_size=64, num_layers=1)


def _plant(folder, new_id, combo):
    path = folder / "model.safetensors"
    state = load_file(path)
    E = state["model.embed_tokens.weight"]
    E[new_id] = sum(c * E[a] for a, c in combo.items())
    from safetensors.torch import save_file

    save_file(state, path, metadata={"format": "pt"})


def test_transplant_with_donor_rebuilds_planted_rows(cli, tiny_llama, donor, tmp_path):
    import shutil

    from transformers import AutoModelForCausalLM

    src, tgt = open_tokenizer(tiny_llama), open_tokenizer(donor)
    new = sorted(i for i in range(tgt.size) if tgt.vocab[i] is not None and tgt.vocab[i] not in src.bytes_to_id)
    shared = [i for i in range(tgt.size) if tgt.vocab[i] is not None and tgt.vocab[i] in src.bytes_to_id]
    a, b = shared[40], shared[200]
    planted = tmp_path / "donor"
    shutil.copytree(donor, planted)
    _plant(planted, new[0], {a: 0.5, b: 2.0})
    out = tmp_path / "out"
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--donor", planted, "-o", out, "--omp-k", "2",
              "--no-check")
    assert res.exit_code == 0, res.stderr
    assert "donor OMP: k=2 over 300 shared anchors, 100 tokens fitted" in res.stdout
    record = json.loads((out / "paw_transplant.json").read_text())
    assert record["coverage"] == {"exact": 296, "omp": 100, "special": 4, "unmapped": 0}
    assert record["omp"]["k"] == 2 and record["omp"]["anchors"] == 300 and "least squares" in record["omp"]["solver"]
    old = load_file(tiny_llama / "model.safetensors")
    got = load_file(out / "model.safetensors")
    sa, sb = src.bytes_to_id[tgt.vocab[a]], src.bytes_to_id[tgt.vocab[b]]
    # tiny_llama is untied: a second fit, on the donor's head (its embedding: the donor is tied)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        want = 0.5 * old[name][sa] + 2.0 * old[name][sb]
        assert torch.allclose(got[name][new[0]], want, atol=1e-4), name
        assert torch.equal(got[name][a], old[name][sa])  # shared rows copied verbatim
    for name, t in old.items():
        if name not in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(got[name], t), name
    assert read_vocab_map(out / "paw_vocab_map.json").entries[new[0]][0] == "omp"  # free weights read back
    assert read_vocab_map(out / "paw_vocab_map_head.json").coverage()["omp"] == 100
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == tgt.size


def test_donor_whose_vocabulary_differs_from_the_tokenizer_is_refused(cli, tiny_llama, tiny_qwen, donor, tmp_path):
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--donor", donor, "--tokenizer", tiny_qwen,
              "-o", tmp_path / "x", "--no-check")
    assert res.exit_code == 2
    assert "does not match the tokenizer given" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_donor_smaller_than_the_tokenizer_is_refused(cli, tiny_llama, tiny_qwen, donor, tmp_path):
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--donor", tiny_qwen, "--tokenizer", donor,
              "-o", tmp_path / "x", "--no-check")
    assert res.exit_code == 2 and "300 embedding rows but the tokenizer given has 400 ids" in res.stderr


def test_donor_and_vocab_map_together_are_refused(cli, tiny_llama, donor, tmp_path):
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--donor", donor, "--vocab-map", tmp_path / "m.json",
              "-o", tmp_path / "x")
    assert res.exit_code == 2 and "--donor and --vocab-map" in res.stderr


def test_donor_byte_fallback_pieces_are_fitted_not_anchored(cli, tiny_qwen, tmp_path):
    """A Gemma-like donor (SentencePiece with ``<0xNN>`` pieces, tied) gives a byte-level model its tokenizer:
    the byte pieces match the source's byte tokens, yet neither anchor the fit nor are copied (their donor rows
    are a fallback's; docs/benchmarks/tokenizers.md), so each is fitted and its row is no copy of a byte token."""
    from paw import zoo

    donor = zoo.tiny_model(tmp_path / "sp", "qwen2", seed=3, vocab_size=400, tokenizer_kind="sentencepiece-bpe",
                           hidden_size=32, num_layers=1)
    tgt, src = open_tokenizer(donor), open_tokenizer(tiny_qwen)
    fallback = sorted(tgt.byte_fallback_ids)
    assert len(fallback) == 256 and all(tgt.vocab[t] in src.bytes_to_id for t in fallback)
    out = tmp_path / "out"
    res = cli("transplant-tokenizer", "--model", tiny_qwen, "--donor", donor, "-o", out, "--omp-k", "4", "--no-check")
    assert res.exit_code == 0, res.stderr
    record = json.loads((out / "paw_transplant.json").read_text())
    assert record["omp"]["byte_fallback_fitted"] == 256
    entries = read_vocab_map(out / "paw_vocab_map.json").entries
    assert {entries[t][0] for t in fallback} == {"omp"}
    anchors = {t for t, e in entries.items() if e[0] != "omp"}
    assert record["omp"]["anchors"] == len(anchors) and not anchors & set(fallback)
    assert not {s for t in entries if entries[t][0] == "omp" for s in entries[t][1]} & {
        src.bytes_to_id[tgt.vocab[t]] for t in fallback if tgt.vocab[t] not in
        {tgt.vocab[a] for a in anchors}}  # no fit leans on a byte token that only a fallback piece matched
    E = load_file(out / "model.safetensors")["model.embed_tokens.weight"].float()
    S = load_file(tiny_qwen / "model.safetensors")["model.embed_tokens.weight"].float()
    copied = [t for t in fallback if torch.equal(E[t], S[src.bytes_to_id[tgt.vocab[t]]])]
    assert copied == []


def test_a_stopped_donor_fit_resumes_from_the_batches_it_kept(cli, tiny_llama, donor, tmp_path, monkeypatch):
    """Each batch of fits is kept in OUT-work/ as it is done; a run killed after 3 of its 7 batches of 16
    (of 100 tokens) resumes with --resume, fits only the rest, and writes the uninterrupted run's bytes;
    the kept batches go once the output is written, and batches kept under another key (k) are refitted."""
    from paw.vocab import omp

    whole = tmp_path / "whole"
    args = ["--model", tiny_llama, "--donor", donor, "--omp-k", "4", "--omp-batch", "16", "--no-check"]
    assert cli("transplant-tokenizer", *args, "-o", whole).exit_code == 0
    assert not (tmp_path / "whole-work").exists()        # complete: nothing kept
    real, calls = omp.batch_omp, []

    def killed_after(n):
        def fit(X, A, *, k):
            calls.append(len(X))
            if len(calls) > n:
                raise KeyboardInterrupt   # the kill
            return real(X, A, k=k)
        return fit

    out = tmp_path / "out"
    monkeypatch.setattr(omp, "batch_omp", killed_after(3))
    _killed(cli, "transplant-tokenizer", *args, "-o", out)
    kept = sorted(p.name for p in (tmp_path / "out-work").iterdir())
    assert kept == ["omp-input-00000000.safetensors", "omp-input-00000016.safetensors",
                    "omp-input-00000032.safetensors"] and not out.exists()
    calls.clear()
    monkeypatch.setattr(omp, "batch_omp", killed_after(99))
    monkeypatch.setenv("PAW_PROGRESS", "1")   # the progress line even for work this short
    res = cli("transplant-tokenizer", *args, "-o", out, "--resume")
    assert res.exit_code == 0, res.stderr
    assert len(calls) == 4 + 7     # the input rows' last 4 batches, then the head's 7 (tied donor, untied model)
    assert "fitting OMP input rows: 3 of 7 batches taken as a stopped run kept them in" in res.stderr
    assert "[paw] fitting OMP input rows: 7/7 batches (100%)" in res.stderr   # counted from the 3 taken
    assert (out / "model.safetensors").read_bytes() == (whole / "model.safetensors").read_bytes()
    assert json.loads((out / "paw_transplant.json").read_text())["omp"]["resumed_batches"] == 3
    assert not (tmp_path / "out-work").exists()
    # another k: the kept batches are not this run's
    calls.clear()
    monkeypatch.setattr(omp, "batch_omp", killed_after(1))
    _killed(cli, "transplant-tokenizer", *args, "-o", tmp_path / "k")
    calls.clear()
    monkeypatch.setattr(omp, "batch_omp", killed_after(99))
    res = cli("transplant-tokenizer", *[a if a != "4" else "3" for a in args], "-o", tmp_path / "k", "--resume")
    assert res.exit_code == 0 and len(calls) == 14
    assert json.loads((tmp_path / "k" / "paw_transplant.json").read_text())["omp"]["resumed_batches"] == 0


def _killed(cli, *args):
    """Run a command whose work is interrupted (Ctrl-C): it stops with an error, whether the CLI or the test sees it."""
    try:
        res = cli(*args)
    except KeyboardInterrupt:
        return
    assert res.exit_code != 0


def test_donor_omp_tracks_only_the_batches_it_fits():
    """A resumed fit hands the progress bar only the batches still to fit (so its rate and time left are
    this run's), and returns the same fits as a run from scratch, in target order."""
    g = torch.Generator().manual_seed(1)
    D = torch.randn(40, 8, generator=g)
    anchors = [(i, 100 + i) for i in range(10)]
    targets = list(range(10, 40))
    kept, seen = {}, []
    whole = donor_omp(D, anchors, targets, k=3, batch=8, keep=lambda s, f: kept.__setitem__(s, f))
    assert sorted(kept) == [0, 8, 16, 24]
    done = {0: kept[0], 16: kept[16], 24: {"idx": kept[24]["idx"][:, :2], "coef": kept[24]["coef"][:, :2]}}
    taken = []
    resumed = donor_omp(D, anchors, targets, k=3, batch=8, done=done,
                        track=lambda it, kept: taken.append(kept) or seen.extend(it) or seen)
    assert seen == [8, 24]            # batch 24 was kept under another k: refitted
    assert taken == [2]               # the progress counts from the two batches taken (0 and 16)
    assert list(resumed) == targets and resumed == whole
