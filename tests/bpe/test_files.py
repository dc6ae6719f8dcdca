"""PAW .model, tiktoken rank files and tokenizer.json: round trips, and loading in HF libraries."""

from __future__ import annotations

import json

import pytest

from paw.bpe import PATTERNS, BpeEncoder, train_tokenizer
from paw.errors import PawError
from paw.io.bpe_files import (
    read_bpe,
    read_text_files,
    write_hf_tokenizer_json,
    write_paw_model,
    write_tiktoken_ranks,
)

SAMPLES = [
    "The lowest lower low, 1234567 apples and 89 pears!\n\n  indented\tline  ",
    "北京是中国的首都。 emoji 😀 <|endoftext|> café",
    "def f(x):\n    return x ** 2  # comment\n",
    "",
]


@pytest.fixture(scope="module")
def trained():
    text = "\n".join(SAMPLES[:3]) * 30 + "the quick brown fox jumps over the lazy dog 2024 " * 40
    return train_tokenizer([text], 350, pattern=PATTERNS["gpt4"], special_tokens=["<|endoftext|>", "<|pad|>"])


def test_paw_model_round_trip(trained, tmp_path):
    path = write_paw_model(tmp_path / "tok", mergeable_ranks=trained.mergeable_ranks, pattern=trained.pattern,
                           special_tokens=trained.special_tokens, merges=trained.merges)
    assert path.read_text().splitlines()[0] == "paw-bpe v1"
    back = read_bpe(path)
    assert (back.kind, back.mergeable_ranks, back.pattern, back.special_tokens, back.merges) == (
        "paw", trained.mergeable_ranks, trained.pattern, trained.special_tokens, trained.merges)
    vocab = (tmp_path / "tok.vocab").read_text().splitlines()
    assert len(vocab) == len(trained.mergeable_ranks) + 2 and vocab[256].startswith("256\t[")
    assert "<- [" in vocab[256] and vocab[-1] == "349\t<|pad|>\t(special)"


def test_paw_model_from_ranks_only_and_refusal(trained, tmp_path):
    write_paw_model(tmp_path / "r", mergeable_ranks=trained.mergeable_ranks, pattern=None, special_tokens={})
    assert read_bpe(tmp_path / "r.model").mergeable_ranks == trained.mergeable_ranks
    broken = {bytes([b]): i for i, b in enumerate(range(256))} | {b"abc": 256}  # BPE cannot build "abc"
    with pytest.raises(PawError, match="merge list"):
        write_paw_model(tmp_path / "b", mergeable_ranks=broken, pattern=None, special_tokens={})
    assert not (tmp_path / "b.model").exists()


def test_tiktoken_rank_file_round_trip(trained, tmp_path):
    import tiktoken.load

    path = write_tiktoken_ranks(tmp_path / "cl100k_base.tiktoken", trained.mergeable_ranks)
    assert tiktoken.load.load_tiktoken_bpe(str(path)) == trained.mergeable_ranks
    back = read_bpe(path)
    assert back.kind == "tiktoken" and back.mergeable_ranks == trained.mergeable_ranks
    assert back.pattern == PATTERNS["gpt4"] and back.special_tokens["<|endoftext|>"] == 100257  # known by name
    assert read_bpe(write_tiktoken_ranks(tmp_path / "mine.tiktoken", trained.mergeable_ranks)).pattern is None


def test_hf_export_loads_and_encodes_identically(trained, tmp_path):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    path = write_hf_tokenizer_json(tmp_path / "tokenizer.json", mergeable_ranks=trained.mergeable_ranks,
                                   pattern=trained.pattern, special_tokens=trained.special_tokens)
    paw = trained.encoder()
    hf = Tokenizer.from_file(str(path))
    fast = PreTrainedTokenizerFast(tokenizer_file=str(path))
    for text in SAMPLES + ["12345678901 and 1 22 333 4444", "x" * 200 + " " * 50 + "\n\n\n"]:
        ids = paw.encode(text, allowed_special="all")
        assert hf.encode(text).ids == ids
        assert fast.encode(text, add_special_tokens=False) == ids
        assert hf.decode(ids, skip_special_tokens=False) == text
    back = read_bpe(path)
    assert (back.kind, back.mergeable_ranks, back.pattern, back.special_tokens) == (
        "hf", trained.mergeable_ranks, trained.pattern, trained.special_tokens)


