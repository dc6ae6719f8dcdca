"""transplant-tokenizer end to end, and the three commands' outputs and error handling."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from paw.io.tokenizer import open_tokenizer

TEXT = "The quick brown fox jumps over the lazy dog. 北京 def f(x): return x"


@pytest.fixture(scope="module")
def permuted(tiny_llama, tmp_path_factory):
    """tiny_llama's tokenizer with its regular ids shuffled: same segmentation, different ids."""
    data = json.loads((tiny_llama / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    regular = sorted(i for i in vocab.values() if i >= 4)
    perm = dict(zip(regular, [regular[j] for j in torch.randperm(len(regular),
                                                                generator=torch.Generator().manual_seed(0))],
                    strict=True))
    data["model"]["vocab"] = {p: perm.get(i, i) for p, i in vocab.items()}
    out = tmp_path_factory.mktemp("perm") / "tok"
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    shutil.copy(tiny_llama / "tokenizer_config.json", out / "tokenizer_config.json")
    return out, perm


def test_transplant_to_permuted_tokenizer_keeps_logits(cli, tiny_llama, permuted, tmp_path):
    from transformers import AutoModelForCausalLM

    tok_dir, perm = permuted
    out = tmp_path / "out"
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", tok_dir, "--output", out,
              "--check-texts", "4")
    assert res.exit_code == 0, res.stderr
    assert "warning:" not in res.stderr   # every row copied: nothing is built
    record = json.loads((out / "paw_transplant.json").read_text())
    assert record["coverage"] == {"exact": 296, "special": 4, "unmapped": 0}
    assert record["semantic_check"]["min"] == pytest.approx(1.0, abs=1e-5)
    src, tgt = open_tokenizer(tiny_llama), open_tokenizer(tok_dir)
    assert src.fast is not None and tgt.fast is None  # shuffled ids: merges no longer follow ids
    ids_old = src.encode(TEXT)
    ids_new = tgt.encode(TEXT)
    assert ids_new == [perm.get(i, i) for i in ids_old]
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out)(TEXT, add_special_tokens=False)["input_ids"] == ids_new
    old = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    new = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        lo = old(torch.tensor([ids_old])).logits[0]
        ln = new(torch.tensor([ids_new])).logits[0]
    order = torch.tensor([perm.get(i, i) for i in range(lo.shape[1])])
    assert torch.allclose(ln[:, order], lo, atol=1e-5)


def test_transplant_tied_model_to_sentencepiece(cli, tiny_qwen, trained, tmp_path):
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    out = tmp_path / "qwen-sp"
    res = cli("transplant-tokenizer", "--model", tiny_qwen, "--tokenizer", trained["sentencepiece-bpe"], "-o", out, "--no-check")
    assert res.exit_code == 0, res.stderr
    tgt, src = open_tokenizer(trained["sentencepiece-bpe"]), open_tokenizer(tiny_qwen)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == tgt.size and model.config.tie_word_embeddings
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == tgt.size and model.lm_head.weight.data_ptr() == emb.data_ptr()
    # AutoTokenizer would pick Qwen2Tokenizer from model_type and rebuild its own pre-tokenizer
    hf = PreTrainedTokenizerFast.from_pretrained(out)
    assert hf(TEXT, add_special_tokens=False)["input_ids"] == tgt.encode(TEXT)
    old = AutoModelForCausalLM.from_pretrained(tiny_qwen).get_input_embeddings().weight
    mapping = json.loads((out / "paw_vocab_map.json").read_text())
    for t, method, ids, _w in mapping["entries"]:
        if method == "exact":  # exact rows are copied verbatim
            assert torch.equal(emb[t], old[ids[0]])
            assert tgt.token_bytes(t) == src.token_bytes(ids[0])
    # 296 rows built, not more than the model's own 300: no tied-head warning
    built = tgt.size - sum(method in ("exact", "special") for _, method, _, _ in mapping["entries"])
    assert built == 296 and src.size == 300 and "warning:" not in res.stderr
    assert json.loads((out / "paw_transplant.json").read_text())["warnings"] == []


def test_a_tied_model_given_a_much_larger_vocabulary_is_warned(cli, tiny_qwen, tmp_path):
    """More built rows than the model has in all, and a tied head: each is also an output row (the
    SmolLM2 pair lost 17-167% in bits per byte that way), so the command says so."""
    from paw import zoo

    big = zoo.tiny_model(tmp_path / "big", "llama", vocab_size=1500)
    out = tmp_path / "qwen-big"
    res = cli("transplant-tokenizer", "--model", tiny_qwen, "--tokenizer", big, "-o", out, "--no-check")
    assert res.exit_code == 0, res.stderr
    mapping = json.loads((out / "paw_vocab_map.json").read_text())
    tgt = open_tokenizer(big)
    built = tgt.size - sum(method in ("exact", "special") for _, method, _, _ in mapping["entries"])
    assert built > 300
    record = json.loads((out / "paw_transplant.json").read_text())
    assert len(record["warnings"]) == 1 and record["warnings"][0].startswith(f"{built:,} of the {tgt.size:,} rows")
    assert f"warning: {built:,} of the {tgt.size:,} rows are built, not copied, and the head is tied" in res.stderr


