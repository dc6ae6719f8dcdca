"""`paw extend-tokenizer` end to end on zoo models: transformers loads the result, new tokens encode,
rows follow the chosen init, and text made of old tokens gives the original logits exactly."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from paw import zoo
from paw.data import sample_texts
from tests.extend.conftest import NEW_WORDS, load, logits


def _extend(cli, model, out, *args):
    result = cli("extend-tokenizer", "--model", model, "--output", out, "--device", "cpu", *args)
    assert result.exit_code == 0, result.stderr
    return result


def _old_text_ids(old_tok, new_tok, old_size):
    """Encodings of sample lines that use no new token (and that the new tokenizer encodes unchanged)."""
    out = []
    for line in sample_texts("en")[:40]:
        ids = new_tok.encode(line, add_special_tokens=False)
        if ids and max(ids) < old_size:
            assert ids == old_tok.encode(line, add_special_tokens=False)
            out.append(ids[:48])
    assert len(out) >= 5
    return out


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen", "tiny_gemma"])
def test_byte_level_extension_loads_encodes_and_keeps_logits(cli, request, tmp_path, fixture):
    base = request.getfixturevalue(fixture)
    out = tmp_path / "ext"
    res = _extend(cli, base, out, *sum((["--tokens", w] for w in NEW_WORDS), []), "--pad-to-multiple", "64")
    assert "as real byte-bpe vocabulary" in res.stdout and "merge(s) appended" in res.stdout
    assert "added 1 token(s) as added tokens" in res.stdout  # "New York" spans two pre-tokens

    old_model, old_tok = load(base)
    new_model, new_tok = load(out)
    old_size = len(old_tok)
    manifest = json.loads((out / "paw_extend.json").read_text())
    ids = {text: i for route in manifest["new_tokens"].values() for text, i in route.items()}
    assert set(manifest["new_tokens"]) == {"bpe", "bpe-intermediate", "added"}
    for word in NEW_WORDS:
        assert new_tok.encode(word, add_special_tokens=False) == [ids[word]]
    # produced inside running text by BPE, not only as a literal match
    assert ids[" hello"] in new_tok.encode("she said hello to PAW", add_special_tokens=False)
    rows = new_model.get_input_embeddings().weight.shape[0]
    assert rows % 64 == 0 and rows == new_model.config.vocab_size >= len(new_tok) > old_size
    tied = fixture != "tiny_llama"
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert ("lm_head.weight" in f.keys()) is (not tied)
    assert (new_model.get_output_embeddings().weight.data_ptr()
            == new_model.get_input_embeddings().weight.data_ptr()) is tied
    for ids_ in _old_text_ids(old_tok, new_tok, old_size):
        a, b = logits(old_model, ids_), logits(new_model, ids_)
        assert torch.equal(a, b[:, :old_size])


@pytest.mark.parametrize("init", ["mean", "subtoken-mean", "interpolate"])
def test_rows_follow_the_init(cli, tiny_llama, tmp_path, init):
    out = tmp_path / init
    _extend(cli, tiny_llama, out, "--tokens", " hello", "--tokens", "PAW", "--init", init)
    old_model, old_tok = load(tiny_llama)
    new_model, _ = load(out)
    manifest = json.loads((out / "paw_extend.json").read_text())
    for name in ("get_input_embeddings", "get_output_embeddings"):  # untied: both grow, each from itself
        old_w = getattr(old_model, name)().weight.detach()
        new_w = getattr(new_model, name)().weight.detach()
        mean = old_w[old_w.norm(dim=1) > 0].mean(0)  # the pad row of nn.Embedding starts at zero
        for text, new_id in (kv for route in manifest["new_tokens"].values() for kv in route.items()):
            pieces = old_tok.encode(text, add_special_tokens=False)
            sub = old_w[pieces].mean(0)
            want = {"mean": mean, "subtoken-mean": sub, "interpolate": 0.5 * mean + 0.5 * sub}[init]
            torch.testing.assert_close(new_w[new_id], want, rtol=1e-6, atol=1e-6)
        assert torch.equal(new_w[: old_w.shape[0]], old_w)


def test_mean_skips_never_trained_rows(cli, tiny_qwen, tmp_path):
    from paw.io.checkpoint import open_checkpoint
    from paw.io.writer import write_checkpoint

    ckpt = open_checkpoint(tiny_qwen)
    tensors = {k: ckpt[k] for k in ckpt}
    emb = tensors["model.embed_tokens.weight"].clone()
    emb[250:] = 0  # "reserved" rows that were never trained
    tensors["model.embed_tokens.weight"] = emb
    zeroed = write_checkpoint(tmp_path / "zeroed", tensors, copy_from=tiny_qwen)
    _extend(cli, zeroed, tmp_path / "ext", "--tokens", "PAW", "--init", "mean")
    new_model, _ = load(tmp_path / "ext")
    trained = emb[:250][emb[:250].norm(dim=1) > 0]  # also leaves out the pad row, zero from the start
    assert len(trained) == 249
    torch.testing.assert_close(new_model.get_input_embeddings().weight[-1], trained.mean(0))


def test_added_tokens_for_non_byte_level_and_special(cli, tiny_llama_sp, tmp_path):
    out = tmp_path / "sp"
    res = _extend(cli, tiny_llama_sp, out, "--tokens", "tokenizerization", "--tokens", "New York")
    assert "added 2 token(s) as added tokens" in res.stdout and "not byte-level BPE" in res.stdout
    old_model, old_tok = load(tiny_llama_sp)
    new_model, new_tok = load(out)
    assert len(new_tok) == len(old_tok) + 2
    assert new_tok.encode("tokenizerization", add_special_tokens=False) == [len(old_tok)]
    ids = old_tok.encode("the cat sat on the mat", add_special_tokens=False)
    assert new_tok.encode("the cat sat on the mat", add_special_tokens=False) == ids
    assert torch.equal(logits(old_model, ids), logits(new_model, ids)[:, : len(old_tok)])

    out2 = tmp_path / "special"
    res = _extend(cli, out, out2, "--tokens", "<|tool|>", "--special")
    assert "special added tokens" in res.stdout
    _, tok2 = load(out2)
    tid = tok2.convert_tokens_to_ids("<|tool|>")
    assert tok2.encode("a<|tool|>b", add_special_tokens=False).count(tid) == 1
    assert "<|tool|>" not in tok2.decode(tok2.encode("a<|tool|>b"), skip_special_tokens=True)


def test_from_tokenizer_adds_the_missing_vocabulary(cli, tiny_llama, tmp_path):
    other = zoo.train_tokenizer(sample_texts("multi"), 420)
    other.save_pretrained(tmp_path / "t2")
    out = tmp_path / "ext"
    res = _extend(cli, tiny_llama, out, "--from-tokenizer", tmp_path / "t2", "--init", "subtoken-mean")
    assert "skipped" in res.stdout  # tokens both tokenizers share
    _, old_tok = load(tiny_llama)
    _, new_tok = load(out)
    new_vocab = new_tok.get_vocab()
    t2 = json.loads((tmp_path / "t2" / "tokenizer.json").read_text())["model"]["vocab"]
    numbers = [t for t in t2 if t.removeprefix("Ġ").isascii() and t.removeprefix("Ġ").isdigit()]
    assert f"left out {len(numbers)} number string(s)" in res.stdout
    numbers = [t for t in numbers if t not in old_tok.get_vocab()]
    assert numbers
    for token in t2:  # every byte-level token of T2 but its numbers now exists and encodes to itself
        if token.startswith("<|"):
            continue
        assert (token in new_vocab) != (token in numbers), token
        if token in numbers:
            continue
        text = new_tok.convert_tokens_to_string([token])
        if "\ufffd" not in text:
            assert new_tok.encode(text, add_special_tokens=False) == [new_vocab[token]], token
    for line in sample_texts("multi"):  # and text still decodes to itself
        assert new_tok.decode(new_tok.encode(line, add_special_tokens=False)) == line


def test_number_strings_are_skipped_unless_kept(tmp_path):
    from paw.vocab.extend_pipeline import split_numbers, tokens_from

    assert split_numbers([b" 2024", b"12", b"x1", b"  7", b" 3.5", "42"]) == ([b"x1", b"  7", b" 3.5"], [b" 2024", b"12", "42"])
    other = zoo.train_tokenizer(["year 2024 and 12345 or 777 " * 30, "plain words here " * 30], 300)
    other.save_pretrained(tmp_path / "t2")
    kept = tokens_from(from_tokenizer=tmp_path / "t2", skip_numbers=False)
    skipped = tokens_from(from_tokenizer=tmp_path / "t2")
    assert split_numbers(kept)[1] and not split_numbers(skipped)[1]
    assert skipped == split_numbers(kept)[0]
    assert tokens_from(tokens=["2024"]) == ["2024"]  # named tokens are never filtered


def test_from_paw_bpe_model_file(cli, tiny_llama, tmp_path):
    from paw.bytelevel.alphabet import token_to_str
    from paw.io import bpe_paw_model

    ranks = {bytes([b]): i for i, b in enumerate(range(256))}
    for word in (b"zz", b"zzq", b" zzq"):
        ranks[word] = len(ranks)
    model_file = bpe_paw_model.write_paw_model(tmp_path / "t2", mergeable_ranks=ranks, pattern=None, special_tokens={})
    out = tmp_path / "ext"
    _extend(cli, tiny_llama, out, "--from-tokenizer", model_file)
    _, new_tok = load(out)
    vocab = new_tok.get_vocab()
    assert token_to_str(b" zzq") in vocab
    assert new_tok.encode(" zzq", add_special_tokens=False) == [vocab[token_to_str(b" zzq")]]


def test_bad_inputs_are_one_line_errors(cli, tiny_llama, tmp_path):
    out = tmp_path / "x"
    cases = [
        (("--model", tiny_llama, "--output", out), "exactly one of --tokens"),
        (("--model", tiny_llama, "--output", out, "--tokens", "a", "--tokens-file", tmp_path / "f"), "exactly one"),
        (("--model", tiny_llama, "--output", out, "--tokens-file", tmp_path / "nope.txt"), "file not found"),
        (("--model", tiny_llama, "--output", out, "--tokens", "t", "--tokens", "a"), "nothing to add"),
        (("--model", tmp_path, "--output", out, "--tokens", "zzz"), "no tokenizer.json"),
        (("--model", tiny_llama, "--output", tiny_llama, "--tokens", "zzz"), "already exists"),
    ]
    for args, message in cases:
        res = cli("extend-tokenizer", *args)
        assert res.exit_code == 2, (args, res.stdout)
        assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert not out.exists()


def test_padded_model_reuses_spare_rows(cli, tiny_qwen, tmp_path):
    first = tmp_path / "padded"
    _extend(cli, tiny_qwen, first, "--tokens", "PAW", "--pad-to-multiple", "64")
    model1, tok1 = load(first)
    assert model1.config.vocab_size == 320 and len(tok1) < 320
    res = _extend(cli, first, tmp_path / "again", "--tokens", " zebra", "--init", "mean")
    assert "320 -> 320 rows" in res.stdout
    model2, tok2 = load(tmp_path / "again")
    zid = tok2.encode(" zebra", add_special_tokens=False)
    assert len(zid) == 1 and len(tok1) <= zid[0] < 320
    emb1, emb2 = model1.get_input_embeddings().weight, model2.get_input_embeddings().weight
    trained = emb1[emb1.norm(dim=1) > 0]  # the zero padding rows of the first step are left out
    torch.testing.assert_close(emb2[zid[0]], trained.mean(0))
    ids = tok1.encode("the quick brown fox", add_special_tokens=False)
    assert torch.equal(logits(model1, ids)[:, : len(tok1)], logits(model2, ids)[:, : len(tok1)])


def test_max_intermediates_falls_back_to_added_tokens(cli, tiny_llama, tmp_path):
    res = _extend(cli, tiny_llama, tmp_path / "o", "--tokens", " photosynthesis", "--max-intermediates", "0")
    assert "added 1 token(s) as added tokens" in res.stdout and "intermediate token(s) needed" not in res.stdout
    _, tok = load(tmp_path / "o")
    assert len(tok) == 301 and tok.encode(" photosynthesis", add_special_tokens=False) == [300]


def test_same_inputs_give_byte_identical_folders(cli, tiny_qwen, tmp_path):
    for name in ("a", "b"):
        _extend(cli, tiny_qwen, tmp_path / name, "--tokens", " zebra", "--tokens", "<x>", "--pad-to-multiple", "8")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for f in files:
        if f not in ("paw_extend.json", "README.md"):  # they record the output path of the command line
            assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    card = (tmp_path / "a" / "README.md").read_text().replace("# a\n", "# b\n").replace(f"{tmp_path / 'a'} ",
                                                                                          f"{tmp_path / 'b'} ")
    assert card == (tmp_path / "b" / "README.md").read_text()  # no clock, no host: only the output's name differs


def test_tokens_file_keeps_spaces_and_json_lists(cli, tiny_qwen, tmp_path):
    (tmp_path / "w.txt").write_text(" zebra\nPAW\n\n", encoding="utf-8")
    (tmp_path / "w.json").write_text(json.dumps([" zebra", "PAW"]), encoding="utf-8")
    for name in ("w.txt", "w.json"):
        _extend(cli, tiny_qwen, tmp_path / f"o-{name}", "--tokens-file", tmp_path / name)
        _, tok = load(tmp_path / f"o-{name}")
        assert len(tok.encode(" zebra", add_special_tokens=False)) == 1
        assert len(tok.encode("zebra", add_special_tokens=False)) > 1  # the space belongs to the token
    (tmp_path / "bad.json").write_text('{"a": 1}', encoding="utf-8")
    res = cli("extend-tokenizer", "--model", tiny_qwen, "--output", tmp_path / "x", "--tokens-file", tmp_path / "bad.json")
    assert res.exit_code == 2 and "expected a JSON list of strings" in res.stderr
