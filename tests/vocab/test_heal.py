"""Heal (``paw heal-transplant``, ``paw transplant-tokenizer --heal-steps``): only the estimated rows
change, every other tensor keeps its bytes, transformers loads the result, bad input is one line."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from paw.data import sample_texts
from paw.errors import PawError
from paw.vocab.heal import rows_to_heal, token_stream, windows
from tests.io.fake_hub import card_of


def test_rows_to_heal_keeps_exact_and_special_rows():
    entries = {0: ("exact", [5], [1.0]), 1: ("decompose", [1, 2], [0.5, 0.5]), 3: ("special", [0], [1.0]),
               4: ("omp", [7, 8], [2.0, -1.0])}
    assert rows_to_heal(entries, 6) == [1, 2, 4, 5]  # 2 and 5 are unmapped (the mean row)


def test_windows_and_token_stream():
    assert windows([[1, 2, 3, 4, 5], [6]], 2) == [[1, 2], [3, 4], [5], [6]]
    assert token_stream([[1, 2], [3]], unk_id=0, seq_len=2, where="c.txt") == [1, 2, 3]
    with pytest.raises(PawError, match="c.txt: the tokenizer cannot encode this corpus: 75% of its 4 tokens"):
        token_stream([[0, 0, 0, 1]], unk_id=0, seq_len=2, where="c.txt")
    with pytest.raises(PawError, match="gives 2 tokens, fewer than one training window of 4"):
        token_stream([[1, 2]], unk_id=None, seq_len=3, where="c.txt")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("heal") / "corpus.txt"
    path.write_text("\n".join(sample_texts("multi") * 3), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def transplanted(tiny_llama, trained, tmp_path_factory):
    """tiny_llama (untied) moved to the zoo's SentencePiece tokenizer: many decomposed rows to heal."""
    from paw.vocab.options import TransplantOptions
    from paw.vocab.pipelines import transplant_tokenizer

    out = tmp_path_factory.mktemp("heal") / "sp"
    transplant_tokenizer(TransplantOptions(model=tiny_llama, tokenizer=trained["sentencepiece-bpe"], output=out,
                                           check=False))
    return out


def _tensors(folder):
    with safe_open(folder / "model.safetensors", "pt") as f:
        return {n: f.get_tensor(n) for n in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)


def test_heal_changes_only_the_estimated_rows(cli, transplanted, corpus, tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "healed"
    res = cli("heal-transplant", "--model", transplanted, "--corpus", corpus, "-o", out, "--steps", "12",
              "--seq-len", "32", "--batch", "4", "--lr", "0.01", "--original", tiny_llama)
    assert res.exit_code == 0, res.stderr
    record = json.loads((out / "paw_heal.json").read_text())
    mapping = json.loads((transplanted / "paw_vocab_map.json").read_text())
    heal = set(rows_to_heal({t: (m, s, w) for t, m, s, w in mapping["entries"]}, mapping["target_size"]))
    assert record["rows_trained"] == len(heal) > 0
    assert [p["step"] for p in record["curve"]] == [0, 2, 4, 6, 8, 10, 12]
    assert record["bpb"]["after"] < record["bpb"]["before"]  # 12 steps at lr 0.01 on the text it is scored on
    assert record["bpb"]["original"] > 0 and (out / "heal_curve.png").stat().st_size > 1000
    meta, body = card_of(out)  # the card: the model the transplant came from, the figures of the record
    assert meta == {"library_name": "transformers", "tags": ["paw", "tokenizer-transplant", "heal-transplant"]}
    assert f"`{tiny_llama}` is a local path" in body and f"- rows trained: {record['rows_trained']} " in body
    assert f"bits per byte on held-out text: {record['bpb']['before']:.4f} -> {record['bpb']['after']:.4f}" in body
    assert "![heal_curve.png](heal_curve.png)" in body
    before, after = _tensors(transplanted), _tensors(out)
    assert before.keys() == after.keys()
    for name, t in before.items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            changed = {int(i) for i in (after[name] != t).any(1).nonzero().flatten()}
            assert changed and changed <= heal, name  # Adam moves a row only where its gradient was non-zero
            keep = torch.tensor(sorted(set(range(t.shape[0])) - heal))
            assert after[name][keep].numpy().tobytes() == t[keep].numpy().tobytes()
        else:
            assert after[name].numpy().tobytes() == t.numpy().tobytes(), name
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.get_input_embeddings().weight.shape[0] == mapping["target_size"]
    assert f"healed {len(heal):,} rows for 12 steps" in res.stdout and "held-out bits per byte" in res.stdout


def test_transplant_with_heal_steps_writes_both_reports(cli, tiny_llama, trained, corpus, tmp_path):
    out = tmp_path / "t"
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", trained["sentencepiece-bpe"], "-o", out,
              "--no-check", "--heal-steps", "2", "--heal-corpus", corpus)
    assert res.exit_code == 0, res.stderr
    record = json.loads((out / "paw_transplant.json").read_text())
    assert record["heal"]["steps"] == 2 and record["heal"]["bpb"]["original"] > 0
    assert (out / "paw_heal.json").is_file() and (out / "paw_vocab_map.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # the intermediate transplant is gone


def _tracked(folder) -> dict[str, dict[int, float]]:
    """``metric -> {step: value}`` of a ``--track csv`` run."""
    import csv

    rows: dict[str, dict[int, float]] = {}
    with open(folder / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["metric"], {})[int(row["step"])] = float(row["value"])
    return rows


def test_heal_and_transplant_heal_track_the_curve(cli, tiny_llama, trained, transplanted, corpus, tmp_path):
    out = tmp_path / "healed"
    res = cli("heal-transplant", "--model", transplanted, "--corpus", corpus, "-o", out, "--steps", "4",
              "--seq-len", "16", "--batch", "2", "--eval-every", "2", "--track", "csv")
    assert res.exit_code == 0, res.stderr
    record = json.loads((out / "paw_heal.json").read_text())
    rows = _tracked(tmp_path / "healed-tracking")
    assert rows["test/bpb"] == {p["step"]: p["bpb"] for p in record["curve"]}
    assert rows["train/loss"] == {p["step"]: p["train_loss"] for p in record["curve"][1:]}  # step 0: no loss yet
    assert rows["heal/bpb_after"] == {4: record["bpb"]["after"]} and rows["heal/rows_trained"][4] > 0
    assert f"tracking (csv): {tmp_path / 'healed-tracking'}" in res.stdout
    moved = tmp_path / "t"
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", trained["sentencepiece-bpe"], "-o", moved,
              "--no-check", "--heal-steps", "2", "--heal-corpus", corpus, "--track", "csv")
    assert res.exit_code == 0, res.stderr
    curve = json.loads((moved / "paw_heal.json").read_text())["curve"]
    assert _tracked(tmp_path / "t-tracking")["test/bpb"] == {p["step"]: p["bpb"] for p in curve}