def test_hf_export_keeps_special_ids_with_gaps(trained, tmp_path):
    """``tokenizers`` renumbers added tokens unless they are in the model vocabulary (cl100k has a gap)."""
    from tokenizers import Tokenizer

    specials = {"<|end of text|>": 400, "<|中|>": 1000}
    path = write_hf_tokenizer_json(tmp_path / "tokenizer.json", mergeable_ranks=trained.mergeable_ranks,
                                   pattern=trained.pattern, special_tokens=specials)
    text = "low <|end of text|> lower<|中|>"
    ids = BpeEncoder(trained.mergeable_ranks, trained.pattern, specials).encode(text, allowed_special="all")
    assert 400 in ids and ids[-1] == 1000
    assert Tokenizer.from_file(str(path)).encode(text).ids == ids
    back = read_bpe(path)
    assert back.special_tokens == specials and back.mergeable_ranks == trained.mergeable_ranks


def test_read_gpt2_style_tokenizer_json(tmp_path):
    """A tokenizer.json trained by ``tokenizers`` itself (ByteLevel pre-tokenizer, special in vocab)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(SAMPLES) * 20], trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    bpe = read_bpe(tmp_path)  # a folder means its tokenizer.json
    assert bpe.pattern == PATTERNS["gpt2"] and bpe.special_tokens == {"<|endoftext|>": 0}
    n_vocab = len(json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"])
    assert b"<|endoftext|>" not in bpe.mergeable_ranks and len(bpe.mergeable_ranks) == n_vocab - 1 > 300
    paw = BpeEncoder(bpe.mergeable_ranks, bpe.pattern, bpe.special_tokens)
    for text in SAMPLES:
        assert paw.encode(text, allowed_special="all") == tok.encode(text).ids


def test_bad_files_are_paw_errors(tmp_path):
    (tmp_path / "junk.txt").write_text("this is not a tokenizer\n")
    with pytest.raises(PawError, match="base64"):
        read_bpe(tmp_path / "junk.txt")
    with pytest.raises(PawError, match="not found"):
        read_bpe(tmp_path / "missing.model")
    (tmp_path / "wp.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))
    with pytest.raises(PawError, match="not a byte-level BPE"):
        read_bpe(tmp_path / "wp.json")
    (tmp_path / "sp.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"▁the": 0}, "merges": []}}))
    with pytest.raises(PawError, match="not byte-level"):
        read_bpe(tmp_path / "sp.json")
    (tmp_path / "v2.model").write_text("paw-bpe v2\n")
    with pytest.raises(PawError, match="version"):
        read_bpe(tmp_path / "v2.model")
    (tmp_path / "cut.model").write_text("paw-bpe v1\npattern null\n")
    with pytest.raises(PawError, match="malformed"):
        read_bpe(tmp_path / "cut.model")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(PawError, match=r"not valid UTF-8 \(byte 3"):
        read_text_files([tmp_path / "latin1.txt"])


@pytest.mark.slow
def test_hf_export_of_cl100k_matches_tiktoken(real_tables, tmp_path):
    """The full cl100k table through tokenizer.json (possessive ``{1,3}+`` rewritten for Oniguruma)."""
    import tiktoken
    from tokenizers import Tokenizer

    ranks, specials, pattern = real_tables("cl100k")
    path = write_hf_tokenizer_json(tmp_path / "tokenizer.json", mergeable_ranks=ranks, pattern=pattern,
                                   special_tokens=specials)
    hf, ref = Tokenizer.from_file(str(path)), tiktoken.Encoding("c", pat_str=pattern, mergeable_ranks=ranks,
                                                                 special_tokens=specials)
    for text in SAMPLES + ["1234567 12 1", "   x\n\n  \n", "I'LL don't WE'VE"]:
        assert hf.encode(text).ids == ref.encode(text, allowed_special="all")
