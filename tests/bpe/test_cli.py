"""``paw bpe`` end to end through the CLI, and its one-line errors (exit 2)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe-cli")
    en = root / "english.txt"
    zh = root / "chinese.txt"
    en.write_text("The quick brown fox jumps over the lazy dog. Tokenizers cut text into pieces.\n" * 50)
    zh.write_text("光合作用是绿色植物利用阳光把水和二氧化碳转化为糖和氧气的过程。\n" * 50)
    return root, en, zh


@pytest.fixture(scope="module")
def trained(corpus):
    from paw.cli import main

    root, en, zh = corpus
    prefix = root / "tok"
    code = main(["bpe", "train", str(en), str(zh), "--vocab-size", "350", "--output", str(prefix),
                 "--pattern", "llama3", "--special-tokens", "<|endoftext|>", "--export-hf", str(root / "hf"),
                 "--processes", "1"])
    assert code == 0
    return prefix


def test_train_writes_model_vocab_and_hf(trained):
    from paw.io.bpe_files import read_bpe

    model = read_bpe(f"{trained}.model")
    assert len(model.mergeable_ranks) == 349 and model.special_tokens == {"<|endoftext|>": 349}
    assert (trained.parent / "tok.vocab").exists()
    assert read_bpe(trained.parent / "hf" / "tokenizer.json").mergeable_ranks == model.mergeable_ranks
    assert (trained.parent / "hf" / "paw_bpe.json").exists()


def test_encode_decode_round_trip(cli, trained):
    text = "The lazy dog 光合作用<|endoftext|>"
    out = cli("bpe", "encode", "--tokenizer", f"{trained}.model", "--text", text, "--allowed-special", "all")
    assert out.exit_code == 0, out.stderr
    ids = out.stdout.split()
    assert ids[-1] == "349" and len(ids) < len(text.encode())
    hf = cli("bpe", "encode", "--tokenizer", trained.parent / "hf" / "tokenizer.json", "--text", text,
             "--allowed-special", "<|endoftext|>")
    assert hf.stdout.split() == ids
    back = cli("bpe", "decode", "--tokenizer", f"{trained}.model", "--ids", *ids)
    assert back.exit_code == 0 and back.stdout == text + "\n"
    assert cli("bpe", "decode", "--tokenizer", f"{trained}.model", "--ids", ",".join(ids)).stdout == text + "\n"


def test_compare_prints_table_and_plot(cli, corpus, trained, tmp_path):
    root, en, zh = corpus
    plot = tmp_path / "cmp.png"
    out = cli("bpe", "compare", "--tokenizers", f"{trained}.model", trained.parent / "hf" / "tokenizer.json",
              en, zh, "--plot", plot)  # the issue's `--tokenizers T1 T2 FILES...` spelling
    assert out.exit_code == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:5]]
    assert [r[:2] for r in rows] == [["tok", "english.txt"], ["tok", "chinese.txt"], ["hf", "english.txt"],
                                     ["hf", "chinese.txt"]]
    assert rows[0][2:] == rows[2][2:]  # same tokenizer in two formats: same numbers
    assert float(rows[0][3]) > 2.0  # a trained tokenizer compresses its own corpus
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors_are_one_line_exit_2(cli, corpus, trained, tmp_path):
    root, en, _ = corpus
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok \xff\xfe broken")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cases = [
        (("bpe", "train", bad, "--vocab-size", "300", "--output", tmp_path / "a"), "not valid UTF-8"),
        (("bpe", "train", empty, "--vocab-size", "300", "--output", tmp_path / "b"), "corpus is empty"),
        (("bpe", "train", en, "--vocab-size", "256", "--special-tokens", "<s>", "--output", tmp_path / "c"),
         "too small"),
        (("bpe", "train", en, "--vocab-size", "300", "--pattern", "gpt5", "--output", tmp_path / "d"),
         "unknown pattern 'gpt5'"),
        (("bpe", "train", en, "--vocab-size", "300", "--pattern", "(unclosed", "--output", tmp_path / "e"),
         "invalid pre-tokenization regex"),
        (("bpe", "train", en, "--vocab-size", "300", "--output", trained), "already exists"),
        (("bpe", "encode", "--tokenizer", f"{trained}.model", "--text", "x<|endoftext|>"), "special token"),
        (("bpe", "encode", "--tokenizer", f"{trained}.model"), "exactly one of --text and --input"),
        (("bpe", "encode", "--tokenizer", tmp_path / "nope.model", "--text", "x"), "not found"),
        (("bpe", "decode", "--tokenizer", f"{trained}.model", "--ids", "1 x"), "must be integers"),
        (("bpe", "decode", "--tokenizer", f"{trained}.model", "--ids", "123456"), "not in this vocabulary"),
        (("bpe", "compare", "--tokenizers", f"{trained}.model", f"{trained}.model"), "no text files"),
        (("bpe", "compare", "--tokenizers", f"{trained}.model", bad), "not valid UTF-8"),
    ]
    for args, message in cases:
        out = cli(*args)
        assert out.exit_code == 2, (args, out.stdout, out.stderr)
        last = out.stderr.splitlines()[-1]
        assert last.startswith("error: ") and message in last and "Traceback" not in out.stderr, out.stderr
    assert not list(tmp_path.glob("a.*")) and not list(tmp_path.glob("b.*"))


def test_export_has_a_tokenizer_config_transformers_4_and_5_read(trained):
    """``--export-hf`` writes ``tokenizer_config.json`` (transformers 4 cannot open a bare tokenizer.json
    folder) naming ``PreTrainedTokenizerFast``, with the roles the special tokens' spellings give."""
    import json

    from transformers import AutoTokenizer

    hf = trained.parent / "hf"
    assert json.loads((hf / "tokenizer_config.json").read_text()) == {
        "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}
    tok = AutoTokenizer.from_pretrained(hf)
    assert (tok.eos_token, tok.eos_token_id, len(tok)) == ("<|endoftext|>", 349, 350)
    assert tok("The lazy dog<|endoftext|>")["input_ids"][-1] == 349