def test_transplant_to_rank_file_writes_loadable_tokenizer(cli, tiny_llama, tmp_path):
    import base64

    from transformers import AutoTokenizer

    src = open_tokenizer(tiny_llama)
    # a rank file with the same 300-id space: the regular tokens' bytes at their ids would not be a valid
    # BPE rank table (ids 0..3 are specials), so build one from the first 256 single bytes only
    ranks = {bytes([b]): b for b in range(256)}
    path = tmp_path / "bytes.tiktoken"
    path.write_text("".join(f"{base64.b64encode(k).decode()} {v}\n" for k, v in ranks.items()))
    out = tmp_path / "bytes-model"
    res = cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", path, "-o", out, "--check-texts", "3")
    assert res.exit_code == 0, res.stderr
    hf = AutoTokenizer.from_pretrained(out)
    assert hf("hé", add_special_tokens=False)["input_ids"] == list("hé".encode())
    cov = json.loads((out / "paw_transplant.json").read_text())["coverage"]
    assert cov["exact"] == len(set(ranks) & set(src.bytes_to_id))


def test_analyze_outputs_are_deterministic(cli, tiny_llama, trained, tmp_path):
    outs = []
    for name in ("a", "b"):
        res = cli("analyze-tokenizers", "-s", tiny_llama, "-t", trained["wordpiece"], "-o", tmp_path / name)
        assert res.exit_code == 0, res.stderr
        outs.append(tmp_path / name)
    files = sorted(p.name for p in outs[0].iterdir())
    assert files == ["bytes_per_token.png", "encoding.csv", "length_ratio.png", "report.json", "source_only.txt",
                     "target_only.txt"]
    for f in files:
        if f != "report.json":  # its command names the output folder
            assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    report = json.loads((outs[0] / "report.json").read_text())
    other = json.loads((outs[1] / "report.json").read_text())
    assert report.pop("command").replace(str(outs[0]), "OUT") == other.pop("command").replace(str(outs[1]), "OUT")
    assert report == other
    assert report["sizes"]["source"]["embedding_rows"] == 300
    assert report["vocabulary"]["source_only"] == len((outs[0] / "source_only.txt").read_text().splitlines())
    assert {"chinese", "code", "latin"} <= set(report["encoding"]["by_script"])
    assert "jaccard" in res.stdout


def test_align_vocab_cli_round_trip(cli, tiny_llama, trained, tmp_path):
    from paw.io.vocab_map import read_vocab_map

    out = tmp_path / "map.json"
    res = cli("align-vocab", "-s", tiny_llama, "-t", trained["wordpiece"], "-o", out,
              "--method", "exact,decompose", "--method", "nearest-string")
    assert res.exit_code == 0, res.stderr
    m = read_vocab_map(out)
    assert m.target_size == open_tokenizer(trained["wordpiece"]).size and m.coverage()["unmapped"] == 0
    res = cli("align-vocab", "-s", tiny_llama, "-t", trained["wordpiece"], "-o", tmp_path / "sem.json",
              "--method", "exact,semantic", "--source-model", tiny_llama)
    assert res.exit_code == 0, res.stderr
    assert read_vocab_map(tmp_path / "sem.json").coverage().get("semantic", 0) > 0
    (tmp_path / "c.txt").write_text("the cat sat on the mat\n北京 tokenizers\n")
    res = cli("align-vocab", "-s", tiny_llama, "-t", trained["wordpiece"], "-o", tmp_path / "f.json",
              "--method", "exact,frequency", "--corpus", tmp_path / "c.txt")
    assert res.exit_code == 0, res.stderr
    freq = read_vocab_map(tmp_path / "f.json")
    assert freq.coverage()["frequency"] == m.coverage()["decompose"]  # same decompositions, reweighted


@pytest.mark.parametrize("args, message", [
    (["align-vocab", "-s", "{model}", "-t", "/nonexistent/tok", "-o", "{tmp}/m.json"], "no such file"),
    (["align-vocab", "-s", "{model}", "-t", "{model}", "-o", "{tmp}/m.json", "--method", "magic"], "unknown alignment"),
    (["align-vocab", "-s", "{model}", "-t", "{model}", "-o", "{tmp}/m.json", "--method", "semantic"], "--source-model"),
    (["align-vocab", "-s", "{tmp}/bad.json", "-t", "{model}", "-o", "{tmp}/m.json"], "bad.json"),
    (["transplant-tokenizer", "--model", "{model}", "--tokenizer", "{model}", "-o", "{tmp}/o", "--vocab-map", "{tmp}/bad.json"],
     "not a vocabulary mapping"),
    (["transplant-tokenizer", "--model", "{model}", "--tokenizer", "{model}", "-o", "{tmp}/o", "--init", "random"], "--init"),
    (["analyze-tokenizers", "-s", "{model}", "-t", "{model}", "-o", "{tmp}/a", "--corpus", "{tmp}/none.txt"],
     "no such corpus"),
])
def test_bad_input_exits_2(cli, tiny_llama, tmp_path, args, message):
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    res = cli(*[a.format(model=tiny_llama, tmp=tmp_path) for a in args])
    assert res.exit_code == 2 and message in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "a").exists() and not (tmp_path / "m.json").exists()
