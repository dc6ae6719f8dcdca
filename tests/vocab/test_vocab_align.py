"""Exact figures on hand-built vocabularies; alignment methods; mappings applied to embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from paw.errors import PawError
from paw.io.tokenizer import open_tokenizer
from paw.io.vocab_map import VocabMapping, read_vocab_map, write_vocab_map
from paw.vocab import compare
from paw.vocab.align import AlignContext, align, greedy_pieces
from paw.vocab.embed import apply_mapping, omp_affine
from paw.vocab.ngram import NgramIndex, ngrams


@pytest.fixture(scope="module")
def pair(handmade):
    return open_tokenizer(handmade["source"]), open_tokenizer(handmade["target"])


def test_handmade_vocabulary_figures(pair):
    src, tgt = pair
    assert (src.size, tgt.size) == (264, 273)
    assert compare.sizes(src)["distinct_bytes"] == 262 and compare.sizes(tgt)["distinct_bytes"] == 263
    diff = compare.vocab_diff(src, tgt)
    assert (diff["common"], diff["source_only"], diff["target_only"]) == (262, 0, 1)
    assert diff["jaccard"] == pytest.approx(262 / 263) and diff["overlap_coefficient"] == 1.0
    assert diff["_target_only"] == [(272, b" cats")]
    roles = compare.special_table(src, tgt)
    assert roles["bos"] == {"source": ["<s>"], "target": ["<s>"]} and roles["unk"] == {"source": [], "target": ["<unk>"]}


def test_handmade_encoding_figures(pair):
    """'the cat': source t|he| cat (ends 1,3,7), target ▁the|▁cat (ends 3,7): ratio 2/3, agreement 2/3."""
    src, tgt = pair
    texts = ["the cat"]
    assert [src.token_bytes(i) for i in src.encode(texts[0])] == [b"t", b"he", b" cat"]
    assert [tgt.token_bytes(i) for i in tgt.encode(texts[0])] == [b" the", b" cat"]
    rows = compare.encoding_rows(texts, ["latin"], src, tgt, src.encode_with_ends(texts), tgt.encode_with_ends(texts))
    r = rows[0]
    assert (r["source_tokens"], r["target_tokens"], r["boundaries_shared"], r["boundaries_union"]) == (3, 2, 2, 3)
    assert r["length_ratio"] == pytest.approx(2 / 3, abs=1e-6)
    summary = compare.summarize_rows(rows)["overall"]
    assert summary["source_bytes_per_token"] == pytest.approx(7 / 3, abs=1e-6) and summary["target_bytes_per_token"] == 3.5


def test_handmade_fallback_and_unknown_rates(pair):
    src, tgt = pair
    texts = ["the cat", "the ω"]  # ω: 2 byte-fallback pieces in the target, 2 byte tokens in the source
    rows = compare.encoding_rows(texts, ["latin", "greek"], src, tgt, src.encode_with_ends(texts),
                                 tgt.encode_with_ends(texts))
    assert [r["target_byte_fallback"] for r in rows] == [0, 2]
    assert [r["source_byte_fallback"] for r in rows] == [0, 0]


def test_default_alignment_coverage(pair):
    src, tgt = pair
    m = align(AlignContext(src, tgt))
    assert m.coverage() == {"decompose": 1, "exact": 269, "special": 2, "unmapped": 1}
    method, ids, weights = m.entries[272]  # ' cats' -> ' cat' + 's'
    assert method == "decompose" and [src.token_bytes(i) for i in ids] == [b" cat", b"s"] and weights == [0.5, 0.5]
    assert m.entries[1] == ("special", [src.backend.token_to_id("<s>")], [1.0])
    assert 0 not in m.entries  # <unk>: the source has none
    # byte-fallback <0x41> and the piece 'a'... map to the single-byte source tokens
    assert m.entries[3 + 0x41] == ("exact", [0x41], [1.0])


def test_nearest_string_and_frequency(pair):
    src, tgt = pair
    m = align(AlignContext(src, tgt), ["nearest-string"])
    assert src.token_bytes(m.entries[272][1][0]) == b" cat"  # ' cats' closest to ' cat'
    counts = np.zeros(src.size, dtype=np.int64)
    counts[src.bytes_to_id[b" cat"]] = 99  # frequent piece gets the smaller weight
    counts[src.bytes_to_id[b"s"]] = 1
    m = align(AlignContext(src, tgt, source_counts=counts), ["exact", "frequency"])
    method, ids, w = m.entries[272]
    assert method == "frequency" and w[0] < w[1] and sum(w) == pytest.approx(1.0)


def test_semantic_reconstructs_combinations_of_shared_tokens(pair):
    src, tgt = pair
    E = torch.randn(src.size, 64, generator=torch.Generator().manual_seed(0))
    m = align(AlignContext(src, tgt, source_embeddings=E, k=4), ["exact", "semantic"])
    method, ids, w = m.entries[272]
    assert method == "semantic" and len(ids) == 4 and sum(w) == pytest.approx(1.0, abs=1e-5)
    # the decomposition mean is itself an affine combination of two shared rows: OMP must find it
    target = (E[src.bytes_to_id[b" cat"]] + E[src.bytes_to_id[b"s"]]) / 2
    got = sum(wi * E[i] for i, wi in zip(ids, w, strict=True))
    assert torch.allclose(got, target, atol=1e-4)


def test_greedy_pieces():
    vocab = {b"h": 0, b"he": 1, b"hell": 2, b"o": 3, b"l": 4}
    assert greedy_pieces(b"hello", vocab, 4) == [2, 3]
    assert greedy_pieces(b"hex", vocab, 4) is None


def test_ngram_index_is_exact_dice():
    assert ngrams(b"the") == {"\x02th", "the", "he\x03"}
    idx = NgramIndex([b"cat", b"cats", b"dog"])
    (row, score), (none, zero) = idx.nearest([b"catz", b"xyz"])
    assert row == 0 and score == pytest.approx(2 * 2 / (4 + 3))  # {^ca,cat} shared; |catz|=4, |cat|=3
    assert (none, zero) == (-1, 0.0)


def test_apply_mapping_moves_the_right_rows():
    E = torch.arange(12.0).reshape(4, 3)  # rows r_i = [3i, 3i+1, 3i+2]
    m = VocabMapping(4, 3, {0: ("exact", [3], [1.0]), 2: ("decompose", [0, 2], [0.25, 0.75])})
    out = apply_mapping(E, m)
    assert torch.equal(out[0], E[3])
    assert torch.allclose(out[2], 0.25 * E[0] + 0.75 * E[2])
    assert torch.allclose(out[1], E.mean(0))  # unmapped -> mean row
    assert torch.equal(apply_mapping(E, m, fallback="zero")[1], torch.zeros(3))
    assert apply_mapping(E.half(), m).dtype == torch.float16


def test_omp_affine_recovers_a_sparse_code():
    A = torch.randn(50, 16, generator=torch.Generator().manual_seed(1))
    X = torch.stack([0.7 * A[3] + 0.3 * A[10], 1.5 * A[7] - 0.5 * A[20]])
    idx, w = omp_affine(X, A, k=2)
    assert sorted(idx[0].tolist()) == [3, 10] and sorted(idx[1].tolist()) == [7, 20]
    assert torch.allclose(w.sum(1), torch.ones(2), atol=1e-5)


def test_vocab_map_round_trip_and_errors(tmp_path):
    m = VocabMapping(10, 4, {3: ("decompose", [1, 2], [0.5, 0.5]), 0: ("exact", [7], [1.0])}, "s", "t")
    path = write_vocab_map(tmp_path / "m.json", m)
    back = read_vocab_map(path)
    assert back.entries == m.entries and (back.source_size, back.target_size) == (10, 4)
    import json

    data = json.loads(path.read_text())
    assert data["entries"][0] == [0, "exact", [7], [1.0]] and data["coverage"] == {"decompose": 1, "exact": 1,
                                                                                    "unmapped": 2}
    for bad, msg in ((dict(data, format="x"), "not a vocabulary mapping"),
                     (dict(data, entries=[[0, "exact", [7], [0.4]]]), "sum to"),
                     (dict(data, entries=[[0, "exact", [70], [1.0]]]), "outside")):
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(PawError, match=msg):
            read_vocab_map(tmp_path / "bad.json")


def test_head_first_uses_first_piece_for_untied_output_only():
    from paw.vocab.transplant import transplanted_tensors

    E = torch.arange(12.0).reshape(4, 3)
    H = -E
    m = VocabMapping(4, 2, {0: ("exact", [3], [1.0]), 1: ("decompose", [1, 2], [0.5, 0.5])})
    tensors = {"model.embed_tokens.weight": E, "lm_head.weight": H, "model.norm.weight": torch.ones(3)}
    names = ["lm_head.weight", "model.embed_tokens.weight"]
    out = dict(transplanted_tensors(tensors, names, m, rows=2, head="first"))
    assert torch.allclose(out["model.embed_tokens.weight"][1], (E[1] + E[2]) / 2)
    assert torch.equal(out["lm_head.weight"][1], H[1]) and torch.equal(out["lm_head.weight"][0], H[3])
    assert torch.equal(out["model.norm.weight"], torch.ones(3))
    tied = dict(transplanted_tensors(tensors, names, m, rows=3, head="first", tied=True))
    assert torch.allclose(tied["lm_head.weight"][1], (H[1] + H[2]) / 2)
    assert tied["lm_head.weight"].shape == (3, 3)  # padded row: the mean of the new rows
    with pytest.raises(PawError, match="head policy"):
        list(transplanted_tensors(tensors, names, m, rows=2, head="last"))


def test_donor_anchors_leave_byte_fallback_pieces_to_the_fit(pair):
    from paw.vocab.donor import anchor_entries

    src, tgt = pair
    exact = align(AlignContext(src, tgt), ["exact"])
    assert exact.entries[3 + 0x41] == ("exact", [0x41], [1.0])   # <0x41> matches the source's 'A' byte
    anchors = anchor_entries(exact, tgt)
    assert len(tgt.byte_fallback_ids) == 256
    assert not set(anchors.entries) & tgt.byte_fallback_ids
    # every other match stays, unchanged: of the 273 ids, <s> and </s> by role, the 7 single characters
    # and the 6 pieces (not <unk>, which the source lacks, nor '▁cats')
    assert {t: e for t, e in exact.entries.items() if t not in tgt.byte_fallback_ids} == anchors.entries
    assert len(anchors.entries) == len(exact.entries) - 256 == 2 + 7 + 6
