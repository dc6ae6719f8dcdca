"""Options first for ``paw bpe``: each command reads ``--config FILE.yaml`` (keys: the flags without ``--``), a flag
typed beside the file wins, and a bad value is refused naming its key; the text files stay arguments."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("bpe-options") / "english.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. Tokenizers cut text into pieces.\n" * 50)
    return path


def test_bpe_train_reads_a_config_file_and_typed_flags_win(cli, corpus, tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text(f"vocab-size: 300\noutput: {tmp_path / 'a'}\npattern: gpt2\nprocesses: 1\n"
                      "special_tokens: [' <|sp|>', '<|a,b|>']\n")   # tokens as written: a space, a comma
    by_file = cli("bpe", "train", corpus, "--config", config, "--vocab-size", "290")   # the typed size wins
    assert by_file.exit_code == 0, by_file.stderr
    by_flags = cli("bpe", "train", corpus, "--vocab-size", "290", "--output", tmp_path / "b", "--pattern", "gpt2",
                   "--processes", "1", "--special-tokens", " <|sp|>", "--special-tokens", "<|a,b|>")
    assert by_flags.exit_code == 0, by_flags.stderr
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    assert by_file.stdout.split("->")[0] == by_flags.stdout.split("->")[0] == "32 merges, vocabulary 290 "
    config.write_text(f"vocab_size: '300'\noutput: {tmp_path / 'c'}\n")
    bad = cli("bpe", "train", corpus, "--config", config)
    assert bad.exit_code == 2 and "vocab_size: expected a number, not '300'" in bad.stderr, bad.stderr


@pytest.fixture(scope="module")
def model(corpus, tmp_path_factory):
    from paw.bpe.options import TrainOptions
    from paw.bpe.pipeline import train_files

    prefix = tmp_path_factory.mktemp("bpe-model") / "tok"
    train_files(TrainOptions(files=(corpus,), vocab_size=300, output=prefix, special_tokens=("<|end|>",),
                             processes=1))
    return f"{prefix}.model"


def test_bpe_encode_reads_a_config_file_and_typed_flags_win(cli, model, tmp_path):
    config = tmp_path / "encode.yaml"
    config.write_text(f"tokenizer: {model}\ntext: 'the dog<|end|>'\nallowed-special: all\n")
    by_file = cli("bpe", "encode", "--config", config, "--text", "the fox<|end|>")
    by_flags = cli("bpe", "encode", "--tokenizer", model, "--text", "the fox<|end|>", "--allowed-special", "all")
    assert by_file.exit_code == 0 and by_file.stdout == by_flags.stdout and by_file.stdout.split()[-1] == "299"
    config.write_text(f"tokenizer: {model}\ntext: 'the dog<|end|>'\nallowed-special: 7\n")
    bad = cli("bpe", "encode", "--config", config)
    assert bad.exit_code == 2 and "allowed-special: expected a list of strings, not 7" in bad.stderr, bad.stderr


def test_bpe_decode_reads_a_config_file_and_typed_flags_win(cli, model, tmp_path):
    ids = cli("bpe", "encode", "--tokenizer", model, "--text", "lazy dog").stdout.split()
    config = tmp_path / "decode.yaml"
    config.write_text(f"tokenizer: {model}\nids: '1 2 3'\n")
    by_file = cli("bpe", "decode", "--config", config, "--ids", *ids)   # the typed ids win, extra ones too
    assert by_file.exit_code == 0 and by_file.stdout == "lazy dog\n", by_file.stderr
    config.write_text(f"tokenizer: {model}\n")
    missing = cli("bpe", "decode", "--config", config)
    assert missing.exit_code == 2 and "missing option '--ids'" in missing.stderr, missing.stderr


def test_bpe_compare_reads_a_config_file_and_typed_flags_win(cli, corpus, model, tmp_path):
    config = tmp_path / "compare.yaml"
    config.write_text(f"tokenizers: [{model}]\nplot: {tmp_path / 'a.png'}\n")
    by_file = cli("bpe", "compare", corpus, "--config", config, "--plot", tmp_path / "b.png")
    assert by_file.exit_code == 0, by_file.stderr
    assert not (tmp_path / "a.png").exists() and (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    by_flags = cli("bpe", "compare", corpus, "--tokenizers", model, "--plot", tmp_path / "b.png")
    assert by_flags.stdout == by_file.stdout
    config.write_text(f"tokenizers: [{model}]\nplot: {tmp_path / 'a.png'}\nfiles: [{corpus}]\n")
    bad = cli("bpe", "compare", corpus, "--config", config)
    assert bad.exit_code == 2 and "unknown key 'files'" in bad.stderr, bad.stderr