def test_heal_bad_input_is_one_line(cli, tiny_llama, trained, transplanted, corpus, tmp_path):
    cases = [
        (["transplant-tokenizer", "--model", tiny_llama, "--tokenizer", trained["wordpiece"], "-o", tmp_path / "a",
          "--heal-steps", "5"], "--heal-steps needs --heal-corpus"),
        (["heal-transplant", "--model", tiny_llama, "--corpus", corpus, "-o", tmp_path / "b"], "no paw_vocab_map.json"),
    ]
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    cases.append((["heal-transplant", "--model", transplanted, "--corpus", binary, "-o", tmp_path / "c"],
                  "not UTF-8"))
    for args, words in cases:
        res = cli(*args)
        assert res.exit_code == 2, (args, res.stderr)
        assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert not (tmp_path / args[args.index("-o") + 1].name).exists()


def test_heal_refuses_a_corpus_the_tokenizer_cannot_encode(cli, tiny_llama, trained, tmp_path):
    from paw.vocab.options import TransplantOptions
    from paw.vocab.pipelines import transplant_tokenizer

    wp = tmp_path / "wp"
    transplant_tokenizer(TransplantOptions(model=tiny_llama, tokenizer=trained["wordpiece"], output=wp, check=False))
    junk = tmp_path / "junk.txt"
    junk.write_text("\n".join("\ue000\ue001 \ue002\ue003 \ue004" for _ in range(50)), encoding="utf-8")
    res = cli("heal-transplant", "--model", wp, "--corpus", junk, "-o", tmp_path / "out")
    assert res.exit_code == 2 and "the tokenizer cannot encode this corpus" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_heal_on_cuda_changes_only_the_estimated_rows(cli, transplanted, corpus, tmp_path):
    out = tmp_path / "healed-cuda"
    res = cli("heal-transplant", "--model", transplanted, "--corpus", corpus, "-o", out, "--steps", "6",
              "--seq-len", "32", "--batch", "4", "--lr", "0.01", "--device", "cuda")
    assert res.exit_code == 0, res.stderr
    record = json.loads((out / "paw_heal.json").read_text())
    assert record["device"].startswith("cuda") and record["bpb"]["after"] < record["bpb"]["before"]
    mapping = json.loads((transplanted / "paw_vocab_map.json").read_text())
    heal = set(rows_to_heal({t: (m, s, w) for t, m, s, w in mapping["entries"]}, mapping["target_size"]))
    before, after = _tensors(transplanted), _tensors(out)
    for name, t in before.items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            assert {int(i) for i in (after[name] != t).any(1).nonzero().flatten()} <= heal
        else:
            assert after[name].numpy().tobytes() == t.numpy().tobytes(), name
